"""cast-windows is discovered through its installed entry point, and loading it stays light."""

from cast_core.testing.plugin_package import PluginPackageConformance


class TestCastWindowsPlugin(PluginPackageConformance):
    distribution = "cast-windows"
    plugin_module = "cast_windows.plugin"
