"""What is each kind of credit worth, per objective? Gradient agreement with a reference, no training.

Training compares credits (the advantage an objective is given) only through noisy end results.
This measures them where they act: the gradient of one update. On the *base* shapes policy, for
each objective (``sde-clipped``: Flow-GRPO / CAST's clipped SDE ratio, ``nft``: DiffusionNFT,
``awm``: advantage-weighted matching), groups of 8 images are sampled for held-out prompts
(``heldout-test``, never the training prompts) and each group's gradient is taken once per credit:

- ``reference``: advantage = GM − the group's mean GM, the same at every position, one ratio per
  sample: no normalisation and no map, so its expectation is the objective's update under the
  true reward (for the SDE ratio the policy gradient of the mean GM, times (G − 1)/G), and its
  sum over many groups points at the true direction;
- ``scalar``: the scalar projector's z-scored GM (Flow-GRPO), one ratio per sample;
- ``spatial``: CAST's spatial projector on the oracle's exact masks, one ratio per position;
- ``spatial-degraded``: the same on maps degraded as a VLM judge gives them (4×4 token grid,
  blur 0.5 cells, 20 % of the mass moved elsewhere: the bench's ``cast-judge-grid-blur-noise``);
- ``spatial-centred``: the exact-mask spatial map minus its group mean at each position (a
  per-position baseline). CAST's maps are not zero-mean over a group: a missing object's flat
  map spreads its negative advantage everywhere, a present one's positive advantage sits on its
  mask. The SDE ratio's score function averages that offset away; DiffusionNFT's and AWM's
  per-sample gradients do not, so this asks whether the forward objectives need it.

A credit is worth what its gradient sum over ``n`` images agrees with the true direction. The
true direction is estimated by the ``reference`` sum over one half (B) of the groups; the credits'
sums come from random subsets of the other half (A), so estimate and reference share no noise.
The reference is noisy too: its split-half cosine ρ gives, by Spearman–Brown, the cosine of the
whole half-B sum to the truth, ``sqrt(2ρ/(1 + ρ))`` — the ceiling any credit can show here.
"Images needed" turns the curves into a price: the ``n`` at which a credit reaches what the
scalar credit reaches with the most images, or a fixed cosine.

Each group is sampled and differentiated exactly as a training step would (the run's config as
the bench builds it, ``trainer.rollout``, the judge, ``objective.passes``, ``PassBatch`` with the
group's ids, step and epoch 0), with one seed per group shared by all credits: credits are
compared on the same images, the same verdicts and the same forward-process noise. At the base
policy NFT's old policy and AWM's KL-EMA equal the trained adapter, as in a run's first step.

Run (resumable: one file per group in the cache; a rerun samples only what is missing)::

    python benchmarks/credit_gradient.py                 # 48 prompts x 8 groups x 3 objectives
    python benchmarks/credit_gradient.py --analyse       # tables and figure from the cache alone
    python benchmarks/credit_gradient.py --smoke --results /tmp/cg.json   # about 2.5 minutes

``--threads 1`` when another job shares the CPU: torch's two threads then wait on each other and
a forward pass is more than ten times slower than on one thread.

Writes ``benchmarks/results/credit-gradient.json`` and ``.png`` and prints a compact table.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import numpy as np
import torch

CREDITS = ("reference", "scalar", "spatial", "spatial-degraded", "spatial-centred")
#: one ratio per sample for the scalar credits, one per latent position for CAST's maps
RATIO_MODES = {
    "reference": "sample",
    "scalar": "sample",
    "spatial": "position",
    "spatial-degraded": "position",
    "spatial-centred": "position",
}
#: objective -> the bench method whose configuration samples and judges it (cast_shapes.bench):
#: the CAST rows, so the judge asks for heatmaps (x̂0 at the window start for sde-clipped,
#: the final image for the forward-process objectives, as their recipes do)
OBJECTIVES = {"sde-clipped": "cast", "nft": "cast-nft", "awm": "cast-awm"}
#: the oracle's masks as a VLM judge gives them (the bench's cast-judge-grid-blur-noise row)
DEGRADED_JUDGE = {"judge_grid": 4, "judge_blur": 0.5, "judge_noise": 0.2}
GROUP_SIZE = 8
N_VALUES = (32, 64, 128, 256, 512, 1024)
SUBSETS = 200
SMOKE = {"prompts": 2, "groups_per_prompt": 2, "n_values": (8, 16), "subsets": 5}
#: the policy's seed (its LoRA initialisation and every keyed draw: the bench's training seed 0)
POLICY_SEED = 0
#: prompt i's groups are sampled as training step SAMPLING_STEP_BASE + i would sample them (far
#: past any real run); group k of the prompt is prompt index k of that step, so each image has
#: its own seed (seed, step, k, member), independent of how many groups are drawn at once
SAMPLING_STEP_BASE = 10**6
SPLIT_SEED = 0  # the shuffle that splits the groups into halves A and B
SUBSET_SEED = 1  # the random subsets of half A, the same for every credit (paired)
INTERVAL = (5.0, 95.0)
FIXED_TARGETS = (0.3, 0.5)
#: per prompt kind: the groups each table is restricted to, from (atom count, has a relation atom)
KINDS = {
    "atoms<=3": lambda atoms, relation: atoms <= 3,
    "atoms4-5": lambda atoms, relation: 4 <= atoms <= 5,
    "atoms>=6": lambda atoms, relation: atoms >= 6,
    "relation": lambda atoms, relation: relation,
    "no-relation": lambda atoms, relation: not relation,
}
DEFAULT_CACHE = Path.home() / ".cache" / "cast-bench" / "credit-gradient"
DEFAULT_RESULTS = Path(__file__).resolve().parent / "results" / "credit-gradient.json"
PROMPT_ORDER = "heldout-test, interleaved by atom count"


# == prompts ======================================================================================
def heldout_prompts(count: int) -> list[str]:
    """The first ``count`` prompts of ``heldout-test`` taken round-robin over its atom counts.

    Why not the suite's own order: it lists its prompts by atom count (48 with 5 atoms, then 48
    with 6, ...), so its first 48 would all have 5 atoms and the per-kind tables would be empty.
    Within one atom count the suite's order is kept."""
    from cast_core.registry import get_atom_decomposer
    from cast_shapes.suites import suite

    decomposer = get_atom_decomposer("template")
    by_atoms: dict[int, list[str]] = {}
    for prompt in suite("heldout-test"):
        by_atoms.setdefault(len(decomposer.decompose(prompt).atoms), []).append(prompt)
    columns = [by_atoms[k] for k in sorted(by_atoms)]
    order = [column[i] for i in range(max(map(len, columns))) for column in columns if i < len(column)]
    if count > len(order):
        raise SystemExit(f"--prompts {count}: heldout-test has only {len(order)} prompts")
    return order[:count]


