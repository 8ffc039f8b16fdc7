"""The monitor's stop rules (config ``monitor_stop_if``): when a run is drifting or hacking its
reward, end it with a checkpoint and say why in one line.

A rule is a table. ``metric`` is a monitor value (``monitor/LABEL`` — a scorer's reward GM on the
held-out monitor prompts — or ``monitor/kl``, ``monitor/diversity``, ``monitor/saturation``,
``monitor/contrast``; the ``monitor/`` prefix may be left out) and exactly one condition:

* ``drop = X`` — the metric fell more than X below its first value (the evaluation before the
  first step: the base policy);
* ``rise = X`` — it climbed more than X above its first value;
* ``below = X`` / ``above = X`` — it crossed X.

``while_rising = "reward_gm"`` (any training metric) adds: and the training metric's mean since
the previous evaluation is higher than its mean over the first interval — "the judge says better
while the held-out quality says worse", the signature of reward hacking. ``patience = N``
(default 1): the rule must hold at N evaluations in a row, so one noisy evaluation stops nothing.

Example: ``monitor_stop_if = [{metric = "shapes-oracle", drop = 0.1, while_rising = "reward_gm"},
{metric = "diversity", drop = 0.05, patience = 2}]``.

Rules read only the monitor's rows (each row holds the training metrics' means of its interval
as ``train/KEY``), so a resumed run judges exactly as the uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from cast_core.errors import ConfigError

__all__ = ["StopRule", "parse_rules", "first_broken", "CONDITIONS"]

CONDITIONS = ("drop", "rise", "below", "above")
_EXAMPLE = 'e.g. monitor_stop_if = [{metric = "shapes-oracle", drop = 0.1, while_rising = "reward_gm"}]'


@dataclass(frozen=True)
class StopRule:
    metric: str  # with the monitor/ prefix
    condition: str
    threshold: float
    while_rising: str | None = None
    patience: int = 1

    def holds(self, rows: Sequence[dict], at: int) -> bool:
        """Whether the rule holds at evaluation ``rows[at]`` (on its own, before patience)."""
        first, now = self.baseline(rows), rows[at].get(self.metric)
        if not _number(now) or (self.condition in ("drop", "rise") and not _number(first)):
            return False
        if self.condition == "drop":
            broken = now < first - self.threshold
        elif self.condition == "rise":
            broken = now > first + self.threshold
        elif self.condition == "below":
            broken = now < self.threshold
        else:
            broken = now > self.threshold
        if broken and self.while_rising:
            key = f"train/{self.while_rising}"
            base = next((r.get(key) for r in rows[1 : at + 1] if _number(r.get(key))), None)
            broken = _number(base) and _number(rows[at].get(key)) and rows[at][key] > base and at > 1
        return bool(broken)

    def baseline(self, rows: Sequence[dict]) -> Any:
        """The metric's first value: the base policy's, or the first evaluation that had it (a
        ``monitor_scorers`` entry added at a resume)."""
        return next((r[self.metric] for r in rows if _number(r.get(self.metric))), None)

    def describe(self, rows: Sequence[dict], at: int) -> str:
        now = rows[at][self.metric]
        if self.condition in ("drop", "rise"):
            first = self.baseline(rows)
            verb = "fell" if self.condition == "drop" else "rose"
            what = f"{self.metric} {verb} from {first:.4g} to {now:.4g} (limit {self.threshold:g})"
        else:
            what = f"{self.metric} is {now:.4g}, {self.condition} {self.threshold:g}"
        if self.while_rising:
            key = f"train/{self.while_rising}"
            base = next(r[key] for r in rows[1 : at + 1] if _number(r.get(key)))
            what += f" while the training {self.while_rising} rose from {base:.4g} to {rows[at][key]:.4g}"
        if self.patience > 1:
            what += f", {self.patience} evaluations in a row"
        return what


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def parse_rules(raw: Any) -> list[StopRule]:
    """The rules of ``monitor_stop_if``; one line naming the item for a bad one."""
    if not isinstance(raw, list):
        raise ConfigError(f"config key 'monitor_stop_if' must be a list of tables; {_EXAMPLE}")
    rules = []
    for i, item in enumerate(raw):
        where = f"config key 'monitor_stop_if': item {i}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where} is {item!r}, not a table; {_EXAMPLE}")
        unknown = sorted(set(item) - {"metric", "while_rising", "patience", *CONDITIONS})
        if unknown:
            raise ConfigError(
                f"{where} has unknown key {unknown[0]!r}; a rule takes metric, one of {', '.join(CONDITIONS)}, "
                "and optionally while_rising and patience"
            )
        metric = item.get("metric")
        if not isinstance(metric, str) or not metric.strip():
            raise ConfigError(f"{where} names no metric; {_EXAMPLE}")
        conditions = [c for c in CONDITIONS if c in item]
        if len(conditions) != 1:
            raise ConfigError(
                f"{where} ({metric!r}) needs exactly one of {', '.join(CONDITIONS)}, got "
                f"{', '.join(conditions) or 'none'}"
            )
        value = item[conditions[0]]
        if not _number(value) or (conditions[0] in ("drop", "rise") and value < 0):
            raise ConfigError(
                f"{where} ({metric!r}): {conditions[0]} = {value!r} must be a number (>= 0 for drop/rise)"
            )
        patience = item.get("patience", 1)
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"{where} ({metric!r}): patience {patience!r} must be a whole number >= 1")
        rising = item.get("while_rising")
        if rising is not None and (not isinstance(rising, str) or not rising.strip()):
            raise ConfigError(
                f"{where} ({metric!r}): while_rising {rising!r} must name a training metric, e.g. reward_gm"
            )
        name = metric if metric.startswith("monitor/") else f"monitor/{metric}"
        rules.append(StopRule(name, conditions[0], float(value), rising, patience))
    return rules


def first_broken(rules: Sequence[StopRule], rows: Sequence[dict]) -> str | None:
    """The reason of the first rule that holds at the last ``patience`` evaluations, or None."""
    last = len(rows) - 1
    for rule in rules:
        window = range(last - rule.patience + 1, last + 1)
        if last >= 1 and window.start >= 1 and all(rule.holds(rows, at) for at in window):
            return rule.describe(rows, last)
    return None
