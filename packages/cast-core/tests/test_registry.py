"""Registering, listing and building components of every kind, and the errors around it."""

import pytest

from cast_core import (
    ComponentTypeError,
    DuplicateComponentError,
    PluginError,
    PluginLoadError,
    Recipe,
    UnknownComponentError,
    Window,
    get_advantage_projector,
    get_atom_decomposer,
    get_atom_scorer,
    get_policy,
    get_recipe,
    get_window_selector,
    hookimpl,
    lazy,
    list_components,
)
from cast_core.plugins import failures
from cast_core.protocols import AdvantageProjector, AtomDecomposer, AtomScorer, Policy, WindowSelector
from cast_core.registry import registrations
from cast_core.testing import ConstantScorer, FakePolicy
from helpers import HalfWindow, MeanProjector, WordsDecomposer


class EveryKind:
    @hookimpl
    def register_policies(self, register):
        register("tiny", lambda seed=0: FakePolicy(seed=seed), description="a tiny policy")

    @hookimpl
    def register_window_selectors(self, register):
        register("half", HalfWindow)

    @hookimpl
    def register_atom_decomposers(self, register):
        register("words", WordsDecomposer)

    @hookimpl
    def register_atom_scorers(self, register):
        register("always-one", lambda: ConstantScorer(1.0))

    @hookimpl
    def register_advantage_projectors(self, register):
        register("mean", MeanProjector)

    @hookimpl
    def register_recipes(self, register):
        register("tiny-recipe", Recipe(policy="tiny", scorer="always-one", settings={"lr": 1e-4}, description="d"))


def test_every_kind_registers_lists_and_builds(add_plugin):
    add_plugin(EveryKind())
    assert "tiny" in list_components("policy") and "fake" in list_components("policy")
    assert isinstance(get_policy("tiny", seed=3), Policy)
    assert isinstance(get_window_selector("half"), WindowSelector)
    assert isinstance(get_atom_decomposer("words"), AtomDecomposer)
    assert isinstance(get_atom_scorer("always-one"), AtomScorer)
    assert isinstance(get_advantage_projector("mean"), AdvantageProjector)
    recipe = get_recipe("tiny-recipe")
    assert recipe.policy == "tiny" and recipe.settings["lr"] == 1e-4
    reg = registrations("policy")["tiny"]
    assert reg.description == "a tiny policy" and reg.distribution.startswith("local plugin")
    assert get_window_selector("half").select(get_policy("tiny"), ["x"], 10) == Window(0, 5)


def test_builtins_are_registered_through_the_same_hooks():
    assert registrations("policy")["fake"].distribution == "cast-core"
    assert registrations("atom_scorer")["constant"].distribution == "cast-core"
    assert isinstance(get_policy("fake"), FakePolicy)
    assert isinstance(get_atom_scorer("constant", value=0.25), ConstantScorer)


def test_names_are_case_insensitive_on_lookup():
    assert isinstance(get_policy("FAKE"), FakePolicy)


def test_unknown_name_lists_choices_and_suggests(add_plugin):
    add_plugin(EveryKind())
    with pytest.raises(UnknownComponentError) as err:
        get_atom_scorer("alwys-one")
    msg = str(err.value)
    assert msg.startswith("Unknown scorer 'alwys-one'. Choose one of: ")
    assert "always-one" in msg and "constant" in msg and "Did you mean 'always-one'?" in msg


def test_unknown_name_when_kind_is_empty(only_builtins):
    with pytest.raises(UnknownComponentError, match="no window selector is registered"):
        get_window_selector("random")


def test_duplicate_names_name_both_providers(add_plugin):
    class A:
        @hookimpl
        def register_atom_scorers(self, register):
            register("judge", ConstantScorer)

    class B:
        @hookimpl
        def register_atom_scorers(self, register):
            register("judge", ConstantScorer)

    add_plugin(A(), "plugin-a")
    add_plugin(B(), "plugin-b")
    with pytest.raises(DuplicateComponentError) as err:
        list_components("atom_scorer")
    assert "plugin-a" in str(err.value) and "plugin-b" in str(err.value) and "'judge'" in str(err.value)


def test_duplicate_of_a_builtin_is_an_error(add_plugin):
    class Clash:
        @hookimpl
        def register_policies(self, register):
            register("fake", FakePolicy)

    add_plugin(Clash(), "clash")
    with pytest.raises(DuplicateComponentError, match="cast-core.*clash|clash.*cast-core"):
        get_policy("fake")


def test_protocol_mismatch_names_component_distribution_and_missing_members(add_plugin):
    class NotAScorer:
        def judge(self, images):
            return 1.0

    class Wrong:
        @hookimpl
        def register_atom_scorers(self, register):
            register("wrong", NotAScorer)

    add_plugin(Wrong(), "wrong-plugin")
    with pytest.raises(ComponentTypeError) as err:
        get_atom_scorer("wrong")
    assert str(err.value) == "wrong from local plugin 'wrong-plugin' is not an AtomScorer: it lacks score"


def test_bad_names_and_bad_recipes_are_plugin_errors(add_plugin):
    class BadName:
        @hookimpl
        def register_atom_scorers(self, register):
            register("Soft_TIFA", ConstantScorer)

    name = add_plugin(BadName())
    with pytest.raises(PluginError, match="kebab-case"):
        list_components("atom_scorer")
    from cast_core.plugins import pm

    pm.unregister(name=name)

    class BadRecipe:
        @hookimpl
        def register_recipes(self, register):
            register("r", {"policy": "fake"})

    add_plugin(BadRecipe())
    with pytest.raises(PluginError, match="not a cast_core.Recipe"):
        list_components("recipe")


def test_lazy_factory_imports_on_build_and_reports_bad_targets(add_plugin):
    class Lazy:
        @hookimpl
        def register_atom_scorers(self, register):
            register("lazy-const", lazy("cast_core.testing.fakes:ConstantScorer"))
            register("lazy-missing", lazy("cast_core.testing.fakes:NoSuchThing"))
            register("lazy-nomodule", lazy("no_such_module_xyz:Thing"))

    add_plugin(Lazy())
    assert isinstance(get_atom_scorer("lazy-const"), ConstantScorer)
    with pytest.raises(PluginError, match="has no attribute 'NoSuchThing'"):
        get_atom_scorer("lazy-missing")
    with pytest.raises(PluginError, match="cannot import 'no_such_module_xyz'"):
        get_atom_scorer("lazy-nomodule")
    with pytest.raises(PluginError, match="package.module:Attribute"):
        lazy("no-colon")


def test_a_raising_hook_is_recorded_and_skipped(add_plugin, monkeypatch):
    class Raises:
        @hookimpl
        def register_atom_scorers(self, register):
            raise RuntimeError("scorer registry exploded")

    add_plugin(Raises(), "raises")
    assert "constant" in list_components("atom_scorer")
    assert any("scorer registry exploded" in f.error for f in failures())
    monkeypatch.setenv("CAST_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="scorer registry exploded"):
        list_components("atom_scorer")


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="kinds are policy"):
        list_components("scorers")
