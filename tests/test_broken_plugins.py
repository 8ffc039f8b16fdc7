"""A broken third-party plugin never takes `cast` down; strict mode turns it into an error."""

from conftest import plugins_json, run_cast

RAISES_ON_IMPORT = 'raise RuntimeError("boom at import")\n'

MISSPELLED_HOOK = """
from cast_core import hookimpl

@hookimpl
def register_scorers(register):  # the real hook is register_atom_scorers
    pass
"""

DUPLICATE = """
from cast_core import hookimpl, lazy

@hookimpl
def register_atom_scorers(register):
    register("constant", lazy("cast_core.testing.fakes:ConstantScorer"))
"""


def test_import_error_is_listed_and_the_rest_works(fake_install):
    path = fake_install("broken-cast-plugin", RAISES_ON_IMPORT, "broken")
    help_out = run_cast("--help", extra_path=path)
    assert help_out.returncode == 0 and "plugins" in help_out.stdout
    assert "skipped plugin 'broken' from broken-cast-plugin 0.1" in help_out.stderr
    data = plugins_json(extra_path=path)
    assert data["failed"] == [
        {
            "name": "broken",
            "distribution": "broken-cast-plugin",
            "version": "0.1",
            "error": "RuntimeError: boom at import",
        }
    ]
    assert {"cast-core", "cast-plugin-example"} <= {p["name"] for p in data["plugins"]}
    table = run_cast("plugins", extra_path=path)
    assert table.returncode == 0 and "boom at import" in table.stdout


def test_strict_mode_makes_it_an_error(fake_install):
    path = fake_install("broken-cast-plugin", RAISES_ON_IMPORT, "broken")
    out = run_cast("plugins", env={"CAST_STRICT_PLUGINS": "1"}, extra_path=path)
    assert out.returncode == 1
    assert "plugin 'broken' from broken-cast-plugin 0.1 failed: RuntimeError: boom at import" in out.stderr
    assert "Traceback" not in out.stderr


def test_misspelled_hook_is_reported(fake_install):
    path = fake_install("typo-cast-plugin", MISSPELLED_HOOK)
    data = plugins_json(extra_path=path)
    (failure,) = data["failed"]
    assert failure["distribution"] == "typo-cast-plugin" and "register_scorers" in failure["error"]


def test_duplicate_component_names_both_providers(fake_install):
    """`cast plugins` shows the clash (it is where the user looks); a command using the name refuses."""
    path = fake_install("dup-cast-plugin", DUPLICATE)
    data = plugins_json(extra_path=path)
    (failure,) = data["failed"]
    assert "scorer 'constant' is registered twice" in failure["error"]
    assert "cast-core" in failure["error"] and "dup-cast-plugin" in failure["error"]
    out = run_cast("score", "x.png", "-p", "a red circle", "--scorer", "constant", extra_path=path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "scorer 'constant' is registered twice" in out.stderr and "dup-cast-plugin" in out.stderr


def test_a_plugin_calling_sys_exit_at_import_is_skipped_with_a_line(fake_install):
    path = fake_install("exiting-cast-plugin", "import sys\nsys.exit(3)\n", "exiting")
    out = run_cast("plugins", "--json", extra_path=path)
    assert out.returncode == 0, out.stderr
    import json

    (failure,) = json.loads(out.stdout)["failed"]
    assert failure["distribution"] == "exiting-cast-plugin" and failure["error"] == "SystemExit: 3"


def test_cast_load_plugins_naming_nothing_installed_is_one_line():
    out = run_cast("plugins", env={"CAST_LOAD_PLUGINS": "cast-shapes,cast-shpaes"})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "CAST_LOAD_PLUGINS names cast-shpaes, which no installed distribution provides" in out.stderr
