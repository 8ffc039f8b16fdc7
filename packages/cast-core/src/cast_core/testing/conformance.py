"""Conformance kits: the behavioural contract of each component kind, as inheritable tests.

``isinstance(x, AtomScorer)`` only proves the methods exist. These kits prove they behave:
shapes, ranges, determinism, adapter on/off, save/load round-trips. Subclass one in a test
module under a ``Test*`` name and implement its ``make_*`` method; pytest collects the
inherited ``test_*`` methods. Override the class attributes (``prompts``, ``image_size`` …)
where your component needs other inputs. The kits depend on torch only, not on pytest.

The kits' own inputs are adversarial on purpose, because kind inputs let real mistakes through:
black, white and saturated images, non-square sizes, graphs without atoms and long graphs,
schedules of 1 to 4 steps, all-zero heatmaps. docs/plugins.md lists every check and option.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from typing import Any, Sequence

import torch

from cast_core.errors import CastError, SceneGraphError
from cast_core.protocols import AdvantageProjector, AtomDecomposer, AtomScorer, Embedder, Policy, WindowSelector
from cast_core.scene_graph import ATOM_KINDS, Atom, Entity, SceneGraph
from cast_core.sde import check_schedule
from cast_core.testing.features import check_features
from cast_core.types import AdvantageMap, AtomScores, Window


def extreme_images(size: Sequence[int]) -> torch.Tensor:
    """``[6, 3, H, W]``: black, white, pure red, green and blue, and pixels each 0 or 1. Random
    images average near 0.5 and hide a score or a normalisation that breaks at the ends of the
    range; these sit on them."""
    h, w = size
    black, white = torch.zeros(3, h, w), torch.ones(3, h, w)
    primaries = [torch.zeros(3, h, w).index_fill_(0, torch.tensor([c]), 1.0) for c in range(3)]
    binary = (torch.rand(3, h, w, generator=torch.Generator().manual_seed(0)) > 0.5).float()
    return torch.stack([black, white, *primaries, binary])


def _cycle(items: Sequence[Any], n: int) -> list[Any]:
    return [items[i % len(items)] for i in range(n)]


def _perturb_(params: Sequence[torch.nn.Parameter], seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(0.5 * torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype))


class PolicyConformance:
    """Contract of a :class:`~cast_core.protocols.Policy`. Implement :meth:`make_policy`."""

    prompts: Sequence[str] = ("a red circle", "two blue squares left of a green triangle")
    num_steps: int = 4
    #: what a Plannable policy's plan is traced at (``build_for_plan(plan_architecture)``); None is
    #: the policy's default — name a small architecture when that default is a 32B model
    plan_architecture: str | None = None

    def make_policy(self) -> Any:
        raise NotImplementedError("return a freshly built policy (small and on CPU)")

    def _inputs(self, policy: Any, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        x = policy.initial_noise(len(self.prompts), None, gen)
        return x, policy.encode(list(self.prompts), image_size=None)

    def test_image_size_reaches_encode_and_velocity(self):
        policy = self.make_policy()
        size = tuple(policy.default_image_size)
        x = policy.initial_noise(len(self.prompts), size, torch.Generator().manual_seed(0))
        cond = policy.encode(list(self.prompts), image_size=size)
        with torch.no_grad():
            v = policy.velocity(x, torch.tensor(0.5), cond, image_size=size)
            plain = policy.velocity(x, torch.tensor(0.5), cond)
        torch.testing.assert_close(v, plain, msg="image_size=default_image_size must equal leaving it unset")

    def test_conditioning_rows_select_and_concatenate(self):
        """Conditioning is per row: the velocity of rows selected from a batch, or of rows
        encoded apart and concatenated (ragged lengths included), is the batch's velocity."""
        from cast_core.conditioning import check_conditioning, concat_rows, num_rows, select_rows

        policy = self.make_policy()
        x, cond = self._inputs(policy)
        check_conditioning(cond, type(policy).__name__)
        n = len(self.prompts)
        assert num_rows(cond) == n, f"encode gave {num_rows(cond)} rows for {n} prompts"
        apart = concat_rows([policy.encode([p], image_size=None) for p in self.prompts])
        reversed_rows = select_rows(cond, list(range(n))[::-1])
        with torch.no_grad():
            whole = policy.velocity(x, torch.tensor(0.5), cond)
            torch.testing.assert_close(policy.velocity(x, torch.tensor(0.5), apart), whole, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(policy.velocity(x.flip(0), torch.tensor(0.5), reversed_rows), whole.flip(0))

    def test_is_policy(self):
        assert isinstance(self.make_policy(), Policy)

    def test_optional_features_keep_their_contracts(self):
        """Each optional feature the policy has (cast_core.protocols.OPTIONAL_FEATURES) is checked
        on a fresh policy: inference() restores the weights, offloading keeps the velocity …"""
        check_features(
            "policy",
            self.make_policy(),
            make_policy=self.make_policy,
            prompts=self.prompts,
            plan_architecture=self.plan_architecture,
        )

    def test_sigmas_descend_to_zero(self):
        policy = self.make_policy()
        s = policy.sigmas(self.num_steps)
        check_schedule(s, self.num_steps, type(policy).__name__)  # length, descending, 0 at the end, ≤ 1
        assert s.dtype == torch.float32
        assert float(s[0]) > 0.0

    def test_short_schedules_are_valid_or_refused(self):
        """Schedules of 1-4 steps are where a shifted or terminal-stretched schedule breaks
        (diffusers' ``shift_terminal`` gives NaN for one step): a policy returns a valid schedule
        or refuses the step count with a ValueError, never a schedule that breaks the sampler."""
        policy = self.make_policy()
        for n in (1, 2, 3, 4):
            try:
                s = policy.sigmas(n)
            except ValueError:
                continue
            check_schedule(s, n, f"{type(policy).__name__}.sigmas({n})")
            assert s.dtype == torch.float32 and float(s[0]) > 0.0, f"sigmas({n}) = {s.tolist()}"

    def test_initial_noise_matches_grid_and_seed(self):
        policy = self.make_policy()
        h, w = policy.latent_grid()
        a = policy.initial_noise(2, None, torch.Generator().manual_seed(1))
        b = policy.initial_noise(2, None, torch.Generator().manual_seed(1))
        c = policy.initial_noise(2, None, torch.Generator().manual_seed(2))
        assert a.ndim == 3 and a.shape[:2] == (2, h * w), f"expected [2, {h * w}, C], got {tuple(a.shape)}"
        assert torch.equal(a, b) and not torch.equal(a, c)

    def test_velocity_shape_and_per_sample_sigma(self):
        policy = self.make_policy()
        x, cond = self._inputs(policy)
        with torch.no_grad():
            v_scalar = policy.velocity(x, torch.tensor(0.5), cond)
            v_batch = policy.velocity(x, torch.full((x.shape[0],), 0.5), cond)
        assert v_scalar.shape == x.shape and torch.isfinite(v_scalar).all()
        torch.testing.assert_close(v_scalar, v_batch)

    def test_velocity_is_deterministic(self):
        policy = self.make_policy()
        x, cond = self._inputs(policy)
        with torch.no_grad():
            assert torch.equal(policy.velocity(x, torch.tensor(0.3), cond), policy.velocity(x, torch.tensor(0.3), cond))

    def test_decode_gives_images_in_unit_range(self):
        policy = self.make_policy()
        x, _ = self._inputs(policy)
        with torch.no_grad():
            img = policy.decode(x)
        assert img.shape == (x.shape[0], 3, *policy.default_image_size), tuple(img.shape)
        assert float(img.min()) >= 0.0 and float(img.max()) <= 1.0

    def test_gradients_reach_trainable_parameters(self):
        policy = self.make_policy()
        params = list(policy.trainable_parameters())
        assert params and all(p.requires_grad for p in params)
        _perturb_(params, 0)  # an untrained LoRA-style adapter may block gradients to one factor
        x, cond = self._inputs(policy)
        policy.velocity(x, torch.tensor(0.7), cond).float().square().mean().backward()
        assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params)

    def test_reference_switches_the_adapter_off(self):
        policy = self.make_policy()
        x, cond = self._inputs(policy)
        sigma = torch.tensor(0.6)
        with torch.no_grad():
            base = policy.velocity(x, sigma, cond)
            with policy.reference():
                ref0 = policy.velocity(x, sigma, cond)
            torch.testing.assert_close(base, ref0, msg="a freshly built adapter must be a no-op")
            _perturb_(list(policy.trainable_parameters()), 1)
            tuned = policy.velocity(x, sigma, cond)
            with policy.reference():
                ref = policy.velocity(x, sigma, cond)
            after = policy.velocity(x, sigma, cond)
        torch.testing.assert_close(ref, base, msg="reference() must ignore the adapter")
        assert not torch.allclose(tuned, base), "changing the adapter must change the velocity"
        torch.testing.assert_close(after, tuned, msg="leaving reference() must restore the adapter")

    def test_adapter_save_load_round_trip(self):
        policy = self.make_policy()
        x, cond = self._inputs(policy)
        params = list(policy.trainable_parameters())
        _perturb_(params, 2)
        with torch.no_grad():
            saved = policy.velocity(x, torch.tensor(0.4), cond)
        with tempfile.TemporaryDirectory() as tmp:
            policy.save_adapter(tmp)
            _perturb_(params, 3)
            policy.load_adapter(tmp)
        with torch.no_grad():
            torch.testing.assert_close(policy.velocity(x, torch.tensor(0.4), cond), saved)


