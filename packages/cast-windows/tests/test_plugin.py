"""cast-windows is discovered through its installed entry point, and loading it stays light."""

from cast_core import list_components
from cast_core.testing.plugin_package import PluginPackageConformance


class TestCastWindowsPlugin(PluginPackageConformance):
    distribution = "cast-windows"
    plugin_module = "cast_windows.plugin"
    expected_components = {
        "window_selector": ["clip-curvature", "fixed", "random", "sliding"],
        "embedder": ["clip", "pixels"],
        "command": ["window"],
    }


def test_components_are_listed():
    assert {"clip-curvature", "fixed", "random", "sliding"} <= set(list_components("window_selector"))
    assert {"clip", "pixels"} <= set(list_components("embedder"))
