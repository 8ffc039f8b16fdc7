"""The kits' adversarial inputs catch the mistakes their kind inputs let through (issue 38).

Each broken component below passes the kit's check on random square images or on 6 and 10 steps,
and fails the adversarial check next to it: scores x 1.5 or - 0.5 (pushed out of [0, 1] only by
white or black images), NaN on an all-black image, a heatmap transposed (invisible on square
images), a window fixed at 4 steps (invisible at 6 and 10). Then one mistake for each of the
other kinds' new checks: maps mirrored or resized with height and width swapped in a projector,
0/0 on a flat image in an embedder, a crash on an empty prompt, NaN sigmas for one step.
"""

import pytest
import torch

from cast_core import AtomScores, Window
from cast_core.projectors import SpatialProjector
from cast_core.testing import (
    AdvantageProjectorConformance,
    AtomDecomposerConformance,
    AtomScorerConformance,
    EmbedderConformance,
    FakeDecomposer,
    FakePolicy,
    PolicyConformance,
    WindowSelectorConformance,
    simple_graph,
)
from cast_core.testing.conformance import extreme_images


class Brightness:
    """A correct scorer: every atom scores the image's mean brightness (the mean of its
    channels, or of its brightest channel with ``peak``), and the heatmap is that per-pixel map."""

    peak = False

    def brightness(self, image):
        return image.amax(0) if self.peak else image.mean(0)

    def value(self, image):
        return self.brightness(image).mean()

    def heatmap(self, image):
        return self.brightness(image)

    def score(self, images, graphs, heatmaps=False):
        images = images.float()
        scores = [self.value(im).expand(len(g.atoms)).clone() for im, g in zip(images, graphs)]
        maps = [self.heatmap(im).expand(len(g.atoms), -1, -1).clone() for im, g in zip(images, graphs)]
        return AtomScores(list(graphs), scores, maps if heatmaps else None)


class PeakBrightness(Brightness):
    peak = True  # 0.75 on uniform noise, so that - 0.5 stays in range there


class ScoresTimesOneAndAHalf(Brightness):
    def value(self, image):
        return 1.5 * super().value(image)  # 0.75 on noise, 1.5 on white


class ScoresMinusAHalf(PeakBrightness):
    def value(self, image):
        return super().value(image) - 0.5  # 0.25 on noise, -0.5 on black


class NanOnBlack(Brightness):
    def value(self, image):
        b = self.brightness(image)
        return b.mean() / b.max()  # relative to the brightest pixel: 0 / 0 on black


class TransposedHeatmap(Brightness):
    def heatmap(self, image):
        return super().heatmap(image).T  # (W, H): the right shape only when H == W


class FixedAtFourSteps:
    def select(self, policy, prompts, num_steps):
        return Window(0, 4)


class TestBrightness(AtomScorerConformance):
    """The control: the same scorer without a mistake passes the whole kit."""

    def make_scorer(self):
        return Brightness()


class TestPeakBrightness(TestBrightness):
    def make_scorer(self):
        return PeakBrightness()


def probe(kit, maker, component, **attrs):
    return type("Probe", (kit,), {maker: lambda self: component(), **attrs})()


SCORER_MISTAKES = [
    pytest.param(
        ScoresTimesOneAndAHalf,
        "test_scores_align_with_atoms_and_lie_in_unit_range",
        "test_extreme_images_get_finite_scores_in_unit_range",
        r"outside \[0, 1\]: \[1.5",
        id="scores-x1.5",
    ),
    pytest.param(
        ScoresMinusAHalf,
        "test_scores_align_with_atoms_and_lie_in_unit_range",
        "test_extreme_images_get_finite_scores_in_unit_range",
        r"outside \[0, 1\]: \[-0.5",
        id="scores-0.5",
    ),
    pytest.param(
        NanOnBlack,
        "test_scores_align_with_atoms_and_lie_in_unit_range",
        "test_extreme_images_get_finite_scores_in_unit_range",
        "non-finite scores",
        id="nan-on-black",
    ),
    pytest.param(
        TransposedHeatmap,
        "test_heatmaps_cover_the_image_and_are_non_negative",
        "test_non_square_images_get_heatmaps_in_their_orientation",
        "grid 64x32 does not fit the 32x64 image",
        id="transposed-heatmap",
    ),
]


@pytest.mark.parametrize("broken, kind_check, adversarial_check, message", SCORER_MISTAKES)
def test_scorer_kit_catches_what_random_square_images_miss(broken, kind_check, adversarial_check, message):
    kit = probe(AtomScorerConformance, "make_scorer", broken)
    getattr(kit, kind_check)()  # random 32x32 images: the mistake does not show
    with pytest.raises(AssertionError, match=message):
        getattr(kit, adversarial_check)()