class AtomScorerConformance:
    """Contract of an :class:`~cast_core.protocols.AtomScorer`. Implement :meth:`make_scorer`;
    override :meth:`make_inputs` to feed images and graphs your scorer understands. The
    adversarial checks reuse those graphs (and their image size) with the kit's own images:
    extreme colours, non-square sizes (``non_square_sizes``, by default twice as wide and twice as
    tall), a graph without atoms and one of at least ``long_graph_atoms`` atoms."""

    image_size: tuple[int, int] = (32, 32)
    non_square_sizes: Sequence[tuple[int, int]] | None = None
    long_graph_atoms: int = 32
    atol: float = 1e-5

    def make_scorer(self) -> Any:
        raise NotImplementedError("return a freshly built scorer")

    def make_inputs(self) -> tuple[torch.Tensor, list[SceneGraph]]:
        from cast_core.testing.fakes import simple_graph

        images = torch.rand(3, 3, *self.image_size, generator=torch.Generator().manual_seed(0))
        graphs = [
            simple_graph(),
            simple_graph("two blue squares", "square", "blue", 2),
            simple_graph("a circle", colour=None),
        ]
        return images, graphs

    def make_long_graph(self) -> SceneGraph:
        """Copies of :meth:`make_inputs`' graphs joined into one, so its words are ones the
        scorer understands; override for a long prompt of your own."""
        _, graphs = self.make_inputs()
        entities: list[Entity] = []
        atoms: list[Atom] = []
        copy = 0
        while len(atoms) < self.long_graph_atoms:
            for j, g in enumerate(graphs):
                ids = {x.id: f"{x.id}-{copy}-{j}" for x in (*g.entities, *g.atoms)}
                entities += [replace(e, id=ids[e.id]) for e in g.entities]
                atoms += [
                    replace(
                        a,
                        id=ids[a.id],
                        entity=ids[a.entity],
                        other=ids.get(a.other, a.other),
                        parents=tuple(ids[q] for q in a.parents),
                    )
                    for a in g.atoms
                ]
            copy += 1
        prompt = " and ".join(g.prompt for g in graphs)
        return SceneGraph(prompt, tuple(entities), tuple(atoms)).validate()

    def _sizes(self, images: torch.Tensor) -> list[tuple[int, int]]:
        if self.non_square_sizes is not None:
            return [tuple(s) for s in self.non_square_sizes]
        h, w = images.shape[-2:]
        return [(h, 2 * w), (2 * h, w)]

    def _check_scores(self, out: Any, graphs: Sequence[SceneGraph], what: str) -> None:
        assert isinstance(out, AtomScores) and len(out) == len(graphs), f"{what}: one score row per image"
        for i, (g, s) in enumerate(zip(graphs, out.scores)):
            where = f"{what}, image {i} ({g.prompt!r})"
            assert s.shape == (len(g.atoms),), f"{where}: {tuple(s.shape)} scores for {len(g.atoms)} atoms"
            assert bool(torch.isfinite(s).all()), f"{where}: non-finite scores {s.tolist()}"
            assert bool(((s >= 0) & (s <= 1)).all()), f"{where}: scores outside [0, 1]: {s.tolist()}"

    def _check_heatmaps(self, out: Any, images: torch.Tensor, graphs: Sequence[SceneGraph], what: str) -> None:
        """Heatmaps may be on the image grid or on the judge's own coarser grid (a VLM gives one
        token per 32 px; the projector resizes them), as long as the grid covers the whole image
        with the image's aspect ratio (within one cell, both ways) and every image of a call uses
        the same grid. On a non-square image a map transposed to ``(W, H)`` fails here."""
        assert out.heatmaps is not None and len(out.heatmaps) == len(graphs), f"{what}: one heatmap stack per image"
        H, W = images.shape[-2:]
        grids = set()
        for i, (g, m) in enumerate(zip(graphs, out.heatmaps)):
            where = f"{what}, image {i} ({g.prompt!r})"
            assert m.ndim == 3 and m.shape[0] == len(g.atoms), f"{where}: heatmaps {tuple(m.shape)}, expected [K, h, w]"
            h, w = m.shape[-2:]
            assert 1 <= h <= H and 1 <= w <= W, f"{where}: heatmap grid {h}x{w} does not fit the {H}x{W} image"
            aspect_ok = abs(h * W / H - w) <= 1 + 1e-6 and abs(w * H / W - h) <= 1 + 1e-6
            assert aspect_ok, f"{where}: heatmap grid {h}x{w} does not have the {H}x{W} image's aspect (transposed?)"
            assert bool(torch.isfinite(m).all()), f"{where}: non-finite heatmap values"
            assert bool((m >= 0).all()), f"{where}: negative heatmap values"
            grids.add((h, w))
        assert len(grids) <= 1, f"{what}: images of one call got heatmaps on different grids: {sorted(grids)}"

    def test_is_scorer(self):
        assert isinstance(self.make_scorer(), AtomScorer)

    def test_scores_align_with_atoms_and_lie_in_unit_range(self):
        images, graphs = self.make_inputs()
        out = self.make_scorer().score(images, graphs, heatmaps=False)
        self._check_scores(out, graphs, "make_inputs()")
        assert out.heatmaps is None, "heatmaps must be None when not requested"

    def test_heatmaps_cover_the_image_and_are_non_negative(self):
        images, graphs = self.make_inputs()
        out = self.make_scorer().score(images, graphs, heatmaps=True)
        self._check_scores(out, graphs, "make_inputs() with heatmaps")
        self._check_heatmaps(out, images, graphs, "make_inputs()")

    def test_extreme_images_get_finite_scores_in_unit_range(self):
        """Black, white, pure primaries and 0/1 pixels, each judged against your graphs: a score
        scaled or shifted out of [0, 1], or a 0/0 on a black image, shows here."""
        inputs, graphs = self.make_inputs()
        images = extreme_images(inputs.shape[-2:]).to(inputs.dtype)
        graphs = _cycle(graphs, len(images))
        scorer = self.make_scorer()
        self._check_scores(scorer.score(images, graphs, heatmaps=False), graphs, "extreme images")
        out = scorer.score(images, graphs, heatmaps=True)
        self._check_scores(out, graphs, "extreme images with heatmaps")
        self._check_heatmaps(out, images, graphs, "extreme images")

    def test_non_square_images_get_heatmaps_in_their_orientation(self):
        inputs, graphs = self.make_inputs()
        scorer = self.make_scorer()
        for i, (h, w) in enumerate(self._sizes(inputs)):
            images = torch.rand(2, 3, h, w, generator=torch.Generator().manual_seed(i)).to(inputs.dtype)
            two = _cycle(graphs, 2)
            out = scorer.score(images, two, heatmaps=True)
            self._check_scores(out, two, f"{h}x{w} images")
            self._check_heatmaps(out, images, two, f"{h}x{w} images")

    def test_graphs_without_atoms_and_long_graphs(self):
        """A graph may have no atoms (``SceneGraph.validate`` allows it; scores ``[0]``, maps
        ``[0, h, w]``) or many, mixed in one call."""
        inputs, graphs = self.make_inputs()
        empty = SceneGraph(graphs[0].prompt).validate()
        mixed = [empty, self.make_long_graph()]
        images = inputs[:1].expand(2, *inputs.shape[1:]).clone()
        out = self.make_scorer().score(images, mixed, heatmaps=True)
        self._check_scores(out, mixed, "an empty and a long graph")
        self._check_heatmaps(out, images, mixed, "an empty and a long graph")

    def test_an_image_scores_the_same_alone_as_in_a_batch(self):
        """Scores are per image: normalising over the batch (a min-max, a softmax across images)
        stays in range and would pass every other check."""
        images, graphs = self.make_inputs()
        scorer = self.make_scorer()
        together = scorer.score(images, graphs).scores
        for i in range(len(images)):
            alone = scorer.score(images[i : i + 1], graphs[i : i + 1]).scores[0]
            torch.testing.assert_close(
                alone, together[i], atol=self.atol, rtol=0, msg=lambda m, i=i: f"image {i} alone vs in the batch: {m}"
            )

    def test_scores_are_deterministic(self):
        images, graphs = self.make_inputs()
        scorer = self.make_scorer()
        a, b = scorer.score(images, graphs), scorer.score(images, graphs)
        for x, y in zip(a.scores, b.scores):
            torch.testing.assert_close(x, y)