# == the trainer each objective samples and differentiates with ==================================
def objective_config(objective: str):
    """The bench's configuration of the objective's CAST row (fixed window 2-3 for sde-clipped,
    surplus count maps, group size 8), with the policy's seed."""
    from cast_core.config import build_config, toml_value
    from cast_shapes.bench import overrides_for, plan

    overrides = overrides_for(OBJECTIVES[objective], POLICY_SEED, plan(quick=False))
    sets = [f"{k}={toml_value(v)}" for k, v in overrides.items() if k != "projector"]
    cfg = build_config(recipe="shapes", components={"projector": overrides["projector"]}, sets=sets, steps=1)
    if cfg.objective != objective or cfg.group_size != GROUP_SIZE:
        raise RuntimeError(f"bench method {OBJECTIVES[objective]!r} no longer builds objective {objective!r}")
    return cfg


@contextlib.contextmanager
def fresh_trainer(objective: str) -> Iterator[Any]:
    """A trainer at the base policy in a throw-away run directory (nothing is trained or saved)."""
    from cast_core.trainer import Trainer

    run_dir = Path(tempfile.mkdtemp(prefix="credit-gradient-run-")) / "run"
    trainer = Trainer(
        objective_config(objective), run_dir, log=lambda msg: print(f"  [trainer] {msg}", file=sys.stderr)
    )
    try:
        yield trainer
    finally:
        trainer.close()
        shutil.rmtree(run_dir.parent, ignore_errors=True)


def cache_identity(objective: str) -> dict:
    """What a cached gradient depends on besides its prompt and group: a cache written under
    another identity is refused rather than mixed in."""
    cfg = json.loads(json.dumps(dataclasses.asdict(objective_config(objective)), default=str))
    return {
        "config": cfg,
        "prompt_order": PROMPT_ORDER,
        "sampling_step_base": SAMPLING_STEP_BASE,
        "credits": {c: RATIO_MODES[c] for c in CREDITS},
        "degraded_judge": DEGRADED_JUDGE,
    }


def check_cache(directory: Path, identity: dict, *, write: bool = True) -> None:
    """Write the identity on first use; refuse a directory that holds another one."""
    path = directory / "identity.json"
    if path.exists():
        found = json.loads(path.read_text())
        if found != identity:
            diff = sorted(k for k in identity["config"] if found.get("config", {}).get(k) != identity["config"][k])
            raise SystemExit(
                f"{directory} holds gradients of another configuration (differs in {diff or 'settings'}); "
                "pass another --out or remove it"
            )
        return
    if not write:
        return
    directory.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, lambda tmp: tmp.write_text(json.dumps(identity, indent=1)))


