"""Ground truth for the formation point, from an atom judge: when do the verdicts stop changing?

Where an exact judge exists (the shapes world's oracle), "the structure is fixed" can be checked
instead of inferred: score every atom of the prompt on the decoded ``x̂0`` of every step and on the
final image, and call a sample *settled* at step ``t`` when every atom's verdict
(``score >= pass_threshold``) on ``x̂0_t`` equals its verdict on the final image. The
*ground-truth formation step* is the first step ``t`` from which the settled fraction stays
``>= threshold`` (default 90%) at every later step — the first step after which the verdicts
agree for at least 90% of samples (issue 6's validation criterion). The selected knee should be
within one step of it.

A second, *causal* ground truth asks the question the window exists for — after which step can
exploration noise no longer change the verdicts? :func:`commitment` replays each sample's ODE
trajectory up to step ``t`` (same initial noise), switches to SDE steps (the trainer's ``eta``)
from ``t`` to the end, and compares the verdicts on that final image with the ODE final image's.
The *commitment step* is the first ``t`` from which at least ``threshold`` of the samples keep
every verdict. It needs no readable ``x̂0``: a blurred Tweedie estimate can fool a judge (two
nearby blobs read as one) long after the trajectory has committed to two objects, which makes
the ``x̂0`` criterion above late on small models whose mid-schedule estimates are soft.

Generic on purpose: any policy, any registered scorer and decomposer. Nothing here knows the
shapes world, so cast-windows does not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from cast_core.sampling import sample


@dataclass
class FormationTruth:
    """``agreement[t]``: fraction of samples whose atom verdicts on ``x̂0_t`` all equal those on
    the final image; ``step``: the first step from which ``agreement >= threshold`` holds to the
    end (``None`` cannot happen for a full schedule, since ``x̂0`` of the last step is the final
    image, but is kept for judges that disagree with themselves)."""

    agreement: list[float]
    atom_agreement: list[float]
    pass_agreement: list[float | None]
    step: int | None
    threshold: float
    samples: int

    @property
    def atom_step(self) -> int | None:
        """The same rule on ``atom_agreement`` (the fraction of single atom verdicts that match)."""
        return first_settled_step(self.atom_agreement, self.threshold)

    def to_dict(self) -> dict:
        return {
            "agreement": self.agreement,
            "atom_agreement": self.atom_agreement,
            "pass_agreement": self.pass_agreement,
            "step": self.step,
            "atom_step": self.atom_step,
            "threshold": self.threshold,
            "samples": self.samples,
        }


@dataclass
class Commitment:
    """``unchanged[t]``: fraction of samples whose verdicts all survive SDE noise from step ``t`` on;
    ``atom_unchanged[t]``: the same over single atom verdicts; ``step``: the first step from which
    ``unchanged >= threshold`` holds to the end."""

    unchanged: list[float]
    atom_unchanged: list[float]
    step: int | None
    threshold: float
    samples: int
    eta: float

    @property
    def atom_step(self) -> int | None:
        return first_settled_step(self.atom_unchanged, self.threshold)

    def to_dict(self) -> dict:
        return {
            "unchanged": self.unchanged,
            "atom_unchanged": self.atom_unchanged,
            "step": self.step,
            "atom_step": self.atom_step,
            "threshold": self.threshold,
            "samples": self.samples,
            "eta": self.eta,
        }


def _verdicts(scorer: Any, images: torch.Tensor, graphs: Sequence[Any], pass_threshold: float) -> list[torch.Tensor]:
    """One bool verdict per atom and image (``score >= pass_threshold``)."""
    return [s.float() >= pass_threshold for s in scorer.score(images, graphs).scores]


def _compare(verdicts: Sequence[torch.Tensor], final: Sequence[torch.Tensor]) -> tuple[torch.Tensor, float]:
    """Per image: do all its verdicts equal the reference ones; and how many single verdicts do."""
    same = [v == f for v, f in zip(verdicts, final)]
    return torch.tensor([bool(x.all()) for x in same]), float(sum(x.sum() for x in same))


def first_settled_step(agreement: Sequence[float], threshold: float) -> int | None:
    """The first ``t`` with ``agreement[t'] >= threshold`` for every ``t' >= t``."""
    step = None
    for t in range(len(agreement) - 1, -1, -1):
        if agreement[t] < threshold:
            break
        step = t
    return step


@torch.no_grad()
def verdict_agreement(
    policy: Any,
    prompts: Sequence[str],
    scorer: Any,
    decomposer: Any,
    *,
    num_steps: int,
    seeds: Sequence[int] = (0,),
    image_size: tuple[int, int] | None = None,
    batch_size: int = 8,
    pass_threshold: float = 0.5,
    threshold: float = 0.9,
) -> FormationTruth:
    """Sample ``prompts × seeds`` with the ODE (same seeding as :func:`cast_windows.curve.measure_curve`)
    and measure, per step, how many samples' verdicts already match the final image's."""
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts to measure verdict agreement on")
    graphs = {p: decomposer.decompose(p) for p in prompts}
    settled, atoms_same, atoms_total = [], torch.zeros(num_steps), 0
    passes_kept, passes_total = torch.zeros(num_steps), 0
    for seed in seeds:
        gen = torch.Generator().manual_seed(int(seed))
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            rollout = sample(
                policy, chunk, num_steps=num_steps, image_size=image_size, window=None, keep_x0=True, generator=gen
            )
            batch_graphs = [graphs[p] for p in chunk]
            final = _verdicts(scorer, rollout.images, batch_graphs, pass_threshold)
            rows = torch.zeros(len(chunk), num_steps, dtype=torch.bool)
            for t in range(num_steps):
                x0 = rollout.x0[:, t].to(rollout.final_latents.dtype)
                verdicts = _verdicts(scorer, policy.decode(x0, image_size), batch_graphs, pass_threshold)
                rows[:, t], same = _compare(verdicts, final)
                atoms_same[t] += same
                passes_kept[t] += float(sum((v & f).sum() for v, f in zip(verdicts, final)))
            atoms_total += sum(len(f) for f in final)
            passes_total += sum(int(f.sum()) for f in final)
            settled.append(rows)
    frac = torch.cat(settled).float().mean(0)
    agreement = [float(v) for v in frac]
    return FormationTruth(
        agreement=agreement,
        atom_agreement=[float(v) / max(atoms_total, 1) for v in atoms_same],
        pass_agreement=[float(v) / passes_total if passes_total else None for v in passes_kept],
        step=first_settled_step(agreement, threshold),
        threshold=threshold,
        samples=int(sum(r.shape[0] for r in settled)),
    )


@torch.no_grad()
def commitment(
    policy: Any,
    prompts: Sequence[str],
    scorer: Any,
    decomposer: Any,
    *,
    num_steps: int,
    seeds: Sequence[int] = (0,),
    image_size: tuple[int, int] | None = None,
    batch_size: int = 8,
    eta: float = 0.7,
    pass_threshold: float = 0.5,
    threshold: float = 0.9,
) -> Commitment:
    """For every step ``t``: ODE up to ``t``, SDE (``eta``) from ``t`` to the end, verdicts compared
    with the pure ODE sample's. Costs ``num_steps`` extra rollouts per sample."""
    from cast_core.types import Window

    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts to measure commitment on")
    graphs = {p: decomposer.decompose(p) for p in prompts}
    kept_rows, atoms_kept, atoms_total = [], torch.zeros(num_steps), 0
    for seed in seeds:
        gen = torch.Generator().manual_seed(int(seed))
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            batch_graphs = [graphs[p] for p in chunk]
            noise = policy.initial_noise(len(chunk), image_size, gen)
            ode = sample(policy, chunk, num_steps=num_steps, image_size=image_size, window=None, initial_noise=noise)
            final = _verdicts(scorer, ode.images, batch_graphs, pass_threshold)
            rows = torch.zeros(len(chunk), num_steps, dtype=torch.bool)
            for t in range(num_steps):
                sde_gen = torch.Generator().manual_seed(int(seed) * 100_003 + start * 1_009 + t)
                rollout = sample(
                    policy,
                    chunk,
                    num_steps=num_steps,
                    image_size=image_size,
                    window=Window(t, num_steps - t),
                    eta=eta,
                    generator=sde_gen,
                    initial_noise=noise,
                )
                rows[:, t], same = _compare(_verdicts(scorer, rollout.images, batch_graphs, pass_threshold), final)
                atoms_kept[t] += same
            atoms_total += sum(len(f) for f in final)
            kept_rows.append(rows)
    unchanged = [float(v) for v in torch.cat(kept_rows).float().mean(0)]
    return Commitment(
        unchanged=unchanged,
        atom_unchanged=[float(v) / max(atoms_total, 1) for v in atoms_kept],
        step=first_settled_step(unchanged, threshold),
        threshold=threshold,
        samples=int(sum(r.shape[0] for r in kept_rows)),
        eta=eta,
    )
