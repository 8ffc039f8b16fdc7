"""cast-shapes is discovered through its installed entry point, and loading it stays light."""

import numpy as np
from click.testing import CliRunner
from PIL import Image

from cast_core.testing.plugin_package import PluginPackageConformance


class TestCastShapesPlugin(PluginPackageConformance):
    distribution = "cast-shapes"
    plugin_module = "cast_shapes.plugin"
    expected_components = {"atom_scorer": ["shapes-oracle"], "command": ["shapes"]}


def test_oracle_builds_through_the_registry():
    from cast_core import get_atom_scorer
    from cast_shapes.oracle import ShapesOracleScorer

    assert isinstance(get_atom_scorer("shapes-oracle"), ShapesOracleScorer)


def test_render_command_writes_the_world_image(tmp_path):
    from cast_shapes.commands import shapes_group
    from cast_shapes.grammar import parse_prompt
    from cast_shapes.render import render
    from cast_shapes.world import sample_layout

    prompt = "a red circle above two blue squares"
    out = CliRunner().invoke(shapes_group, ["render", prompt, "--out", str(tmp_path / "x.png"), "--seed", "4"])
    assert out.exit_code == 0, out.output
    written = np.asarray(Image.open(tmp_path / "x.png"))
    assert np.array_equal(written, render(sample_layout(parse_prompt(prompt), 4)).transpose(1, 2, 0))
    bad = CliRunner().invoke(shapes_group, ["render", "a red hexagon", "--out", str(tmp_path / "y.png")])
    assert bad.exit_code == 1 and "hexagon" in bad.output


def test_suite_commands():
    from cast_shapes.commands import shapes_group
    from cast_shapes.suites import suite

    out = CliRunner().invoke(shapes_group, ["suite", "heldout-hard"])
    assert out.output.splitlines() == suite("heldout-hard")
    assert "heldout-hard" in CliRunner().invoke(shapes_group, ["suites"]).output
    assert CliRunner().invoke(shapes_group, ["suite", "nope"]).exit_code == 1
