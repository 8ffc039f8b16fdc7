"""docs/rewards.md's worked example (FLUX.2 with soft-tifa and pickscore, the monitor, async
scoring) is a configuration cast accepts: every key, scorer option and rule is checked as
`cast train` checks them before loading anything."""

from __future__ import annotations

from pathlib import Path

from cast_core.config import build_config, check_installed
from cast_core.monitor_rules import parse_rules
from cast_core.registry import check_factory_kwargs
from cast_core.scorer_set import scorer_specs

DOC = Path(__file__).resolve().parents[1] / "docs" / "rewards.md"


def test_the_flux2_soft_tifa_pickscore_example_is_a_valid_config(tmp_path):
    text = DOC.read_text()
    start = text.index("# flux2-tifa-pick.toml")
    config = tmp_path / "flux2-tifa-pick.toml"
    config.write_text(text[start : text.index("```", start)])
    cfg = build_config(recipe="flux2", config_file=config, log=lambda m: None)
    check_installed(cfg)
    specs = scorer_specs(cfg)
    for spec in specs:
        check_factory_kwargs("atom_scorer", spec.name, spec.options, spec.key)
    assert [(s.name, s.weight) for s in specs] == [("soft-tifa", 1.0), ("pickscore", 0.2)]
    assert [r.metric for r in parse_rules(cfg.monitor_stop_if)] == ["monitor/pickscore", "monitor/kl"]
    assert cfg.async_scoring and 0 < cfg.sample_batch_size and cfg.monitor_every == 50
