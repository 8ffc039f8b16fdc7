"""cast-rewards is discovered through its installed entry point, and loading it stays light."""

from cast_core.testing.plugin_package import PluginPackageConformance


class TestCastRewardsPlugin(PluginPackageConformance):
    distribution = "cast-rewards"
    plugin_module = "cast_rewards.plugin"
    expected_components = {"atom_decomposer": ["template"]}


def test_template_builds_through_the_registry():
    from cast_core import get_atom_decomposer
    from cast_rewards.template import TemplateDecomposer

    assert isinstance(get_atom_decomposer("template"), TemplateDecomposer)
