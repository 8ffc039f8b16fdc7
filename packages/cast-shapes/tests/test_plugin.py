"""cast-shapes is discovered through its installed entry point, and loading it stays light."""

from cast_core.testing.plugin_package import PluginPackageConformance


class TestCastShapesPlugin(PluginPackageConformance):
    distribution = "cast-shapes"
    plugin_module = "cast_shapes.plugin"
