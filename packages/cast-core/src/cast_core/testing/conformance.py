"""Conformance kits: the behavioural contract of each component kind, as inheritable tests.

``isinstance(x, AtomScorer)`` only proves the methods exist. These kits prove they behave:
shapes, ranges, determinism, adapter on/off, save/load round-trips. Subclass one in a test
module under a ``Test*`` name and implement its ``make_*`` method; pytest collects the
inherited ``test_*`` methods. Override the class attributes (``prompts``, ``image_size`` …)
where your component needs other inputs. The kits depend on torch only, not on pytest.
"""

from __future__ import annotations

import tempfile
from typing import Any, Sequence

import torch

from cast_core.protocols import AdvantageProjector, AtomDecomposer, AtomScorer, Embedder, Policy, WindowSelector
from cast_core.scene_graph import ATOM_KINDS, SceneGraph
from cast_core.sde import check_schedule
from cast_core.types import AdvantageMap, AtomScores, Window


def _perturb_(params: Sequence[torch.nn.Parameter], seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(0.5 * torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype))


class PolicyConformance:
    """Contract of a :class:`~cast_core.protocols.Policy`. Implement :meth:`make_policy`."""

    prompts: Sequence[str] = ("a red circle", "two blue squares left of a green triangle")
    num_steps: int = 4

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

    def test_sigmas_descend_to_zero(self):
        policy = self.make_policy()
        s = policy.sigmas(self.num_steps)
        check_schedule(s, self.num_steps, type(policy).__name__)  # length, descending, 0 at the end, ≤ 1
        assert s.dtype == torch.float32
        assert float(s[0]) > 0.0

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
    override :meth:`make_inputs` to feed images your scorer understands."""

    image_size: tuple[int, int] = (32, 32)

    def make_scorer(self) -> Any:
        raise NotImplementedError("return a freshly built scorer")

    def make_inputs(self) -> tuple[torch.Tensor, list[SceneGraph]]:
        from cast_core.testing.fakes import simple_graph

        images = torch.rand(3, 3, *self.image_size, generator=torch.Generator().manual_seed(0))
        graphs = [simple_graph(), simple_graph("two blue squares", "square", "blue", 2), simple_graph("a circle", colour=None)]
        return images, graphs

    def test_is_scorer(self):
        assert isinstance(self.make_scorer(), AtomScorer)

    def test_scores_align_with_atoms_and_lie_in_unit_range(self):
        images, graphs = self.make_inputs()
        out = self.make_scorer().score(images, graphs, heatmaps=False)
        assert isinstance(out, AtomScores) and len(out) == len(graphs)
        for g, s in zip(graphs, out.scores):
            assert s.shape == (len(g.atoms),), f"{g.prompt!r}: {tuple(s.shape)} scores for {len(g.atoms)} atoms"
            assert bool(((s >= 0) & (s <= 1)).all()), f"{g.prompt!r}: scores outside [0, 1]: {s.tolist()}"
        assert out.heatmaps is None, "heatmaps must be None when not requested"

    def test_heatmaps_cover_the_image_and_are_non_negative(self):
        """Heatmaps may be on the image grid or on the judge's own coarser grid (a VLM gives one
        token per 32 px; the projector resizes them), as long as the grid covers the whole
        image with the image's aspect ratio (within one cell) and every image of a call uses
        the same grid."""
        images, graphs = self.make_inputs()
        out = self.make_scorer().score(images, graphs, heatmaps=True)
        assert out.heatmaps is not None and len(out.heatmaps) == len(graphs)
        H, W = images.shape[-2:]
        grids = set()
        for g, m in zip(graphs, out.heatmaps):
            assert m.ndim == 3 and m.shape[0] == len(g.atoms), tuple(m.shape)
            h, w = m.shape[-2:]
            assert 1 <= h <= H and 1 <= w <= W, f"heatmap grid {h}x{w} is finer than the {H}x{W} image"
            assert abs(h * W / H - w) <= 1 + 1e-6, f"heatmap grid {h}x{w} does not have the image's aspect {H}x{W}"
            assert bool((m >= 0).all()) and bool(torch.isfinite(m).all())
            grids.add((h, w))
        assert len(grids) <= 1, f"images of one call got heatmaps on different grids: {sorted(grids)}"

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


class WindowSelectorConformance:
    """Contract of a :class:`~cast_core.protocols.WindowSelector`. Implement
    :meth:`make_selector`; the policy defaults to the built-in fake."""

    prompts: Sequence[str] = ("a red circle", "two blue squares")
    step_counts: Sequence[int] = (6, 10)

    def make_selector(self) -> Any:
        raise NotImplementedError("return a freshly built window selector")

    def make_policy(self) -> Any:
        from cast_core.testing.fakes import FakePolicy

        return FakePolicy()

    def test_is_window_selector(self):
        assert isinstance(self.make_selector(), WindowSelector)

    def test_window_fits_the_schedule(self):
        sel, policy = self.make_selector(), self.make_policy()
        for n in self.step_counts:
            w = sel.select(policy, list(self.prompts), n)
            assert isinstance(w, Window)
            assert w.size >= 1 and w.end <= n, f"window {w.start}+{w.size} does not fit {n} steps"

    def test_is_deterministic(self):
        policy = self.make_policy()
        a = self.make_selector().select(policy, list(self.prompts), self.step_counts[0])
        b = self.make_selector().select(policy, list(self.prompts), self.step_counts[0])
        assert (a.start, a.size) == (b.start, b.size)


class AdvantageProjectorConformance:
    """Contract of an :class:`~cast_core.protocols.AdvantageProjector`. Implement
    :meth:`make_projector`."""

    group_size: int = 4
    image_size: tuple[int, int] = (16, 16)
    latent_grid: tuple[int, int] = (4, 4)

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
        alone = torch.cat([embedder.embed(images[i:i + 1]) for i in range(images.shape[0])])
        torch.testing.assert_close(alone, together, atol=self.atol, rtol=self.atol)

    def test_tells_different_images_apart(self):
        emb = self.make_embedder().embed(self.make_images()).float()
        cos = torch.nn.functional.cosine_similarity(emb[:, None], emb[None], dim=-1)
        off_diagonal = cos[~torch.eye(len(emb), dtype=torch.bool)]
        assert bool((off_diagonal < 1 - 1e-4).all()), f"different images embed identically: cosines {cos.tolist()}"