class AtomDecomposerConformance:
    """Contract of an :class:`~cast_core.protocols.AtomDecomposer`. Implement
    :meth:`make_decomposer`; override ``prompts`` with prompts it must handle."""

    prompts: Sequence[str] = ("a red circle", "two blue squares left of a green triangle")

    def make_decomposer(self) -> Any:
        raise NotImplementedError("return a freshly built decomposer")

    def test_is_decomposer(self):
        assert isinstance(self.make_decomposer(), AtomDecomposer)

    def test_optional_features_keep_their_contracts(self):
        check_features("atom_decomposer", self.make_decomposer(), prompts=self.prompts)

    def test_graphs_are_valid_and_keep_the_prompt(self):
        dec = self.make_decomposer()
        for prompt in self.prompts:
            g = dec.decompose(prompt)
            assert isinstance(g, SceneGraph) and g.prompt == prompt
            g.validate()
            assert g.atoms, f"{prompt!r} decomposed into no atoms"
            assert all(a.kind in ATOM_KINDS for a in g.atoms)
            objects = {a.entity for a in g.atoms if a.kind == "object"}
            assert objects == {e.id for e in g.entities}, f"{prompt!r}: every entity needs an object atom"

    def test_json_round_trip(self):
        dec = self.make_decomposer()
        for prompt in self.prompts:
            g = dec.decompose(prompt)
            assert SceneGraph.from_json(g.to_json()) == g

    def test_is_deterministic(self):
        dec = self.make_decomposer()
        for prompt in self.prompts:
            assert dec.decompose(prompt).to_dict() == dec.decompose(prompt).to_dict()

    def test_blank_and_long_prompts_are_refused_or_decomposed(self):
        """Prompts no grammar expects: refused with a ``SceneGraphError`` (the trainer stops with
        its message) or turned into a valid graph of that very prompt; never another exception,
        such as an IndexError on an empty word list."""
        dec = self.make_decomposer()
        long_prompt = ", and ".join(list(self.prompts) * 8)
        for prompt in ("", "   ", long_prompt):
            try:
                g = dec.decompose(prompt)
            except SceneGraphError:
                continue
            assert isinstance(g, SceneGraph) and g.prompt == prompt, f"{prompt[:40]!r}: the graph must keep the prompt"
            g.validate()