def _write_atomic(path: Path, write) -> None:
    """``write(tmp)`` then rename: an interrupted run never leaves a half-written file behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    tmp.replace(path)


@contextlib.contextmanager
def swapped(obj: Any, attr: str, value: Any) -> Iterator[None]:
    """``obj.attr = value`` inside (the judge's scorer or projector, the config's ratio mode)."""
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


# == credits: one advantage map per credit, for the same rows ====================================
def credit_advantages(trainer: Any, prompts: list[str], rollout: Any, judges: dict) -> tuple[Any, dict]:
    """``(scored, {credit: advantages [n, h·w]})``: ``scored`` the spatial credit's ScoredGroups
    (rows, ids, kept verdicts); every credit's advantages are for exactly those rows."""
    from cast_core.advantages import geometric_mean

    verdicts = trainer.verdicts(prompts, rollout)
    scored = trainer.advantages(verdicts, rollout)  # the run's own projector: CAST's, exact masks
    with swapped(trainer.judge, "projector", judges["scalar"]):
        scalar = trainer.advantages(verdicts, rollout)
    with swapped(trainer.judge, "scorer", judges["degraded"]):
        degraded_verdicts = trainer.verdicts(prompts, rollout)  # final-image maps when the run uses them
        degraded = trainer.advantages(degraded_verdicts, rollout)  # or x̂0 maps, scored by this judge
    for name, other in (("scalar", scalar), ("spatial-degraded", degraded)):
        if other.ids != scored.ids:
            raise RuntimeError(f"the {name} credit judged other groups than the spatial one")
    for a, b in zip(verdicts, degraded_verdicts):
        if not torch.equal(a.scores, b.scores):
            raise RuntimeError(f"the degraded judge changed the scores of {a.graph.prompt!r}; it must only move maps")
    centred = {v.index: geometric_mean(v.scores) - geometric_mean(v.scores).mean() for v in verdicts}
    positions = scored.advantages.shape[1]
    reference = torch.stack([centred[p][g].float().expand(positions) for p, g in scored.ids])
    centred_maps = scored.advantages.clone()
    for p in {p for p, _ in scored.ids}:
        rows = [i for i, (q, _) in enumerate(scored.ids) if q == p]
        centred_maps[rows] -= scored.advantages[rows].mean(0, keepdim=True)
    adv = {
        "reference": reference.to(scored.advantages.device),
        "scalar": scalar.advantages,
        "spatial": scored.advantages,
        "spatial-degraded": degraded.advantages,
        "spatial-centred": centred_maps,
    }
    return scored, adv


class SharedForwards:
    """The policy's forward passes of one training pass, computed once for all credits.

    Every credit's loss at pass ``t`` calls the policy with the same inputs in the same order
    (latents, forward-process noise and timesteps are keyed by the group's ids, step and pass,
    never by the advantages), so the first credit's velocities, graph included, serve the
    others, and each credit backpropagates through them. Calls are matched by their position in
    the pass and checked: a call whose inputs or gradient mode differ from the recorded one is
    computed afresh, so sharing saves forwards but cannot change a gradient."""

    def __init__(self, compute):
        self.compute = compute
        self.calls: list[tuple] = []
        self.position = 0
        self.misses = 0

    def new_pass(self) -> None:
        self.calls, self.position = [], 0

    def rewind(self) -> None:
        """The next credit's loss starts: its first call is the pass's first call again."""
        self.position = 0

    def __call__(self, latents, sigma, cond):
        i, grad_mode = self.position, torch.is_grad_enabled()
        self.position += 1
        if i < len(self.calls):
            old_latents, old_sigma, old_cond, old_mode, out = self.calls[i]
            same = (
                old_cond is cond and old_mode == grad_mode and _same(old_latents, latents) and _same(old_sigma, sigma)
            )
            if same:
                return out
            self.misses += 1
            return self.compute(latents, sigma, cond)
        out = self.compute(latents, sigma, cond)
        self.calls.append((latents, sigma, cond, grad_mode, out))
        return out


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    return a == b


def trailing_policies(trainer: Any) -> list:
    """The objective's copies of the adapter that it swaps in for a forward (NFT's old policy,
    AWM's KL-EMA), checked to hold the trained values bit for bit, as they do at the base policy.
    Swapping them in is then the identity, and it is skipped while forwards are shared: the
    in-place swap would invalidate the graph the credits share."""
    from cast_core.objectives.old_policy import OldPolicy

    found = [value for value in vars(trainer.objective).values() if isinstance(value, OldPolicy)]
    for old in found:
        if not all(torch.equal(v, p.detach()) for v, p in zip(old.values, trainer.params)):
            raise RuntimeError("the objective's old policy differs from the trained adapter: not the base policy")
    return found


def _no_swap(params):
    return contextlib.nullcontext()


def group_gradients(
    trainer: Any, rollout: Any, rows, ids: list, advantages: dict, step: int, *, share: bool = True
) -> tuple[dict, dict]:
    """Per credit, the ascent direction of the objective summed over one group's images: every
    pass the update would make (window steps, forward-process timesteps), averaged as the update
    averages them, times the group's size (the loss is a mean over images), negated; ``[D]``
    float32. Also per credit the passes' mean diagnostics (a clip fraction above 0 at the first
    epoch would mean the recomputed log-probs are not the sampled ones). ``share``: one forward
    per pass for all credits (:class:`SharedForwards`); the gradients are the same either way."""
    from cast_core.conditioning import select_rows
    from cast_core.types import PassBatch

    updater = trainer.updater
    cfg = updater.config
    cond = select_rows(rollout.conditioning, rows)
    passes = trainer.objective.passes(rollout)
    size = sum(p.numel() for p in trainer.params)
    sums = {credit: torch.zeros(size) for credit in advantages}
    diagnostics: dict[str, dict[str, float]] = {credit: {} for credit in advantages}
    forwards = SharedForwards(updater.velocity)
    _take_grad(trainer.params)  # nothing left over from before
    with contextlib.ExitStack() as stack:
        if share:
            stack.enter_context(swapped(updater, "velocity", forwards))
            for old in trailing_policies(trainer):
                stack.enter_context(swapped(old, "active", _no_swap))
        for t in range(passes):
            forwards.new_pass()
            for credit, adv in advantages.items():
                forwards.rewind()
                with swapped(cfg, "ratio_mode", RATIO_MODES[credit]):
                    terms = updater._loss(PassBatch(rollout, rows, list(ids), adv, cond, t, 0, step))
                ((terms.loss + cfg.beta * terms.kl) * (len(ids) / passes)).backward(retain_graph=share)
                sums[credit] -= _take_grad(trainer.params)
                for key, value in terms.diagnostics.items():
                    diagnostics[credit][key] = diagnostics[credit].get(key, 0.0) + float(value) / passes
    if forwards.misses:
        print(f"  note: {forwards.misses} forwards could not be shared (inputs differed); computed afresh")
    return sums, diagnostics


