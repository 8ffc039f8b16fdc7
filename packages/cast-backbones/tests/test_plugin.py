"""cast-backbones is discovered through its installed entry point, and loading it stays light."""

from cast_core.testing.plugin_package import PluginPackageConformance


class TestCastBackbonesPlugin(PluginPackageConformance):
    distribution = "cast-backbones"
    plugin_module = "cast_backbones.plugin"
