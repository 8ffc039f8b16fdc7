"""From images to advantages: verdicts per group, gathered over ranks, projected to maps.

A rank holds part of a group at most; the projector needs the whole group (per-atom z-scores
across the G images). So each rank scores its own images, the per-group verdicts (scores, and
heatmaps when the projector uses them) are gathered, and every rank projects the whole group —
an identical computation everywhere — and keeps the rows it owns. Heatmaps travel on the
scorer's own grid (a VLM judge's is coarse: one token per 32 px), scores are K floats per image.

A group counts only if every part of it was scored and finite: a judge that failed on one
rank's images removes the group on every rank, so no rank trains on a group the others skip.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from cast_core.aggregate import arithmetic_mean, geometric_mean
from cast_core.distributed import Distributed
from cast_core.errors import SceneGraphError, ScorerContractError, ScorerUnavailable
from cast_core.protocols import HeatmapNeeds
from cast_core.scene_graph import SceneGraph
from cast_core.types import GroupVerdict, Rollout, ScoredGroups

__all__ = ["GroupVerdict", "Judge", "reward_stats"]


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


def local_rows(rollout: Rollout, index: int) -> list[int]:
    """Rows of ``rollout`` holding members of the step's ``index``-th prompt group."""
    return [i for i, (p, _) in enumerate(rollout.sample_ids) if p == index]


