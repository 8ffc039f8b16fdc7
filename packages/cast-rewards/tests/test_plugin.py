"""cast-rewards is discovered through its installed entry point, and loading it stays light."""

from cast_core.testing.plugin_package import PluginPackageConformance


class TestCastRewardsPlugin(PluginPackageConformance):
    distribution = "cast-rewards"
    plugin_module = "cast_rewards.plugin"
