"""Ground truth for the formation point, from an atom judge: when do the verdicts stop changing?

Where an exact judge exists (the shapes world's oracle), "the structure is fixed" can be checked
instead of inferred: score every atom of the prompt on the decoded ``x̂0`` of every step and on the
final image, and call a sample *settled* at step ``t`` when every atom's verdict
(``score >= pass_threshold``) on ``x̂0_t`` equals its verdict on the final image. The
*ground-truth formation step* is the first step ``t`` from which the settled fraction stays
``>= threshold`` (default 90%) at every later step — the first step after which the verdicts
agree for at least 90% of samples (issue 6's validation criterion). The selected knee should be
within one step of it.

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

    def to_dict(self) -> dict:
        return {"agreement": self.agreement, "atom_agreement": self.atom_agreement,
                "pass_agreement": self.pass_agreement, "step": self.step,
                "threshold": self.threshold, "samples": self.samples}


def first_settled_step(agreement: Sequence[float], threshold: float) -> int | None:
    """The first ``t`` with ``agreement[t'] >= threshold`` for every ``t' >= t``."""
    step = None
    for t in range(len(agreement) - 1, -1, -1):
        if agreement[t] < threshold:
            break
        step = t
    return step


@torch.no_grad()
def verdict_agreement(policy: Any, prompts: Sequence[str], scorer: Any, decomposer: Any, *, num_steps: int,
                      seeds: Sequence[int] = (0,), image_size: tuple[int, int] | None = None,
                      batch_size: int = 8, pass_threshold: float = 0.5, threshold: float = 0.9) -> FormationTruth:
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
            chunk = prompts[start:start + batch_size]
            rollout = sample(policy, chunk, num_steps=num_steps, image_size=image_size, window=None,
                             keep_x0=True, generator=gen)
            batch_graphs = [graphs[p] for p in chunk]
            final = [s.float() >= pass_threshold for s in scorer.score(rollout.images, batch_graphs).scores]
            rows = torch.zeros(len(chunk), num_steps, dtype=torch.bool)
            for t in range(num_steps):
                x0 = rollout.x0[:, t].to(rollout.final_latents.dtype)
                scores = scorer.score(policy.decode(x0, image_size), batch_graphs).scores
                for i, (s, f) in enumerate(zip(scores, final)):
                    verdict = s.float() >= pass_threshold
                    same = verdict == f
                    rows[i, t] = bool(same.all())
                    atoms_same[t] += float(same.sum())
                    passes_kept[t] += float((verdict & f).sum())
            atoms_total += sum(len(f) for f in final)
            passes_total += sum(int(f.sum()) for f in final)
            settled.append(rows)
    frac = torch.cat(settled).float().mean(0)
    agreement = [float(v) for v in frac]
    return FormationTruth(agreement=agreement, atom_agreement=[float(v) / max(atoms_total, 1) for v in atoms_same],
                          pass_agreement=[float(v) / passes_total if passes_total else None for v in passes_kept],
                          step=first_settled_step(agreement, threshold), threshold=threshold,
                          samples=int(sum(r.shape[0] for r in settled)))
