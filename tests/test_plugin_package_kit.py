"""The README's package test (PluginPackageConformance with ``expected_components``) run on a
plugin installed as a user would install it, once right and once with a hook missing
``@hookimpl``: pluggy skips an unmarked hook without a word, so only the kit can say so."""

import os
import sys

import pytest

from cast_core.testing import PluginPackageConformance

MARKED = """
from cast_core import hookimpl, lazy

@hookimpl
def register_atom_scorers(register):
    register("my-judge", lazy("cast_core.testing.fakes:ConstantScorer"), description="my VLM judge")
"""

UNMARKED = MARKED.replace("@hookimpl\n", "")

ONE_OF_TWO_UNMARKED = (
    MARKED
    + """
def register_window_selectors(register):
    register("my-window", lazy("cast_core.testing.fakes:FakePolicy"))
"""
)


@pytest.fixture
def install(fake_install, monkeypatch):
    """Installs ``cast-my-judge`` (module ``cast_my_judge``) for this process and its children."""

    def _install(source: str) -> None:
        path = fake_install("cast-my-judge", source, "my-judge")
        monkeypatch.delitem(sys.modules, "cast_my_judge", raising=False)
        monkeypatch.syspath_prepend(str(path))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")])))

    return _install


def readme_package_test(**expected_components):
    attrs = {"distribution": "cast-my-judge", "plugin_module": "cast_my_judge"}
    if expected_components:
        attrs["expected_components"] = expected_components
    return type("TestPackage", (PluginPackageConformance,), attrs)()


def run_all(kit) -> None:
    for name in sorted(n for n in dir(kit) if n.startswith("test_")):
        getattr(kit, name)()


def test_a_correct_plugin_passes_the_package_test(install):
    install(MARKED)
    run_all(readme_package_test(atom_scorer=["my-judge"]))


def test_expected_components_catch_a_hook_missing_hookimpl(install):
    install(UNMARKED)
    with pytest.raises(AssertionError, match="cast-my-judge registers nothing"):
        readme_package_test(atom_scorer=["my-judge"]).test_cast_plugins_lists_it_without_failures()
    with pytest.raises(AssertionError, match="register_atom_scorers lack @hookimpl"):
        readme_package_test().test_every_hook_carries_hookimpl()


def test_one_unmarked_hook_beside_a_marked_one_is_caught(install):
    install(ONE_OF_TWO_UNMARKED)
    listed = readme_package_test(atom_scorer=["my-judge"])
    listed.test_cast_plugins_lists_it_without_failures()  # what it does register is listed
    both = readme_package_test(atom_scorer=["my-judge"], window_selector=["my-window"])
    with pytest.raises(AssertionError, match=r"does not list window_selector \['my-window'\]"):
        both.test_cast_plugins_lists_it_without_failures()
    with pytest.raises(AssertionError, match="register_window_selectors lack @hookimpl"):
        listed.test_every_hook_carries_hookimpl()