def test_the_mistakes_show_where_the_kit_looks():
    """What each failure above rests on, computed here by hand rather than through the kit."""
    black, white = extreme_images((4, 6))[:2]
    assert float(ScoresTimesOneAndAHalf().value(white)) == 1.5
    assert float(ScoresMinusAHalf().value(black)) == -0.5
    assert torch.isnan(NanOnBlack().value(black))
    assert TransposedHeatmap().heatmap(white).shape == (6, 4)


def test_window_kit_catches_a_window_fixed_at_four_steps():
    narrow = probe(WindowSelectorConformance, "make_selector", FixedAtFourSteps, step_counts=(6, 10))
    narrow.test_window_fits_the_schedule()  # the kit's old step counts: the mistake does not show
    with pytest.raises(AssertionError, match="does not fit 1 steps"):
        narrow.test_short_schedules_fit_or_are_refused()  # tried even when a test narrows step_counts
    with pytest.raises(AssertionError, match="does not fit 1 steps"):
        probe(WindowSelectorConformance, "make_selector", FixedAtFourSteps).test_window_fits_the_schedule()


def test_a_refused_short_schedule_is_not_a_failure():
    """A selector configured with steps a short schedule lacks refuses it with a ValueError
    (as ``Window.check_fits`` does): that is what the kit asks of steps outside step_counts."""

    class Refusing:
        def select(self, policy, prompts, num_steps):
            return Window(0, 4).check_fits(num_steps)

    kit = probe(WindowSelectorConformance, "make_selector", Refusing, step_counts=(4, 6, 10))
    kit.test_short_schedules_fit_or_are_refused()


# --- the other kinds' adversarial checks, each against the mistake it is there for -------------


class MirroredMapsProjector(SpatialProjector):
    def project(self, scores, heatmaps, graph, latent_grid):
        return super().project(scores, None if heatmaps is None else heatmaps.flip(-1), graph, latent_grid)


class SwappedGridProjector(SpatialProjector):
    def project(self, scores, heatmaps, graph, latent_grid):
        h, w = latent_grid
        out = super().project(scores, heatmaps, graph, (w, h))  # resized to (w, h), reshaped as (h, w)
        out.values = out.values.reshape(-1, h, w)
        return out


class UnitNormPixels:
    def embed(self, images):
        x = torch.nn.functional.interpolate(images.float(), size=(8, 8), mode="area").flatten(1)
        x = x - x.mean(1, keepdim=True)
        return x / x.norm(dim=1, keepdim=True)  # 0 / 0 on a flat (black, white) image


class LastWordDecomposer(FakeDecomposer):
    def decompose(self, prompt):
        return simple_graph(prompt, noun=prompt.split()[-1], colour=None)  # IndexError on ""


class NanForOneStep(FakePolicy):
    def sigmas(self, num_steps, image_size=None):
        s = torch.linspace(1.0, 0.0, num_steps + 1)
        return s / (1 - 1 / num_steps) if num_steps == 1 else s  # a terminal stretch dividing by 0


OTHER_MISTAKES = [
    pytest.param(
        AdvantageProjectorConformance,
        "make_projector",
        MirroredMapsProjector,
        "test_better_image_gets_higher_advantage",
        "test_advantage_follows_the_heatmap_on_a_non_square_grid",
        AssertionError,
        id="mirrored-maps",
    ),
    pytest.param(
        AdvantageProjectorConformance,
        "make_projector",
        SwappedGridProjector,
        "test_better_image_gets_higher_advantage",
        "test_advantage_follows_the_heatmap_on_a_non_square_grid",
        AssertionError,
        id="swapped-grid",
    ),
    pytest.param(
        EmbedderConformance,
        "make_embedder",
        UnitNormPixels,
        "test_one_finite_vector_per_image",
        "test_extreme_and_non_square_images_embed_finitely",
        AssertionError,
        id="nan-on-flat-image",
    ),
    pytest.param(
        AtomDecomposerConformance,
        "make_decomposer",
        LastWordDecomposer,
        "test_graphs_are_valid_and_keep_the_prompt",
        "test_blank_and_long_prompts_are_refused_or_decomposed",
        IndexError,
        id="empty-prompt-crash",
    ),
    pytest.param(
        PolicyConformance,
        "make_policy",
        NanForOneStep,
        "test_sigmas_descend_to_zero",
        "test_short_schedules_are_valid_or_refused",
        ValueError,
        id="nan-sigmas-for-one-step",
    ),
]


@pytest.mark.parametrize("kit, maker, broken, kind_check, adversarial_check, failure", OTHER_MISTAKES)
def test_other_kits_catch_what_kind_inputs_miss(kit, maker, broken, kind_check, adversarial_check, failure):
    probe_kit = probe(kit, maker, broken)
    getattr(probe_kit, kind_check)()
    with pytest.raises(failure):
        getattr(probe_kit, adversarial_check)()