def _take_grad(params) -> torch.Tensor:
    """The parameters' gradient, flattened to float32 on the CPU, and cleared."""
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten() for p in params])
    for p in params:
        p.grad = None
    return flat.float().cpu()


# == sampling: one file per group =================================================================
def group_path(directory: Path, prompt_index: int, group: int) -> Path:
    return directory / f"p{prompt_index:03d}-g{group:02d}.pt"


def sample_prompt(
    trainer: Any, directory: Path, prompt_index: int, prompt: str, groups: list[int], judges, report
) -> None:
    """Sample the missing ``groups`` of one prompt in one rollout, judge them, and store each
    group's gradient per credit; ``report(group, seconds)`` after each group is written."""
    from cast_core.advantages import geometric_mean

    t0 = time.perf_counter()
    step = SAMPLING_STEP_BASE + prompt_index
    prompts = [prompt] * (max(groups) + 1)  # group k is the step's prompt index k
    ids = [(k, g) for k in groups for g in range(GROUP_SIZE)]
    window = trainer.window_for(step, prompts)
    with torch.no_grad():
        rollout = trainer.rollout(prompts, window, step, ids=ids)
    scored, adv = credit_advantages(trainer, prompts, rollout, judges)
    graph = trainer.decomposer.decompose(prompt)
    seconds_per_group = (time.perf_counter() - t0) / len(groups)
    for verdict in scored.kept:
        t1 = time.perf_counter()
        mine = [i for i, (p, _) in enumerate(scored.ids) if p == verdict.index]
        rows = torch.tensor([scored.rows[i] for i in mine])
        group_ids = [scored.ids[i] for i in mine]
        advantages = {credit: adv[credit][mine] for credit in CREDITS}
        grads, diagnostics = group_gradients(trainer, rollout, rows, group_ids, advantages, step)
        record = {
            "prompt_index": prompt_index,
            "prompt": prompt,
            "group": verdict.index,
            "step": step,
            "ids": group_ids,
            "window": [window.start, window.size],
            "atoms": len(graph.atoms),
            "relation": any(atom.kind == "relation" for atom in graph.atoms),
            "gm": geometric_mean(verdict.scores).tolist(),
            "seconds": seconds_per_group + time.perf_counter() - t1,
            "diagnostics": diagnostics,
            "grads": grads,
        }
        _write_atomic(group_path(directory, prompt_index, verdict.index), lambda tmp: torch.save(record, tmp))
        report(verdict.index, record["seconds"])
    missing = set(groups) - {v.index for v in scored.kept}
    if missing:
        print(f"  prompt {prompt_index}: the judge dropped groups {sorted(missing)}; they are retried next run")


def collect(objective: str, prompts: list[str], groups_per_prompt: int, directory: Path) -> None:
    """Every (prompt, group) gradient of one objective that the cache does not hold yet."""
    from cast_core.registry import build_offering, get_atom_scorer

    check_cache(directory, cache_identity(objective))
    todo = {
        i: [k for k in range(groups_per_prompt) if not group_path(directory, i, k).exists()]
        for i in range(len(prompts))
    }
    todo = {i: ks for i, ks in todo.items() if ks}
    total = sum(map(len, todo.values()))
    print(f"{objective}: {len(prompts) * groups_per_prompt - total} groups cached, {total} to sample")
    if not total:
        return
    with fresh_trainer(objective) as trainer:
        cfg = trainer.config
        offered = {k: getattr(cfg, k) for k in ("lam", "adv_clip", "gating", "heatmap_norm", "atom_credit")}
        judges = {  # the scalar projector as the trainer would build it, the oracle degraded
            "scalar": build_offering("advantage_projector", "scalar", offered),
            "degraded": get_atom_scorer(cfg.scorer, **{**cfg.scorer_kwargs, **DEGRADED_JUDGE}),
        }
        done = 0
        for i, groups in todo.items():

            def report(group: int, seconds: float, i=i) -> None:
                nonlocal done
                done += 1
                print(f"  {objective} prompt {i} group {group}: {seconds:.1f}s, {done}/{total}", flush=True)

            sample_prompt(trainer, directory, i, prompts[i], groups, judges, report)


# == analysis =====================================================================================
class Groups(NamedTuple):
    """One objective's cached groups, reduced to what every cosine needs: for each credit ``c``
    ``cross[c][i, j] = g_c,i · g_reference,j`` and ``gram[c][i, j] = g_c,i · g_c,j`` (float64),
    so any subset sum's cosine to any reference sum costs a few index sums."""

    keys: list[tuple[int, int]]
    atoms: list[int]
    relation: list[bool]
    gm: list[float]
    seconds: list[float]
    cross: dict[str, np.ndarray]
    gram: dict[str, np.ndarray]
    norms: dict[str, list[float]]
    parameters: int
    diagnostics: list[dict] = []  # per group: {credit: the objective's diagnostics, mean over passes}


