"""Every package and the example plugin are discovered from real installed metadata."""

from importlib import metadata

from conftest import plugins_json, run_cast

PACKAGES = ["cast-core", "cast-rewards", "cast-backbones", "cast-windows", "cast-shapes", "cast-plugin-example"]


def test_all_distributions_are_listed():
    data = plugins_json()
    assert [p["name"] for p in data["plugins"]][0] == "cast-core"
    assert set(PACKAGES) <= {p["name"] for p in data["plugins"]}
    assert data["failed"] == []


def test_example_plugin_comes_from_its_installed_entry_point():
    (ep,) = [ep for ep in metadata.entry_points(group="cast") if ep.dist.metadata["Name"] == "cast-plugin-example"]
    assert ep.value == "cast_plugin_example.plugin"
    example = next(p for p in plugins_json()["plugins"] if p["name"] == "cast-plugin-example")
    assert example["components"] == {"atom_scorer": ["mean-brightness"], "objective": ["reward-ranked"]}
    assert example["version"] == metadata.version("cast-plugin-example")


def test_cast_load_plugins_restricts_distributions():
    only = plugins_json(env={"CAST_LOAD_PLUGINS": "cast-plugin-example"})
    assert [p["name"] for p in only["plugins"]] == ["cast-core", "cast-plugin-example"]
    none = plugins_json(env={"CAST_LOAD_PLUGINS": ""})
    assert [p["name"] for p in none["plugins"]] == ["cast-core"]
    normalised = plugins_json(env={"CAST_LOAD_PLUGINS": " Cast_Plugin.Example "})
    assert "cast-plugin-example" in [p["name"] for p in normalised["plugins"]]


def test_human_table_lists_everything():
    out = run_cast("plugins")
    assert out.returncode == 0
    for name in PACKAGES + ["mean-brightness", "fake", "constant"]:
        assert name in out.stdout
