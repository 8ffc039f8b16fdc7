"""`cast` CLI: version, `plugins` (table and JSON), plugin commands, one-line errors."""

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from cast_core import PluginError, get_atom_scorer, hookimpl
from cast_core.cli import CastGroup, PLUGIN_COMMANDS, cli, install_plugin_commands, plugins_command
from cast_core.plugins import failures
from cast_core.version import __version__


def test_version():
    out = CliRunner().invoke(cli, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == f"cast {__version__}"


def test_plugins_json_shape():
    out = CliRunner().invoke(cli, ["plugins", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert set(data) == {"plugins", "failed"} and isinstance(data["failed"], list)
    assert data["plugins"][0]["name"] == "cast-core"
    for entry in data["plugins"]:
        assert set(entry) == {"name", "version", "components"}
        assert all(isinstance(v, list) for v in entry["components"].values())
    core = data["plugins"][0]
    assert core["version"] == __version__
    assert core["components"]["policy"] == ["fake"]
    assert core["components"]["atom_scorer"] == ["brightness", "constant", "left-brightness", "sleeping"]
    assert core["components"]["advantage_projector"] == ["atoms", "scalar", "spatial"]
    assert core["components"]["recipe"] == ["awm", "cast", "cast-awm", "cast-nft", "flow-grpo", "nft"]
    assert core["components"]["objective"] == ["awm", "nft", "sde-clipped"]


def test_plugins_table_lists_builtins():
    out = CliRunner().invoke(cli, ["plugins"])
    assert out.exit_code == 0
    assert "cast-core" in out.output and "fake" in out.output and "constant" in out.output


def _fresh_group():
    @click.group(cls=CastGroup)
    def group():
        pass

    group.add_command(plugins_command)
    return group


def test_plugin_commands_are_added_and_attributed(add_plugin):
    class Hello:
        @hookimpl
        def register_commands(self, cli):
            @cli.command()
            def hello():
                """Say hello."""
                click.echo("hello from a plugin")

            @cli.command()
            def lookup():
                get_atom_scorer("nope")

    name = add_plugin(Hello(), "hello-plugin")
    group = _fresh_group()
    install_plugin_commands(group)
    runner = CliRunner()
    assert runner.invoke(group, ["hello"]).output == "hello from a plugin\n"
    assert PLUGIN_COMMANDS[name] == ["hello", "lookup"]
    data = json.loads(runner.invoke(group, ["plugins", "--json"]).output)
    local = next(p for p in data["plugins"] if "hello-plugin" in p["name"])
    assert local["components"]["command"] == ["hello", "lookup"]
    # a deliberate cast error is one clean line, exit code 1, no traceback
    out = runner.invoke(group, ["lookup"])
    assert out.exit_code == 1
    assert out.output.startswith("Error: Unknown scorer 'nope'. Choose one of: ") and "Traceback" not in out.output
    PLUGIN_COMMANDS.pop(name)


def test_a_raising_register_commands_is_skipped(only_builtins, add_plugin):
    class Broken:
        @hookimpl
        def register_commands(self, cli):
            @cli.command()
            def half_added():
                pass

            raise RuntimeError("command hook exploded")

    add_plugin(Broken())
    group = _fresh_group()
    install_plugin_commands(group)
    assert set(group.commands) == {"plugins"}
    assert any("command hook exploded" in f.error for f in failures())


def test_replacing_an_existing_command_is_refused(add_plugin):
    class Hijack:
        @hookimpl
        def register_commands(self, cli):
            @cli.command("plugins")
            def fake_plugins():
                pass

    add_plugin(Hijack(), "hijack")
    group = _fresh_group()
    with pytest.raises(PluginError, match="replace the existing command\\(s\\) plugins"):
        install_plugin_commands(group)
    assert group.commands["plugins"] is plugins_command


def test_help_does_not_import_torch():
    code = (
        "import sys\n"
        "from cast_core.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'LIGHT')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("LIGHT"), out.stdout
    assert "plugins" in out.stdout
