"""From images to advantages: verdicts per group, gathered over ranks, projected to maps.

A rank holds part of a group at most; the projector needs the whole group (per-atom z-scores
across the G images). So each rank scores its own images, the per-group verdicts (scores, and
heatmaps when the projector uses them) are gathered, and every rank projects the whole group —
an identical computation everywhere — and keeps the rows it owns. Heatmaps travel on the
scorer's own grid (a VLM judge's is coarse: one token per 32 px), scores are K floats per image.

A group counts only if every part of it was scored and finite: a judge that failed on one
rank's images removes the group on every rank, so no rank trains on a group the others skip.

With several scorers (config ``scorers``, :mod:`cast_core.scorer_set`) every scorer judges every
group, each on its own graph, and a group counts only when all of them judged it; the maps are
projected per scorer and add up weighted.

Scoring (:meth:`Judge.score_local`: this rank's images, no collective) is apart from gathering
(:meth:`Judge.collect`: the one collective), so that the trainer can score one chunk of a step's
images while it samples the next (``async_scoring``) and gather once at the end.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from cast_core.aggregate import arithmetic_mean, geometric_mean
from cast_core.distributed import Distributed
from cast_core.errors import SceneGraphError, ScorerContractError, ScorerUnavailable
from cast_core.protocols import HeatmapNeeds
from cast_core.scene_graph import SceneGraph, prompt_level_graph
from cast_core.scorer_set import ScorerSlot
from cast_core.types import GroupVerdict, Rollout, ScoredGroups

__all__ = ["GroupVerdict", "Judge", "reward_stats", "multi_reward_stats"]


_UNAVAILABLE = "scorer unavailable: "  # marks a ScorerUnavailable carried through the gather
_CONTRACT = "scorer contract: "  # marks a ScorerContractError carried through the gather


def reward_stats(
    verdicts: Sequence[GroupVerdict], amap_stats: Sequence[dict] = (), projected: Sequence[GroupVerdict] | None = None
) -> dict:
    """Reward GM/AM/spread and per-atom-kind pass rates of judged groups, and (given the
    projector's stats of the ``projected`` groups, default the same groups) the fraction of
    saturated atoms."""
    projected = verdicts if projected is None else projected
    gms, ams, passes = [], [], {}
    for v in verdicts:
        for row in v.scores.tolist():
            gms.append(geometric_mean(row))
            ams.append(arithmetic_mean(row))
        for k, atom in enumerate(v.graph.atoms):
            passes.setdefault(atom.kind, []).extend((v.scores[:, k] >= 0.5).float().tolist())
    sat = sum(int(st.get("saturated_atoms", 0)) for st in amap_stats)
    total = sum(int(st.get("total_atoms", len(v.graph.atoms))) for st, v in zip(amap_stats, projected))
    return {
        "reward_gm": sum(gms) / len(gms) if gms else float("nan"),
        "reward_am": sum(ams) / len(ams) if ams else float("nan"),
        "reward_std": float(torch.tensor(gms).std(unbiased=False)) if gms else float("nan"),
        "saturated_fraction": sat / total if total else float("nan"),
        **{f"pass_{kind}": sum(v) / len(v) for kind, v in passes.items()},
    }


def multi_reward_stats(
    verdicts: Sequence[GroupVerdict], slots: Sequence[ScorerSlot], amap_stats: Sequence[dict] = ()
) -> dict:
    """A several-scorer step's statistics: each scorer's ``reward_gm/LABEL``, ``reward_am/LABEL``,
    ``reward_std/LABEL``; ``reward_gm`` / ``reward_am`` / ``reward_std`` of the per-image weighted
    mean ``Σ w_s·GM_s / Σ w_s``; pass rates and ``saturated_fraction`` over the atoms of the
    scorers that score atoms (prompt-level ones have none to pass)."""
    out: dict = {}
    total = sum(s.weight for s in slots)
    gm_mix: torch.Tensor | None = None
    am_mix: torch.Tensor | None = None
    for slot in slots:
        own = [v.by_scorer[slot.label] for v in verdicts]
        stats = reward_stats(own)
        for key in ("reward_gm", "reward_am", "reward_std"):
            out[f"{key}/{slot.label}"] = stats[key]
        if own:
            gms = torch.tensor([geometric_mean(r) for v in own for r in v.scores.tolist()], dtype=torch.float64)
            ams = torch.tensor([arithmetic_mean(r) for v in own for r in v.scores.tolist()], dtype=torch.float64)
            gm_mix = slot.weight / total * gms + (0 if gm_mix is None else gm_mix)
            am_mix = slot.weight / total * ams + (0 if am_mix is None else am_mix)
    atom_level = [v.by_scorer[s.label] for v in verdicts for s in slots if not s.prompt_level]
    stats = reward_stats(atom_level, amap_stats, projected=[])
    out.update({k: v for k, v in stats.items() if k.startswith("pass_")})
    sat = sum(int(st.get("saturated_atoms", 0)) for st in amap_stats)
    atoms = sum(int(st.get("total_atoms", 0)) for st in amap_stats)
    out["saturated_fraction"] = sat / atoms if atoms else float("nan")
    nan = float("nan")
    out["reward_gm"] = float(gm_mix.mean()) if gm_mix is not None else nan
    out["reward_am"] = float(am_mix.mean()) if am_mix is not None else nan
    out["reward_std"] = float(gm_mix.std(unbiased=False)) if gm_mix is not None else nan
    return out


def local_rows(rollout: Rollout, index: int) -> list[int]:
    """Rows of ``rollout`` holding members of the step's ``index``-th prompt group."""
    return rows_of(rollout.sample_ids, index)


def rows_of(sample_ids: Sequence[tuple[int, int]], index: int) -> list[int]:
    """Positions in ``sample_ids`` of the members of prompt group ``index``."""
    return [i for i, (p, _) in enumerate(sample_ids) if p == index]


class Judge:
    """Scores a rollout's images with the run's scorers, one call per scorer and (local part of
    a) group, and turns whole groups' verdicts into advantage maps with the projector."""

    def __init__(
        self,
        scorers: Any,
        decomposer: Any,
        projector: Any,
        dist: Distributed,
        *,
        group_size: int,
        heatmap_source: str = "final",
        log: Callable[[str], None] = print,
        adv_clip: float = 5.0,
        several: bool = False,
    ):
        if isinstance(scorers, ScorerSlot):
            scorers = [scorers]
        elif not isinstance(scorers, (list, tuple)):  # one bare scorer: the short form
            scorers = [ScorerSlot(type(scorers).__name__, scorers)]
        self.slots: list[ScorerSlot] = list(scorers)
        self.decomposer, self.projector, self.dist = decomposer, projector, dist
        self.group_size = group_size
        self.needs_maps = projector.needs_heatmaps if isinstance(projector, HeatmapNeeds) else True
        self.maps_from_x0 = heatmap_source == "x0" and self.needs_maps
        # a listed run (config ``scorers``) keeps each scorer's verdict and applies its weight,
        # even with one scorer; the short form is the one-scorer path of old
        self.several = several or len(self.slots) > 1 or any(s.prompt_level for s in self.slots)
        if any(s.prompt_level for s in self.slots):
            from cast_core.projectors import ScalarProjector

            self.prompt_projector = ScalarProjector(adv_clip=adv_clip)
        self.log = log
        self.graphs: dict[str, SceneGraph] = {}
        self.prompt_graphs: dict[str, SceneGraph] = {}
        self.step = 0  # for log lines

    @property
    def scorer(self) -> Any:
        """The first scorer (it draws the sample grids' verdicts); setting it replaces it."""
        return self.slots[0].scorer

    @scorer.setter
    def scorer(self, scorer: Any) -> None:
        self.slots[0].scorer = scorer

    def graph(self, prompt: str) -> SceneGraph:
        if prompt not in self.graphs:
            self.graphs[prompt] = self.decomposer.decompose(prompt)
        return self.graphs[prompt]

    def graph_for(self, slot: ScorerSlot, prompt: str) -> SceneGraph:
        """The graph ``slot`` scores: the decomposer's, or one prompt-level atom."""
        if not slot.prompt_level:
            return self.graph(prompt)
        if prompt not in self.prompt_graphs:
            self.prompt_graphs[prompt] = prompt_level_graph(prompt)
        return self.prompt_graphs[prompt]

    def share_graphs(self, prompts: Sequence[str]) -> None:
        """Decompose the step's new prompts once, on rank 0, and give every rank the same graphs:
        an LLM decomposer is neither run once per process nor allowed to answer two processes
        differently. Every rank calls this with the same prompts (a collective)."""
        if not self.dist.active:
            return
        new = [p for p in dict.fromkeys(prompts) if p not in self.graphs]
        shared = None
        if self.dist.is_main:
            try:
                shared = {p: self.graph(p).to_dict() for p in new}
            except SceneGraphError as err:  # every rank raises it, none waits in the broadcast
                shared = {"__error__": str(err)}
        shared = self.dist.broadcast_object(shared)
        if "__error__" in shared:
            raise SceneGraphError(shared["__error__"])
        for p, data in shared.items():
            self.graphs.setdefault(p, SceneGraph.from_dict(data))

    def _score(self, slot: ScorerSlot, prompt: str, images: torch.Tensor, graph: SceneGraph, heatmaps: bool):
        """One scorer call: (scores [n, K], heatmaps [n, K, H, W] or None, error or None), on the CPU."""
        who = f"scorer {slot.label!r} " if len(self.slots) > 1 else "scorer "
        try:
            out = slot.scorer.score(images, [graph] * len(images), heatmaps=heatmaps)
        except ScorerUnavailable as err:  # no judge at all: every rank stops after the gather (never one alone)
            return None, None, _UNAVAILABLE + (f"scorer {slot.label!r}: " if len(self.slots) > 1 else "") + str(err)
        except Exception as err:  # noqa: BLE001 - one bad batch must not kill a long run
            return None, None, f"{who}failed on prompt {prompt!r} ({type(err).__name__}: {err})"
        name = type(slot.scorer).__name__
        if len(self.slots) > 1:  # two `remote` entries share a class: the label tells them apart
            name = f"{slot.label!r} ({name})"
        broken = self._contract_violation(name, out, images, graph, heatmaps)
        if broken:  # a plugin bug: every rank stops after the gather, naming the scorer
            return None, None, _CONTRACT + broken
        scores = torch.stack([s.detach().float().cpu() for s in out.scores])
        if not torch.isfinite(scores).all():
            return None, None, f"non-finite scores {'from ' + who if len(self.slots) > 1 else ''}for prompt {prompt!r}"
        maps = torch.stack([h.detach().float().cpu() for h in out.heatmaps]) if heatmaps else None
        return scores, maps, None

    @staticmethod
    def _contract_violation(name: str, out: Any, images: torch.Tensor, graph: SceneGraph, heatmaps: bool) -> str | None:
        """What the scorer's answer (scorer ``name``) breaks of the AtomScorer contract, or None.
        NaN is not a violation here: it keeps its own guard (the group is skipped and counted)."""
        k = len(graph.atoms)
        if len(out.scores) != len(images):
            return f"scorer {name} returned {len(out.scores)} score rows for {len(images)} images"
        for s in out.scores:
            if tuple(s.shape) != (k,):
                return f"scorer {name} returned scores shaped {tuple(s.shape)} for {k} atoms of {graph.prompt!r}"
            finite = s[torch.isfinite(s)]
            if len(finite) and (float(finite.min()) < -1e-6 or float(finite.max()) > 1 + 1e-6):
                return (
                    f"scorer {name} returned scores outside [0, 1] (from {float(finite.min()):.4g} to "
                    f"{float(finite.max()):.4g}) for {graph.prompt!r}; atom scores are probabilities"
                )
        if heatmaps:
            for h in out.heatmaps or [None] * len(images):
                if h is None or h.ndim != 3 or h.shape[0] != k:
                    shape = None if h is None else tuple(h.shape)
                    return f"scorer {name} returned heatmaps shaped {shape}, expected [{k}, H, W]"
        return None

    def _gather(self, parts: dict[str, dict[int, tuple]]) -> dict[str, dict[int, tuple]]:
        """Merge every rank's ``{label: {group: (member ids, scores, maps, error)}}`` into whole
        groups: ``{label: {group: (scores [G, K] or None, maps or None, errors)}}`` — None when
        any part failed. One collective for all scorers."""
        merged: dict[str, dict[int, list]] = {}
        for rank_parts in self.dist.gather_objects(parts):
            for label, groups in rank_parts.items():
                for p, part in groups.items():
                    merged.setdefault(label, {}).setdefault(p, []).append(part)
        fatal = [
            e
            for groups in merged.values()
            for pieces in groups.values()
            for _, _, _, e in pieces
            if e and e.startswith((_UNAVAILABLE, _CONTRACT))
        ]
        if fatal:  # raised on every rank, after the collective, so none waits for the others
            error = ScorerUnavailable if fatal[0].startswith(_UNAVAILABLE) else ScorerContractError
            raise error(fatal[0].split(": ", 1)[1])
        out: dict[str, dict[int, tuple]] = {}
        for label, groups in merged.items():
            whole = out.setdefault(label, {})
            for p, pieces in sorted(groups.items()):
                errors = [e for _, _, _, e in pieces if e]
                if errors:
                    whole[p] = (None, None, errors)
                    continue
                pieces.sort(key=lambda piece: piece[0][0])
                scores = torch.cat([s for _, s, _, _ in pieces])
                maps = None if pieces[0][2] is None else torch.cat([m for _, _, m, _ in pieces])
                whole[p] = (scores, maps, [])
        return out

    def _skip(self, errors: list[str]) -> int:
        """Log a dropped group's errors; their number, for the caller's count."""
        if self.dist.is_main:
            for e in errors:
                self.log(f"step {self.step}: {e}; group skipped")
        return len(errors)

    def score_local(
        self,
        prompts: Sequence[str],
        images: torch.Tensor,
        sample_ids: Sequence[tuple[int, int]],
        groups: Sequence[int] | None = None,
    ) -> dict[str, dict[int, tuple]]:
        """Every scorer's verdicts on this rank's ``images`` (rows named by ``sample_ids``) of
        ``groups`` (default all): ``{label: {group: (member ids, scores, maps, error)}}``. No
        collective: call :meth:`share_graphs` first, and :meth:`collect` with the parts."""
        final_maps = self.needs_maps and not self.maps_from_x0
        groups = sorted({p for p, _ in sample_ids}) if groups is None else sorted(groups)
        parts: dict[str, dict[int, tuple]] = {}
        for slot in self.slots:
            own = parts.setdefault(slot.label, {})
            maps = final_maps and not slot.prompt_level
            for p in groups:
                rows = rows_of(sample_ids, p)
                scores, heat, err = self._score(slot, prompts[p], images[rows], self.graph_for(slot, prompts[p]), maps)
                own[p] = ([sample_ids[r][1] for r in rows], scores, heat, err)
        return parts

    def collect(self, prompts: Sequence[str], parts: dict[str, dict[int, tuple]]) -> tuple[list[GroupVerdict], int]:
        """Gather every rank's parts (a collective) into verdicts on whole groups, identical on
        every rank, and how many scorer errors dropped the others."""
        gathered = self._gather(parts)
        verdicts, failures = [], 0
        first = self.slots[0].label
        for p in sorted(gathered.get(first, {})):
            errors = [e for slot in self.slots for e in gathered[slot.label][p][2]]
            if errors:
                failures += self._skip(errors)
                continue
            by_scorer = {
                slot.label: GroupVerdict(p, self.graph_for(slot, prompts[p]), *gathered[slot.label][p][:2])
                for slot in self.slots
            }
            head = by_scorer[first]
            verdicts.append(GroupVerdict(p, head.graph, head.scores, head.heatmaps, by_scorer if self.several else {}))
        return verdicts, failures

    def verdicts(self, prompts: Sequence[str], rollout: Rollout) -> tuple[list[GroupVerdict], int]:
        """Verdicts on the final images for every group the scorers could judge (identical on
        every rank), and how many scorer errors dropped the others. Heatmaps come along when the
        projector uses final-image maps."""
        self.share_graphs(prompts)
        return self.collect(prompts, self.score_local(prompts, rollout.images, rollout.sample_ids))

    def advantages(
        self,
        verdicts: Sequence[GroupVerdict],
        rollout: Rollout,
        latent_grid: tuple[int, int],
        map_images: torch.Tensor | None = None,
    ) -> ScoredGroups:
        """Advantage maps of the judged groups (this rank's rows, the groups kept, the
        projector's stats). ``map_images`` (this rank's rows) are what the
        heatmaps are scored on when they do not come from the final image (x̂0 before the
        window: it depends on the state before the window's actions only, so weighting a
        position's log-prob by it cannot reward the actions for where objects ended up)."""
        failures = 0
        if map_images is not None:
            verdicts, failures = self._maps_on(verdicts, rollout, map_images)
        rows_out, ids_out, maps_out, stats = [], [], [], []
        for v in verdicts:
            values, amap_stats = self._project(v, latent_grid)
            stats.append(amap_stats)
            values = values.reshape(len(v.scores), -1)
            for r in local_rows(rollout, v.index):
                member = rollout.sample_ids[r][1]
                rows_out.append(r)
                ids_out.append(rollout.sample_ids[r])
                maps_out.append(values[member])
        adv = torch.stack(maps_out) if maps_out else torch.empty(0, latent_grid[0] * latent_grid[1])
        return ScoredGroups(rows_out, ids_out, adv, list(verdicts), stats, failures)

    def _project(self, v: GroupVerdict, latent_grid: tuple[int, int]) -> tuple[torch.Tensor, dict]:
        """One group's map: the projector's, or with several scorers ``Σ_s w_s · A_s`` (each
        scorer projected on its own atoms; a prompt-level one by its prompt-level advantage),
        with the atom counts summed over the scorers."""
        if not v.by_scorer:
            amap = self.projector.project(v.scores, v.heatmaps, v.graph, latent_grid)
            return amap.values, dict(amap.stats)
        values, stats = None, {}
        for slot in self.slots:
            part = v.by_scorer[slot.label]
            projector = self.prompt_projector if slot.prompt_level else self.projector
            amap = projector.project(part.scores, part.heatmaps, part.graph, latent_grid)
            values = slot.weight * amap.values + (0 if values is None else values)
            for key in ("saturated_atoms", "total_atoms"):  # over the atom-level scorers' atoms
                stats[key] = stats.get(key, 0) + (0 if slot.prompt_level else amap.stats.get(key, 0))
            stats.update({f"{k}/{slot.label}": x for k, x in amap.stats.items()})
        return values, stats

    def _maps_on(
        self, verdicts: Sequence[GroupVerdict], rollout: Rollout, map_images: torch.Tensor
    ) -> tuple[list[GroupVerdict], int]:
        """The verdicts with heatmaps scored on ``map_images`` instead of the final images (every
        scorer that has maps; a prompt-level one has none)."""
        failures = 0
        parts: dict[str, dict[int, tuple]] = {}
        for slot in self.slots:
            if slot.prompt_level:
                continue
            own = parts.setdefault(slot.label, {})
            for v in verdicts:
                rows = local_rows(rollout, v.index)
                if rows:
                    graph = self.graph_for(slot, v.graph.prompt)
                    _, maps, err = self._score(slot, v.graph.prompt, map_images[rows], graph, True)
                    own[v.index] = ([rollout.sample_ids[r][1] for r in rows], torch.zeros(0), maps, err)
        gathered = self._gather(parts)
        kept = []
        for v in verdicts:
            errors: list[str] = []
            new_parts = dict(v.by_scorer)
            for label, groups in gathered.items():
                _, maps, errs = groups.get(v.index, (None, None, ["no member of the group was scored"]))
                errors += errs
                if not errs and v.by_scorer:
                    old = v.by_scorer[label]
                    new_parts[label] = GroupVerdict(v.index, old.graph, old.scores, maps)
            if errors:
                failures += self._skip(errors)
                continue
            first = self.slots[0].label
            maps = new_parts[first].heatmaps if v.by_scorer else gathered[first][v.index][1]
            kept.append(GroupVerdict(v.index, v.graph, v.scores, maps, new_parts))
        return kept, failures