def load_groups(directory: Path, prompts: list[str], groups_per_prompt: int, chunk: int = 16384) -> Groups:
    """Read the groups the run asked for (not whatever else the cache holds) and reduce them."""
    keys, meta, grads = [], [], {c: [] for c in CREDITS}
    for i, prompt in enumerate(prompts):
        for k in range(groups_per_prompt):
            path = group_path(directory, i, k)
            if not path.exists():
                raise SystemExit(f"{path} is missing: run without --analyse first")
            record = torch.load(path, weights_only=False)
            if record["prompt"] != prompt:
                raise SystemExit(f"{path} is for {record['prompt']!r}, not {prompt!r}: another prompt order")
            keys.append((i, k))
            meta.append(record)
            for c in CREDITS:
                grads[c].append(record["grads"][c])
    mats = {c: torch.stack(grads[c]) for c in CREDITS}
    cross, gram = products(mats, chunk)
    return Groups(
        keys,
        [r["atoms"] for r in meta],
        [r["relation"] for r in meta],
        [float(np.mean(r["gm"])) for r in meta],
        [r["seconds"] for r in meta],
        cross,
        gram,
        {c: [float(v) for v in mats[c].norm(dim=1)] for c in CREDITS},
        mats["reference"].shape[1],
        [r["diagnostics"] for r in meta],
    )


def products(mats: dict[str, torch.Tensor], chunk: int = 16384) -> tuple[dict, dict]:
    """``cross[c] = X_c X_referenceᵀ`` and ``gram[c] = X_c X_cᵀ`` from ``[groups, D]`` gradients,
    in float64, a slice of the parameters at a time (float32 sums of 10⁵ products would blur
    the small cosines of few groups)."""
    n, dim = mats["reference"].shape
    cross = {c: np.zeros((n, n)) for c in mats}
    gram = {c: np.zeros((n, n)) for c in mats}
    for lo in range(0, dim, chunk):
        ref = mats["reference"][:, lo : lo + chunk].double()
        for c, mat in mats.items():
            x = mat[:, lo : lo + chunk].double()
            cross[c] += (x @ ref.T).numpy()
            gram[c] += (x @ x.T).numpy()
    return cross, gram


def _block(matrix: np.ndarray, rows, cols) -> float:
    return float(matrix[np.ix_(rows, cols)].sum())


def _cosine(dot: float, square_a: float, square_b: float) -> float:
    """NaN when either sum is the zero vector (a group whose images all got the same reward)."""
    denominator = math.sqrt(max(square_a, 0.0) * max(square_b, 0.0))
    return dot / denominator if denominator > 0 else float("nan")