class Judge:
    """Scores a rollout's images with the scorer, one call per (local part of a) group, and
    turns whole groups' verdicts into advantage maps with the projector."""

    def __init__(
        self,
        scorer: Any,
        decomposer: Any,
        projector: Any,
        dist: Distributed,
        *,
        group_size: int,
        heatmap_source: str = "final",
        log: Callable[[str], None] = print,
    ):
        self.scorer, self.decomposer, self.projector, self.dist = scorer, decomposer, projector, dist
        self.group_size = group_size
        self.needs_maps = projector.needs_heatmaps if isinstance(projector, HeatmapNeeds) else True
        self.maps_from_x0 = heatmap_source == "x0" and self.needs_maps
        self.log = log
        self.graphs: dict[str, SceneGraph] = {}
        self.step = 0  # for log lines

    def graph(self, prompt: str) -> SceneGraph:
        if prompt not in self.graphs:
            self.graphs[prompt] = self.decomposer.decompose(prompt)
        return self.graphs[prompt]

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

    def _score(self, prompt: str, images: torch.Tensor, graph: SceneGraph, heatmaps: bool):
        """One scorer call: (scores [n, K], heatmaps [n, K, H, W] or None, error or None), on the CPU."""
        try:
            out = self.scorer.score(images, [graph] * len(images), heatmaps=heatmaps)
        except ScorerUnavailable as err:  # no judge at all: every rank stops after the gather (never one alone)
            return None, None, _UNAVAILABLE + str(err)
        except Exception as err:  # noqa: BLE001 - one bad batch must not kill a long run
            return None, None, f"scorer failed on prompt {prompt!r} ({type(err).__name__}: {err})"
        broken = self._contract_violation(out, images, graph, heatmaps)
        if broken:  # a plugin bug: every rank stops after the gather, naming the scorer
            return None, None, _CONTRACT + broken
        scores = torch.stack([s.detach().float().cpu() for s in out.scores])
        if not torch.isfinite(scores).all():
            return None, None, f"non-finite scores for prompt {prompt!r}"
        maps = torch.stack([h.detach().float().cpu() for h in out.heatmaps]) if heatmaps else None
        return scores, maps, None

    def _contract_violation(self, out: Any, images: torch.Tensor, graph: SceneGraph, heatmaps: bool) -> str | None:
        """What the scorer's answer breaks of the AtomScorer contract, or None. NaN is not a
        violation here: it keeps its own guard (the group is skipped and counted)."""
        name = type(self.scorer).__name__
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

    def _gather(self, parts: dict[int, tuple]) -> dict[int, tuple[torch.Tensor | None, torch.Tensor | None, list[str]]]:
        """Merge every rank's ``{group: (member ids, scores, maps, error)}`` into whole groups:
        ``{group: (scores [G, K] or None, maps or None, errors)}`` — None when any part failed."""
        merged: dict[int, list] = {}
        for rank_parts in self.dist.gather_objects(parts):
            for p, part in rank_parts.items():
                merged.setdefault(p, []).append(part)
        fatal = [
            e for pieces in merged.values() for _, _, _, e in pieces if e and e.startswith((_UNAVAILABLE, _CONTRACT))
        ]
        if fatal:  # raised on every rank, after the collective, so none waits for the others
            error = ScorerUnavailable if fatal[0].startswith(_UNAVAILABLE) else ScorerContractError
            raise error(fatal[0].split(": ", 1)[1])
        out = {}
        for p, pieces in sorted(merged.items()):
            errors = [e for _, _, _, e in pieces if e]
            if errors:
                out[p] = (None, None, errors)
                continue
            pieces.sort(key=lambda piece: piece[0][0])
            scores = torch.cat([s for _, s, _, _ in pieces])
            maps = None if pieces[0][2] is None else torch.cat([m for _, _, m, _ in pieces])
            out[p] = (scores, maps, [])
        return out

    def _skip(self, errors: list[str]) -> int:
        """Log a dropped group's errors; their number, for the caller's count."""
        if self.dist.is_main:
            for e in errors:
                self.log(f"step {self.step}: {e}; group skipped")
        return len(errors)

    def verdicts(self, prompts: Sequence[str], rollout: Rollout) -> tuple[list[GroupVerdict], int]:
        """Verdicts on the final images for every group the scorer could judge (identical on
        every rank), and how many scorer errors dropped the others. Heatmaps come along when the
        projector uses final-image maps."""
        final_maps = self.needs_maps and not self.maps_from_x0
        self.share_graphs(prompts)
        parts = {}
        for p in sorted({p for p, _ in rollout.sample_ids}):
            rows = local_rows(rollout, p)
            scores, maps, err = self._score(prompts[p], rollout.images[rows], self.graph(prompts[p]), final_maps)
            parts[p] = ([rollout.sample_ids[r][1] for r in rows], scores, maps, err)
        verdicts, failures = [], 0
        for p, (scores, maps, errors) in self._gather(parts).items():
            if errors:
                failures += self._skip(errors)
                continue
            verdicts.append(GroupVerdict(p, self.graph(prompts[p]), scores, maps))
        return verdicts, failures

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
            parts = {}
            for v in verdicts:
                rows = local_rows(rollout, v.index)
                if rows:
                    _, maps, err = self._score(v.graph.prompt, map_images[rows], v.graph, True)
                    parts[v.index] = ([rollout.sample_ids[r][1] for r in rows], torch.zeros(0), maps, err)
            gathered = self._gather(parts)
            kept_verdicts = []
            for v in verdicts:
                _, maps, errors = gathered.get(v.index, (None, None, ["no member of the group was scored"]))
                if errors:
                    failures += self._skip(errors)
                    continue
                kept_verdicts.append(GroupVerdict(v.index, v.graph, v.scores, maps))
            verdicts = kept_verdicts
        rows_out, ids_out, maps_out, stats = [], [], [], []
        for v in verdicts:
            amap = self.projector.project(v.scores, v.heatmaps, v.graph, latent_grid)
            stats.append(amap.stats)
            values = amap.values.reshape(len(v.scores), -1)
            for r in local_rows(rollout, v.index):
                member = rollout.sample_ids[r][1]
                rows_out.append(r)
                ids_out.append(rollout.sample_ids[r])
                maps_out.append(values[member])
        adv = torch.stack(maps_out) if maps_out else torch.empty(0, latent_grid[0] * latent_grid[1])
        return ScoredGroups(rows_out, ids_out, adv, list(verdicts), stats, failures)