class WindowSelectorConformance:
    """Contract of a :class:`~cast_core.protocols.WindowSelector`. Implement
    :meth:`make_selector`; the policy defaults to the built-in fake.

    ``step_counts`` are the schedule lengths the selector serves: each must give a window that
    fits. A selector configured with explicit steps that cannot fit a short schedule (``fixed``
    at steps 1..3 needs 4) narrows ``step_counts`` in its test; the kit still tries 1-4 steps and
    then wants a fitting window or a ValueError, never a window past the schedule's end."""

    prompts: Sequence[str] = ("a red circle", "two blue squares")
    step_counts: Sequence[int] = (1, 2, 3, 4, 6, 10)

    def make_selector(self) -> Any:
        raise NotImplementedError("return a freshly built window selector")

    def make_policy(self) -> Any:
        from cast_core.testing.fakes import FakePolicy

        return FakePolicy()

    @staticmethod
    def _check_fits(w: Any, n: int) -> None:
        assert isinstance(w, Window), f"select() returned {type(w).__name__}, not a Window"
        assert w.size >= 1 and w.end <= n, f"window {w.start}+{w.size} does not fit {n} steps"

    def test_is_window_selector(self):
        assert isinstance(self.make_selector(), WindowSelector)

    def test_optional_features_keep_their_contracts(self):
        """A per-step window is a pure function of (seed, step) that fits every schedule the
        selector serves; prompts_for names prompts."""
        check_features(
            "window_selector",
            self.make_selector(),
            policy=self.make_policy(),
            prompts=self.prompts,
            step_counts=self.step_counts,
        )

    def test_window_fits_the_schedule(self):
        sel, policy = self.make_selector(), self.make_policy()
        for n in self.step_counts:
            self._check_fits(sel.select(policy, list(self.prompts), n), n)

    def test_short_schedules_fit_or_are_refused(self):
        sel, policy = self.make_selector(), self.make_policy()
        for n in sorted({1, 2, 3, 4} - set(self.step_counts)):
            try:
                w = sel.select(policy, list(self.prompts), n)
            except (ValueError, CastError):
                continue
            self._check_fits(w, n)

    def test_is_deterministic(self):
        policy, n = self.make_policy(), max(self.step_counts)
        a = self.make_selector().select(policy, list(self.prompts), n)
        b = self.make_selector().select(policy, list(self.prompts), n)
        assert (a.start, a.size) == (b.start, b.size)