def split_halves(members: list[int], n_groups: int) -> tuple[list[int], list[int]]:
    """Halves A (the estimates) and B (the reference) of ``members``, by one fixed seeded shuffle
    of all groups, restricted to the members: every table splits the same way."""
    order = np.random.default_rng(SPLIT_SEED).permutation(n_groups)
    chosen = set(members)
    ordered = [int(i) for i in order if int(i) in chosen]
    return ordered[: len(ordered) // 2], ordered[len(ordered) // 2 :]


def reference_noise(groups: Groups, half_b: list[int]) -> dict:
    """Split-half cosine ρ of the reference over half B and the Spearman–Brown cosine of the
    whole half-B sum to the true gradient, ``sqrt(2ρ/(1 + ρ))`` (undefined for ρ ≤ 0)."""
    b1, b2 = half_b[: len(half_b) // 2], half_b[len(half_b) // 2 :]
    g = groups.gram["reference"]
    if not b1 or not b2:
        return {"split_half_cosine": None, "implied_cosine": None, "note": "half B too small to split"}
    rho = _cosine(_block(g, b1, b2), _block(g, b1, b1), _block(g, b2, b2))
    if not math.isfinite(rho) or rho <= 0:
        note = "split-half cosine <= 0: the reference is noise at this size, the implied cosine is undefined"
        return {"split_half_cosine": _round(rho), "implied_cosine": None, "note": note}
    return {"split_half_cosine": _round(rho), "implied_cosine": _round(math.sqrt(2 * rho / (1 + rho)))}


def subset_cosines(groups: Groups, half_a: list[int], half_b: list[int], n_values, subsets: int) -> dict:
    """``{n: {credit: [R cosines]}}``: R random subsets of ``n / 8`` half-A groups (the same
    subsets for every credit), each credit's gradient sum against the half-B reference sum."""
    ref_square = _block(groups.gram["reference"], half_b, half_b)
    out = {}
    for n in n_values:
        m = n // GROUP_SIZE
        if m < 1 or m > len(half_a):
            continue
        rng = np.random.default_rng([SUBSET_SEED, n])
        draws = [rng.choice(half_a, size=m, replace=False).tolist() for _ in range(subsets)]
        out[n] = {
            c: [_cosine(_block(groups.cross[c], s, half_b), _block(groups.gram[c], s, s), ref_square) for s in draws]
            for c in CREDITS
        }
    return out


def crossing(n_values: list[int], curve: list[float], target: float) -> float | None:
    """The smallest n at which ``curve`` reaches ``target``, log-linear between measured n; the
    smallest measured n when it starts above; None when it never gets there."""
    for i, value in enumerate(curve):
        if not value >= target - 1e-9:  # also NaN; the tolerance: a mean equals its own values
            continue
        if i == 0:
            return float(n_values[0])
        lo, hi = curve[i - 1], value
        if not math.isfinite(lo):
            return float(n_values[i])
        frac = (target - lo) / (hi - lo)
        return float(2 ** (math.log2(n_values[i - 1]) + frac * (math.log2(n_values[i]) - math.log2(n_values[i - 1]))))
    return None


def images_needed(cosines: dict, targets: dict[str, float]) -> dict:
    """Per credit and target: n from the mean curve, and the 5th-95th percentile of n over the
    R subset draws (draw r's curve is its r-th subset at every n); None = not reached."""
    ns = sorted(cosines)
    out = {}
    for c in CREDITS:
        mean_curve = [_mean(cosines[n][c]) for n in ns]
        draws = len(cosines[ns[0]][c]) if ns else 0
        out[c] = {}
        for name, target in targets.items():
            per_draw = [crossing(ns, [cosines[n][c][r] for n in ns], target) for r in range(draws)]
            values = np.array([math.inf if v is None else v for v in per_draw])
            lo, hi = (np.percentile(values, q, method="nearest") if len(values) else math.inf for q in INTERVAL)
            out[c][name] = {
                "target": _round(target),
                "n": _round(crossing(ns, mean_curve, target)),
                "interval": [_round(_finite_or_none(lo)), _round(_finite_or_none(hi))],
                "reached_at_smallest_n": bool(ns) and mean_curve[0] >= target,  # n is then an upper bound
            }
    return out


def table(groups: Groups, members: list[int], n_values, subsets: int) -> dict:
    """One table: halves, the reference's noise, cosine per credit and n, images needed."""
    half_a, half_b = split_halves(members, len(groups.keys))
    result: dict[str, Any] = {
        "groups": len(members),
        "prompts": len({groups.keys[i][0] for i in members}),
        "half_a_groups": len(half_a),
        "half_b_groups": len(half_b),
    }
    if not half_a or not half_b:
        result["note"] = "too few groups for two halves"
        return result
    result["reference"] = reference_noise(groups, half_b)
    cosines = subset_cosines(groups, half_a, half_b, n_values, subsets)
    result["cosine"] = {
        c: {
            str(n): {
                "mean": _round(_mean(cosines[n][c])),
                "interval": [_round(_percentile(cosines[n][c], q)) for q in INTERVAL],
            }
            for n in sorted(cosines)
        }
        for c in CREDITS
    }
    if cosines:
        top = max(cosines)
        scalar_top = _mean(cosines[top]["scalar"])
        targets = {f"scalar@{top}": scalar_top} if math.isfinite(scalar_top) else {}
        targets.update({f"{t}": t for t in FIXED_TARGETS})
        result["images_needed"] = images_needed(cosines, targets)
    return result


def analyse(groups: Groups, n_values, subsets: int) -> dict:
    """The overall table and one per prompt kind, each with its own halves and reference."""
    everything = list(range(len(groups.keys)))
    by_kind = {
        kind: table(groups, [i for i in everything if keep(groups.atoms[i], groups.relation[i])], n_values, subsets)
        for kind, keep in KINDS.items()
    }
    return {
        "overall": table(groups, everything, n_values, subsets),
        "by_kind": by_kind,
        "mean_gm": _round(float(np.mean(groups.gm))),
        "zero_spread_groups": sum(1 for i in everything if groups.gram["reference"][i, i] == 0),
        "mean_gradient_norm": {c: _round(float(np.mean(groups.norms[c])), 6) for c in CREDITS},
        "diagnostics": mean_diagnostics(groups.diagnostics),
        "seconds_per_group": _round(float(np.mean(groups.seconds)), 2),
    }


def mean_diagnostics(per_group: list[dict]) -> dict:
    """Per credit, the objective's diagnostics averaged over groups: at the base policy and the
    first epoch every ratio is 1, so a clip fraction above 0 would flag a recomputation that
    does not reproduce the sampled log-probs."""
    out: dict[str, dict[str, float | None]] = {}
    for record in per_group:
        for credit, diag in record.items():
            for key, value in diag.items():
                out.setdefault(credit, {}).setdefault(key, []).append(value)
    return {c: {k: _round(float(np.mean(v)), 6) for k, v in d.items()} for c, d in out.items()}


def _mean(values) -> float:
    """The mean over the finite values (a zero sum has no cosine); NaN when there are none."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(finite.mean()) if len(finite) else float("nan")


def _percentile(values, q: float) -> float | None:
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(np.percentile(finite, q)) if len(finite) else None


def _finite_or_none(value) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _round(value, digits: int = 4):
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


# == outputs ======================================================================================
COLOURS = {
    "reference": "#555555",
    "scalar": "#2860c8",
    "spatial": "#c83228",
    "spatial-degraded": "#e08c14",
    "spatial-centred": "#2a9d4a",
}


def curves(overall: dict) -> dict[str, tuple[list[int], list[float], list[float], list[float]]]:
    """``{credit: (n, mean, 5th percentile, 95th percentile)}`` of one table, measured points only."""
    out = {}
    for credit in CREDITS:
        points = overall.get("cosine", {}).get(credit, {})
        ns = [int(n) for n in points if points[n]["mean"] is not None and None not in points[n]["interval"]]
        if ns:
            cells = [points[str(n)] for n in ns]
            out[credit] = (
                ns,
                [c["mean"] for c in cells],
                [c["interval"][0] for c in cells],
                [c["interval"][1] for c in cells],
            )
    return out


def draw_figure(results: dict, path: Path) -> str:
    """One panel per objective: cosine to the reference against images (log2 axis), one line per
    credit with its 90 % band, the reference's implied cosine dashed. Drawn with matplotlib when
    it is installed, else plainly with Pillow (matplotlib is no dependency of the project)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib
    except ImportError:
        _draw_with_pillow(results, path)
        return "pillow"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    objectives = list(results["objectives"])
    fig, axes = plt.subplots(1, len(objectives), figsize=(4.2 * len(objectives), 3.6), squeeze=False, sharey=True)
    for ax, objective in zip(axes[0], objectives):
        overall = results["objectives"][objective]["overall"]
        for credit, (ns, mean, lo, hi) in curves(overall).items():
            ax.plot(ns, mean, marker="o", color=COLOURS[credit], label=credit)
            ax.fill_between(ns, lo, hi, color=COLOURS[credit], alpha=0.15)
        implied = overall.get("reference", {}).get("implied_cosine")
        if implied is not None:
            ax.axhline(implied, linestyle="--", color="grey", label="reference vs truth (implied)")
        ax.set_xscale("log", base=2)
        ns = sorted({n for c in curves(overall).values() for n in c[0]})
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
        ax.set_title(f"{objective} ({overall['groups']} groups)")
        ax.set_xlabel("images summed")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("cosine to the reference gradient")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return "matplotlib"


def _draw_with_pillow(results: dict, path: Path) -> None:
    """The same panels without matplotlib: bands first, then lines, labels and the dashed line."""
    from PIL import Image, ImageDraw, ImageFont

    tables = [results["objectives"][o]["overall"] for o in results["objectives"]]
    lines = [curves(t) for t in tables]
    implied = [t.get("reference", {}).get("implied_cosine") for t in tables]
    values = [v for c in lines for ns, *ys in c.values() for y in ys for v in y] + [v for v in implied if v]
    y_lo, y_hi = min(values + [0.0]), max(values + [0.1])
    y_lo, y_hi = y_lo - 0.05 * (y_hi - y_lo), y_hi + 0.05 * (y_hi - y_lo)
    all_n = sorted({n for c in lines for ns, *_ in c.values() for n in ns}) or [1, 2]
    x_lo, x_hi = math.log2(all_n[0]), math.log2(all_n[-1]) + 1e-9
    width, height, left, top, bottom = 380, 320, 50, 30, 40
    image = Image.new("RGBA", (width * len(tables), height), "white")
    bands = Image.new("RGBA", image.size, (0, 0, 0, 0))
    font = ImageFont.load_default()
    boxes = [(k * width + left, (k + 1) * width - 10, top, height - bottom) for k in range(len(tables))]

    def xy(box, n, v):
        x0, x1, y0, y1 = box
        return x0 + (math.log2(n) - x_lo) / (x_hi - x_lo) * (x1 - x0), y1 - (v - y_lo) / (y_hi - y_lo) * (y1 - y0)

    def rgb(credit):
        return tuple(int(COLOURS[credit][j : j + 2], 16) for j in (1, 3, 5))

    for box, c in zip(boxes, lines):
        for credit, (ns, _, lo, hi) in c.items():
            if len(ns) > 1:
                points = [xy(box, n, v) for n, v in zip(ns + ns[::-1], hi + lo[::-1])]
                ImageDraw.Draw(bands).polygon(points, fill=rgb(credit) + (40,))
    image.alpha_composite(bands)
    draw = ImageDraw.Draw(image)
    for box, c, table_, objective, line in zip(boxes, lines, tables, results["objectives"], implied):
        x0, x1, y0, y1 = box
        draw.rectangle([x0, y0, x1, y1], outline="black")
        draw.text((x0, 8), f"{objective} ({table_['groups']} groups)", fill="black", font=font)
        for n in all_n:
            draw.text((xy(box, n, y_lo)[0] - 8, y1 + 4), str(n), fill="black", font=font)
        for v in (y_lo, 0.0, y_hi):
            draw.text((x0 - 44, xy(box, all_n[0], v)[1] - 5), f"{v:.2f}", fill="black", font=font)
        for i, (credit, (ns, mean, _, _)) in enumerate(c.items()):
            points = [xy(box, n, v) for n, v in zip(ns, mean)]
            if len(points) > 1:
                draw.line(points, fill=rgb(credit), width=2)
            for px, py in points:
                draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=rgb(credit))
            draw.text((x1 - 110, y1 - 14 * (i + 1)), credit, fill=rgb(credit), font=font)
        if line is not None:
            yy = xy(box, all_n[0], line)[1]
            for x in range(int(x0), int(x1), 10):
                draw.line([(x, yy), (min(x + 5, x1), yy)], fill="grey")
    image.convert("RGB").save(path)


def print_table(results: dict) -> None:
    """Mean cosine [90 % interval] per credit and n, the reference's noise, images needed."""
    for objective, result in results["objectives"].items():
        overall = result["overall"]
        ref = overall.get("reference", {})
        print(
            f"\n{objective}: {overall['groups']} groups (A {overall['half_a_groups']}, B {overall['half_b_groups']}), "
            f"mean GM {result['mean_gm']}, reference split-half {ref.get('split_half_cosine')} "
            f"-> vs truth {ref.get('implied_cosine')}"
        )
        cosine = overall.get("cosine", {})
        ns = list(cosine.get("reference", {}))
        print(f"  {'credit':<17}" + "".join(f"{'n=' + n:>21}" for n in ns))
        for credit in CREDITS:
            cells = []
            for n in ns:
                cell = cosine[credit][n]
                lo, hi = (f"{v:.2f}" if v is not None else "-" for v in cell["interval"])
                mean = f"{cell['mean']:.3f}" if cell["mean"] is not None else "-"
                cells.append(f"{mean} [{lo},{hi}]")
            print(f"  {credit:<17}" + "".join(f"{c:>21}" for c in cells))
        for credit, targets in overall.get("images_needed", {}).items():
            parts = []
            for name, got in targets.items():
                n = "not reached" if got["n"] is None else f"{got['n']:.0f}"
                lo, hi = ("-" if v is None else f"{v:.0f}" for v in got["interval"])
                parts.append(f"{name}({got['target']}): {n} [{lo},{hi}]")
            print(f"  images needed, {credit:<17} " + "; ".join(parts))


# == command line =================================================================================
def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups-per-prompt", type=int, default=8, help="groups of 8 images per prompt")
    parser.add_argument("--prompts", type=int, default=48, help="prompts of heldout-test (see heldout_prompts)")
    parser.add_argument("--objectives", nargs="+", choices=list(OBJECTIVES), default=list(OBJECTIVES))
    parser.add_argument("--out", type=Path, default=DEFAULT_CACHE, help="gradient cache (one file per group)")
    parser.add_argument("--results", type=Path, default=None, help=f"JSON path (default {DEFAULT_RESULTS})")
    parser.add_argument("--analyse", action="store_true", help="only analyse what the cache holds")
    parser.add_argument("--smoke", action="store_true", help="2 prompts x 2 groups, n in {8, 16}, R = 5")
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads (1 is much faster while another job shares the CPU)"
    )
    args = parser.parse_args(argv)
    args.n_values, args.subsets = N_VALUES, SUBSETS
    if args.smoke:
        if args.results is None:
            parser.error("--smoke needs --results (a temporary path: it must not replace the real results)")
        args.prompts, args.groups_per_prompt = SMOKE["prompts"], SMOKE["groups_per_prompt"]
        args.n_values, args.subsets = SMOKE["n_values"], SMOKE["subsets"]
    args.results = args.results or DEFAULT_RESULTS
    if args.prompts < 1 or args.groups_per_prompt < 1:
        parser.error("--prompts and --groups-per-prompt must be >= 1")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    prompts = heldout_prompts(args.prompts)
    if not args.analyse:
        for objective in args.objectives:
            collect(objective, prompts, args.groups_per_prompt, args.out / objective)
    results: dict[str, Any] = {
        "settings": {
            "prompts": prompts,
            "prompt_order": PROMPT_ORDER,
            "groups_per_prompt": args.groups_per_prompt,
            "groups": len(prompts) * args.groups_per_prompt,
            "images": len(prompts) * args.groups_per_prompt * GROUP_SIZE,
            "group_size": GROUP_SIZE,
            "objectives": {
                o: f"bench method {OBJECTIVES[o]!r} (cast_shapes.bench), base policy" for o in args.objectives
            },
            "credits": {c: {"ratio_mode": RATIO_MODES[c]} for c in CREDITS},
            "degraded_judge": DEGRADED_JUDGE,
            "n_values": list(args.n_values),
            "subsets": args.subsets,
            "interval_percentiles": list(INTERVAL),
            "seeds": {
                "policy": POLICY_SEED,
                "sampling_step_base": SAMPLING_STEP_BASE,
                "split": SPLIT_SEED,
                "subsets": SUBSET_SEED,
                "note": "prompt i, group k, member g: sampled as sample (k, g) of training step base + i",
            },
            "kinds": list(KINDS),
            "kinds_note": "heldout-test prompts have 5 to 8 atoms: atoms<=3 is empty, atoms4-5 holds the 5-atom ones",
            "smoke": args.smoke,
        },
        "objectives": {},
    }
    for objective in args.objectives:
        check_cache(args.out / objective, cache_identity(objective), write=False)
        groups = load_groups(args.out / objective, prompts, args.groups_per_prompt)
        results["settings"]["parameters"] = groups.parameters
        results["settings"]["noise_floor"] = _round(1 / math.sqrt(groups.parameters), 5)
        results["objectives"][objective] = analyse(groups, args.n_values, args.subsets)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    figure = args.results.with_suffix(".png")
    results["settings"]["figure"] = {"path": figure.name, "drawn_with": draw_figure(results, figure)}
    _write_atomic(args.results, lambda tmp: tmp.write_text(json.dumps(results, indent=1) + "\n"))
    print_table(results)
    print(f"\nwrote {args.results} and {figure}")
    return results


if __name__ == "__main__":
    main()