class AdvantageProjectorConformance:
    """Contract of an :class:`~cast_core.protocols.AdvantageProjector`. Implement
    :meth:`make_projector`."""

    group_size: int = 4
    image_size: tuple[int, int] = (16, 16)
    latent_grid: tuple[int, int] = (4, 4)
    non_square_image_size: tuple[int, int] = (16, 32)
    non_square_latent_grid: tuple[int, int] = (2, 4)

    def make_projector(self) -> Any:
        raise NotImplementedError("return a freshly built projector")

    def _inputs(self, seed: int = 0):
        from cast_core.testing.fakes import simple_graph

        graph = simple_graph()
        gen = torch.Generator().manual_seed(seed)
        scores = torch.rand(self.group_size, len(graph.atoms), generator=gen)
        heatmaps = torch.rand(self.group_size, len(graph.atoms), *self.image_size, generator=gen)
        return scores, heatmaps, graph

    def test_is_projector(self):
        assert isinstance(self.make_projector(), AdvantageProjector)

    def test_optional_features_keep_their_contracts(self):
        """A projector that says it needs no heatmaps must project without them."""
        scores, heatmaps, graph = self._inputs()
        check_features(
            "advantage_projector", self.make_projector(), inputs=(scores, heatmaps, graph), latent_grid=self.latent_grid
        )

    def test_map_shape_and_finite(self):
        scores, heatmaps, graph = self._inputs()
        out = self.make_projector().project(scores, heatmaps, graph, self.latent_grid)
        assert isinstance(out, AdvantageMap)
        assert out.values.shape == (self.group_size, *self.latent_grid), tuple(out.values.shape)
        assert out.prompt_advantages.shape == (self.group_size,)
        assert bool(torch.isfinite(out.values).all())

    def test_identical_images_get_no_advantage(self):
        scores, heatmaps, graph = self._inputs()
        scores = scores[:1].expand_as(scores).clone()
        heatmaps = heatmaps[:1].expand_as(heatmaps).clone()
        out = self.make_projector().project(scores, heatmaps, graph, self.latent_grid)
        torch.testing.assert_close(out.values, torch.zeros_like(out.values))

    def test_better_image_gets_higher_advantage(self):
        scores, heatmaps, graph = self._inputs()
        scores[0] = 0.95  # image 0 passes every atom, image 1 fails every atom
        scores[1] = 0.05
        out = self.make_projector().project(scores, heatmaps, graph, self.latent_grid)
        assert float(out.values[0].mean()) > float(out.values[1].mean())

    def _check_finite(self, out: Any, grid: Sequence[int], what: str) -> None:
        assert isinstance(out, AdvantageMap), f"{what}: project() returned {type(out).__name__}"
        assert out.values.shape == (self.group_size, *grid), f"{what}: values {tuple(out.values.shape)}"
        assert out.prompt_advantages.shape == (self.group_size,), f"{what}: {tuple(out.prompt_advantages.shape)}"
        finite = bool(torch.isfinite(out.values).all()) and bool(torch.isfinite(out.prompt_advantages).all())
        assert finite, f"{what}: non-finite advantages"

    def test_zero_missing_and_saturated_inputs_give_finite_maps(self):
        """A judge gives an all-zero map on a black image, a scalar judge gives no maps at all,
        a prompt's graph may have no atoms, and a group may pass or fail every atom: no 0/0."""
        scores, heatmaps, graph = self._inputs()
        projector = self.make_projector()
        self._check_finite(
            projector.project(scores, torch.zeros_like(heatmaps), graph, self.latent_grid),
            self.latent_grid,
            "all-zero heatmaps",
        )
        self._check_finite(projector.project(scores, None, graph, self.latent_grid), self.latent_grid, "heatmaps=None")
        g, k = self.group_size, len(graph.atoms)
        for value in (0.0, 1.0):
            self._check_finite(
                projector.project(torch.full((g, k), value), heatmaps, graph, self.latent_grid),
                self.latent_grid,
                f"every score {value}",
            )
        empty = SceneGraph(graph.prompt).validate()
        out = projector.project(torch.zeros(g, 0), torch.zeros(g, 0, *self.image_size), empty, self.latent_grid)
        self._check_finite(out, self.latent_grid, "a graph without atoms")

    def test_advantage_follows_the_heatmap_on_a_non_square_grid(self):
        """Every atom of every image looked at the top-left quarter of a wide image: the image
        that passes every atom gets no less advantage in any cell of that quarter than anywhere
        else, the one that fails every atom no more. A map flipped, or resized with height and
        width swapped, moves the advantage out of the quarter."""
        scores, _, graph = self._inputs()
        scores[0], scores[1] = 0.95, 0.05
        (H, W), (h, w) = self.non_square_image_size, self.non_square_latent_grid
        heatmaps = torch.zeros(self.group_size, len(graph.atoms), H, W)
        heatmaps[..., : H // 2, : W // 2] = 1.0
        out = self.make_projector().project(scores, heatmaps, graph, (h, w))
        self._check_finite(out, (h, w), f"{H}x{W} heatmaps on a {h}x{w} grid")
        quarter = torch.zeros(h, w, dtype=torch.bool)
        quarter[: h // 2, : w // 2] = True
        passed, failed = out.values[0], out.values[1]
        assert float(passed[quarter].min()) >= float(passed[~quarter].max()) - 1e-6, (
            f"the image that passes gets more advantage outside where its judge looked: {passed.tolist()}"
        )
        assert float(failed[quarter].max()) <= float(failed[~quarter].min()) + 1e-6, (
            f"the image that fails gets less blame where its judge looked: {failed.tolist()}"
        )


class EmbedderConformance:
    """Contract of an :class:`~cast_core.protocols.Embedder`. Implement :meth:`make_embedder`;
    override :meth:`make_images` to feed images your embedder understands.

    Window selection compares embeddings of one image batch with another's by cosine similarity,
    so what matters is: one finite vector per image, the same vector for the same image however it
    is batched, and different vectors for clearly different images.
    """

    image_size: tuple[int, int] = (32, 32)
    atol: float = 1e-4

    def make_embedder(self) -> Any:
        raise NotImplementedError("return a freshly built embedder (small and on CPU)")

    def make_images(self) -> torch.Tensor:
        """Four different images ``[4, 3, H, W]`` in ``[0, 1]``."""
        gen = torch.Generator().manual_seed(0)
        noise = torch.rand(2, 3, *self.image_size, generator=gen)
        h, w = self.image_size
        half = torch.ones(3, h, w)
        half[:, :, : w // 2] = 0.0
        return torch.cat([noise, half[None], 1.0 - half[None]])

    def test_is_embedder(self):
        assert isinstance(self.make_embedder(), Embedder)

    def test_optional_features_keep_their_contracts(self):
        check_features("embedder", self.make_embedder())

    def test_one_finite_vector_per_image(self):
        images = self.make_images()
        emb = self.make_embedder().embed(images)
        assert isinstance(emb, torch.Tensor) and emb.ndim == 2, f"expected [B, D], got {getattr(emb, 'shape', emb)}"
        assert emb.shape[0] == images.shape[0] and emb.shape[1] >= 1, tuple(emb.shape)
        assert emb.is_floating_point() and bool(torch.isfinite(emb).all())

    def test_is_deterministic(self):
        images = self.make_images()
        embedder = self.make_embedder()
        torch.testing.assert_close(embedder.embed(images), embedder.embed(images))

    def test_batching_does_not_change_embeddings(self):
        images = self.make_images()
        embedder = self.make_embedder()
        together = embedder.embed(images)
        alone = torch.cat([embedder.embed(images[i : i + 1]) for i in range(images.shape[0])])
        torch.testing.assert_close(alone, together, atol=self.atol, rtol=self.atol)

    def test_extreme_and_non_square_images_embed_finitely(self):
        """Window selection embeds x̂0 estimates, which are often flat, clipped or saturated, at
        the policy's size, which need not be square: a norm of zero must not become NaN."""
        embedder = self.make_embedder()
        h, w = self.image_size
        for size in ((h, w), (h, 2 * w), (2 * h, w)):
            images = extreme_images(size)
            emb = embedder.embed(images)
            assert isinstance(emb, torch.Tensor) and emb.ndim == 2 and emb.shape[0] == len(images), (
                f"{size}: expected [{len(images)}, D], got {tuple(getattr(emb, 'shape', ()))}"
            )
            assert bool(torch.isfinite(emb).all()), f"{size}: non-finite embeddings for black/white/saturated images"

    def test_tells_different_images_apart(self):
        emb = self.make_embedder().embed(self.make_images()).float()
        cos = torch.nn.functional.cosine_similarity(emb[:, None], emb[None], dim=-1)
        off_diagonal = cos[~torch.eye(len(emb), dtype=torch.bool)]
        assert bool((off_diagonal < 1 - 1e-4).all()), f"different images embed identically: cosines {cos.tolist()}"
