"""Training configuration: one flat dataclass, loaded from TOML and ``--set key=value``.

Flat on purpose (nanoGPT / TRL style): every knob is greppable, ``--set lr=3e-4`` needs no
path syntax, and a resolved ``config.toml`` in the run directory says exactly what ran. Every
field declares its allowed range, and every error names the key, the bad value and what is
allowed — a typo must fail in the first second, not after an hour of sampling.

Precedence (lowest first): dataclass defaults → the recipe's settings → ``--config FILE`` →
``--set`` → explicit CLI flags (``--policy`` …).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from cast_core.errors import ConfigError  # defined there (the registry raises it); imported from here too

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def _f(
    default: Any,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
    choices: tuple | None = None,
    low_open: bool = False,
    factory: Any = None,
) -> Any:
    meta = {"help": help, "low": low, "high": high, "choices": choices, "low_open": low_open}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    # -- components (registry names) ----------------------------------------------------------
    recipe: str | None = _f(None, "recipe whose defaults were applied (informational)")
    policy: str = _f("fake", "policy component")
    scorer: str = _f("constant", "atom scorer component")
    decomposer: str = _f("fake", "prompt decomposer component")
    projector: str = _f("spatial", "advantage projector component", choices=None)
    window: str | None = _f(None, "window selector component; unset = fixed window_start/window_size")
    objective: str = _f(
        "sde-clipped",
        "the update's objective: sde-clipped (Flow-GRPO / CAST, clipped ratio of SDE-window log-probs), "
        "nft (DiffusionNFT), awm (advantage-weighted matching), or a plugin's",
    )
    policy_kwargs: dict = _f(None, "keyword arguments for the policy factory", factory=dict)
    scorer_kwargs: dict = _f(None, "keyword arguments for the scorer factory", factory=dict)
    scorers: list = _f(
        None,
        "several scorers in one run, each a table: {name = SCORER, weight = W (> 0, default 1), label = "
        "TEXT (default the name), prompt_level = BOOL (default the scorer's own), any other key = the "
        "scorer's option}; each scorer's atoms are z-scored on their own and the advantage maps add up "
        "weighted (docs/rewards.md); empty = the one scorer of scorer / scorer_kwargs",
        factory=list,
    )
    window_kwargs: dict = _f(None, "keyword arguments for the window selector factory", factory=dict)
    decomposer_kwargs: dict = _f(
        None, "keyword arguments for the decomposer factory (e.g. geneval2's data file)", factory=dict
    )
    objective_kwargs: dict = _f(None, "keyword arguments for the objective factory (e.g. nft's beta)", factory=dict)
    prompts: Any = _f(
        None,
        "training prompts: a list, a text file (one a line), 'suite:NAME' (a registered "
        "prompt suite) or 'module:callable' (runs code: needs --allow-code-prompts outside a recipe)",
        factory=list,
    )
    # -- sampling -----------------------------------------------------------------------------
    num_steps: int = _f(10, "denoising steps per image", low=1, high=1000)
    image_size: list | None = _f(None, "[height, width]; unset = the policy's default")
    eta: float = _f(0.7, "SDE noise level inside the window (Flow-GRPO noise_level)", low=0.0, high=10.0)
    window_start: int = _f(0, "first SDE step when no selector is given", low=0, high=1000)
    window_size: int = _f(2, "number of SDE steps when no selector is given", low=1, high=1000)
    prompts_per_step: int = _f(2, "distinct prompts per training step", low=1, high=100_000)
    group_size: int = _f(8, "images per prompt (the GRPO group)", low=2, high=10_000)
    group_noise: str = _f(
        "independent",
        "initial noise per image (independent) or one per group (shared, DanceGRPO's "
        "init_same_noise: outcomes then differ only through the window's SDE noise)",
        choices=("independent", "shared"),
    )
    noise_block: int = _f(
        1,
        "SDE noise shared by runs of this many consecutive latent channels (1 = Flow-GRPO's "
        "white noise; for the shapes policy 16 = one value per patch and colour)",
        low=1,
        high=100_000,
    )
    sample_batch_size: int = _f(
        0, "images per sampling forward pass (per process); 0 = all at once", low=0, high=100_000
    )
    async_scoring: bool = _f(
        False,
        "judge each chunk of sample_batch_size images while the next chunk samples (same numbers "
        "as the synchronous run, only faster when the judge is slow; needs sample_batch_size below "
        "the step's images to overlap anything)",
    )
    decode_batch_size: int = _f(
        0, "latents per decode call (the VAE of a large model needs chunks); 0 = all at once", low=0, high=100_000
    )
    prompt_cache_size: int = _f(
        4096, "prompt embeddings kept (on the CPU) between steps; 0 = unbounded", low=0, high=10_000_000
    )
    offload_text_encoder: bool = _f(
        False,
        "encode every training prompt at the start, then let the policy release "
        "its text encoder (offload_text_encoder())",
    )
    # -- advantages ---------------------------------------------------------------------------
    gating: str = _f("soft", "DSG gating of child atoms", choices=("soft", "hard"))
    lam: float = _f(1.0, "weight of the prompt-level advantage in the spatial map", low=0.0, high=100.0)
    heatmap_norm: str = _f(
        "max",
        "spatial projector: scale each heatmap to peak 1 (max) or to the group's mean mass (mass)",
        choices=("max", "mass"),
    )
    atom_credit: str = _f(
        "zscore",
        "spatial projector: each atom z-scored on its own (zscore, the paper's) or the "
        "prompt's log-GM advantage split among its atoms (log-gm)",
        choices=("zscore", "log-gm"),
    )
    heatmap_source: str = _f(
        "final",
        "spatial projector: heatmaps of the final image (final) or of the Tweedie "
        "estimate x̂0 before the window's first step (x0; unbiased, see docs/shapes-rl.md)",
        choices=("final", "x0"),
    )
    adv_clip: float = _f(5.0, "advantages are clipped to ±adv_clip", low=0.0, high=1e6, low_open=True)
    # -- objective ----------------------------------------------------------------------------
    ratio_mode: str = _f(
        "position", "per-position ratios (CAST) or one per sample (Flow-GRPO)", choices=("position", "sample")
    )
    clip_range: float = _f(1e-4, "PPO clip range ε", low=0.0, high=1.0, low_open=True)
    beta: float = _f(0.0, "KL weight against the adapter-free reference", low=0.0, high=1e3)
    inner_epochs: int = _f(1, "passes over each batch of samples", low=1, high=100)
    minibatch_size: int = _f(
        0, "samples per optimizer step, over all processes; 0 = the whole step's batch", low=0, high=100_000
    )
    micro_batch_size: int = _f(
        0,
        "samples per forward/backward pass on one process; gradients accumulate up to "
        "minibatch_size (same update, less memory); 0 = the whole minibatch",
        low=0,
        high=100_000,
    )
    gradient_checkpointing: bool = _f(
        False, "recompute the policy's activations in the backward pass (enable_gradient_checkpointing())"
    )
    compile: bool = _f(
        False,
        "compile each transformer block of the policy (regional torch.compile, as diffusers recommends; "
        "passed as compile=True to a policy factory that takes it); the first steps are slower while "
        "it compiles",
    )
    memory_check: bool = _f(
        True,
        "on a CUDA device, trace the run's memory plan (cast plan) at start-up and refuse a "
        "configuration that cannot fit the GPU, naming the setting to change; traces are cached, and "
        "a policy that cannot plan itself passes unchecked",
    )
    sharding: str = _f(
        "accelerate",
        "how several processes hold the policy: accelerate = as the launcher's accelerate config "
        "says (DDP: a full copy per process; FSDP2 under an accelerate FSDP config, GPUs only); "
        "fsdp2 = each process a slice of every weight, by torch's fully_shard under any launcher, "
        "CPU included (the policy's prepare must accept sharding); auto = fsdp2 when several processes "
        "train a policy that shards itself, else accelerate (the backbone recipes' setting)",
        choices=("accelerate", "fsdp2", "auto"),
    )
    # -- optimizer ----------------------------------------------------------------------------
    lr: float = _f(1e-4, "AdamW learning rate", low=0.0, high=1.0, low_open=True)
    weight_decay: float = _f(0.0, "AdamW weight decay", low=0.0, high=1.0)
    adam_beta1: float = _f(0.9, "AdamW β1", low=0.0, high=1.0)
    adam_beta2: float = _f(0.999, "AdamW β2", low=0.0, high=1.0)
    adam_eps: float = _f(1e-8, "AdamW ε", low=0.0, high=1.0, low_open=True)
    max_grad_norm: float = _f(1.0, "gradient clipping norm; 0 = off", low=0.0, high=1e6)
    ema: float = _f(
        0.0,
        "EMA decay of the adapter; > 0 also writes checkpoints/step-N/ema-adapter/ "
        "(score it with cast eval --adapter); 0 = off",
        low=0.0,
        high=1.0,
    )
    # -- monitor ------------------------------------------------------------------------------
    monitor_every: int = _f(
        0,
        "every N steps (and before the first), sample the held-out monitor_prompts with the ODE and record each "
        "scorer's reward, the KL to the reference, diversity, saturation and contrast (monitor.jsonl); 0 = off",
        low=0,
        high=1_000_000,
    )
    monitor_prompts: Any = _f(
        None,
        "the monitor's held-out prompts (a list, a text file, 'suite:NAME'); never training prompts",
    )
    monitor_size: int = _f(
        8, "monitor prompts drawn (once per run, by the seed) from monitor_prompts", low=1, high=10_000
    )
    monitor_group_size: int = _f(4, "monitor images per prompt (diversity is measured within them)", low=2, high=1000)
    monitor_scorers: list = _f(
        None,
        "extra scorers the monitor records but the run does not train on (entries as in 'scorers', "
        'e.g. [{name = "pickscore", path = "..."}])',
        factory=list,
    )
    monitor_stop_if: list = _f(
        None,
        'rules that end the run with a checkpoint and a one-line reason, e.g. [{metric = "shapes-oracle", '
        "drop = 0.1, while_rising = \"reward_gm\"}] (docs/rewards.md, 'The monitor'); empty = only report",
        factory=list,
    )
    # -- run ----------------------------------------------------------------------------------
    steps: int = _f(100, "training steps", low=1, high=10_000_000)
    max_minutes: float = _f(0.0, "stop (and checkpoint) after this much wall time; 0 = no limit", low=0.0, high=1e7)
    seed: int = _f(0, "seed of every random choice (prompts, noise, windows)", low=0, high=2**63 - 1)
    precision: str = _f(
        "no",
        "bf16 = autocast the policy's forward passes (sampling and update); the trainable "
        "adapter, optimizer and SDE maths stay float32",
        choices=("no", "bf16"),
    )
    base_dtype: str = _f(
        "float32",
        "dtype of the policy's frozen base weights (passed as torch_dtype); bfloat16 halves "
        'their memory and needs precision = "bf16"; the adapter stays float32',
        choices=("float32", "bfloat16"),
    )
    cpu: bool = _f(
        False, "accelerate's cpu flag; where the policy runs is policy_kwargs' device (e.g. device=\"cuda\")"
    )
    log_every: int = _f(1, "write metrics every N steps", low=1, high=1_000_000)
    sample_every: int = _f(10, "write a sample grid every N steps; 0 = never", low=0, high=1_000_000)
    checkpoint_every: int = _f(10, "checkpoint every N steps", low=1, high=1_000_000)
    keep_checkpoints: int = _f(3, "checkpoints kept (oldest deleted)", low=1, high=1000)
    log_with: Any = _f(
        None,
        'experiment trackers through accelerate, e.g. "tensorboard" or ["tensorboard", '
        '"wandb"] (metrics.jsonl is written either way)',
        factory=list,
    )
    tracker_project: str = _f("", "the trackers' project / run name (default: the run directory's name)")

    # -------------------------------------------------------------------------------------------
    def validate(self) -> "TrainConfig":
        for f in fields(self):
            _check(f, getattr(self, f.name))
        if self.image_size is not None and (
            not isinstance(self.image_size, (list, tuple))
            or len(self.image_size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in self.image_size)
        ):
            raise ConfigError(
                f"config key 'image_size': {self.image_size!r} is not [height, width] in positive pixels, "
                "e.g. image_size = [512, 512]"
            )
        if isinstance(self.prompts, (list, tuple)):
            bad = next(((i, p) for i, p in enumerate(self.prompts) if not isinstance(p, str) or not p.strip()), None)
            if bad is not None:
                raise ConfigError(
                    f"config key 'prompts': item {bad[0]} is {bad[1]!r} ({type(bad[1]).__name__}); prompts "
                    'are non-empty text, e.g. prompts = ["a red circle", "two blue squares"]'
                )
        if self.scorers or self.monitor_scorers:  # each entry's keys, weight and label, one line naming the item
            from cast_core.scorer_set import monitor_specs, scorer_specs

            scorer_specs(self)
            monitor_specs(self)
        if self.monitor_stop_if:
            from cast_core.monitor_rules import parse_rules

            parse_rules(self.monitor_stop_if)
            if not self.monitor_every:
                raise ConfigError(
                    "config key 'monitor_stop_if' has rules but the monitor is off (monitor_every = 0); "
                    "set monitor_every, e.g. --set monitor_every=10"
                )
        if self.window is None and self.window_start + self.window_size > self.num_steps:
            raise ConfigError(
                f"window_start={self.window_start} + window_size={self.window_size} exceeds "
                f"num_steps={self.num_steps}; the window must fit the schedule"
            )
        if self.base_dtype == "bfloat16" and self.precision != "bf16":
            raise ConfigError(
                'base_dtype = "bfloat16" needs precision = "bf16" (float32 activations cannot meet bfloat16 '
                'weights); add --set precision="bf16"'
            )
        return self

    def update(self, values: Mapping[str, Any], source: str) -> "TrainConfig":
        """Apply ``values`` (from ``source``, used in errors), converting types."""
        known = {f.name: f for f in fields(self)}
        for key, raw in values.items():
            head, dot, path = key.partition(".")
            if dot and head in known:
                self._merge_into(known[head], path, raw, source)
                continue
            if key not in known:
                close = difflib.get_close_matches(key, list(known), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"{source}: unknown config key {key!r}.{hint}")
            setattr(self, key, _convert(known[key], raw, source))
        return self

    def _merge_into(self, f: dataclasses.Field, path: str, raw: Any, source: str) -> None:
        """``policy_kwargs.path = X``: set one entry of a dict option (nested dicts by further
        dots), keeping the entries a recipe or config file gave it."""
        if not _type_name(f).startswith("dict"):
            raise ConfigError(
                f"{source}: config key {f.name!r} is not a table, so {f.name}.{path} cannot be set; use {f.name}=VALUE"
            )
        keys = path.split(".")
        if not all(keys):
            raise ConfigError(f"{source}: {f.name}.{path!r} has an empty part; write e.g. {f.name}.path=VALUE")
        merged = copy.deepcopy(getattr(self, f.name) or {})
        table = merged
        for i, k in enumerate(keys[:-1]):
            table = table.setdefault(k, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: {f.name}.{'.'.join(keys[: i + 1])} is {table!r}, not a table")
        table[keys[-1]] = raw
        setattr(self, f.name, merged)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _type_name(f: dataclasses.Field) -> str:
    return str(f.type).replace("typing.", "")


def _convert(f: dataclasses.Field, raw: Any, source: str) -> Any:
    t = _type_name(f)
    where = f"{source}: config key {f.name!r}"
    if raw is None or (isinstance(raw, str) and raw.strip().lower() == "none" and "None" in t):
        if "None" in t:
            return None
        raise ConfigError(f"{where} cannot be empty ({f.metadata['help']})")
    try:
        if t.startswith("int"):
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw)
        if t.startswith("float"):
            if isinstance(raw, bool):
                raise ValueError
            return float(raw)
        if t.startswith("bool"):
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("1", "true", "yes", "on"):
                return True
            if str(raw).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if t.startswith("dict"):
            if not isinstance(raw, dict):
                raise ValueError
            return dict(raw)
        if t.startswith("list"):
            if not isinstance(raw, list):
                raise ValueError
            return list(raw)
        if t.startswith("str"):
            if not isinstance(raw, str):
                raise ValueError
            return raw
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be {t}, got {_short(raw)} ({f.metadata['help']})") from None
    return raw


def _check(f: dataclasses.Field, value: Any) -> None:
    m = f.metadata
    where = f"config key {f.name!r}"
    if m.get("choices") and value not in m["choices"]:
        raise ConfigError(f"{where}: {value!r} is not allowed; choose one of {', '.join(map(repr, m['choices']))}")
    low, high = m.get("low"), m.get("high")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (low is not None or high is not None):
        bad = (
            (isinstance(value, float) and not math.isfinite(value))
            or (low is not None and (value <= low if m.get("low_open") else value < low))
            or (high is not None and value > high)
        )
        if bad:
            lo = f"({low}" if m.get("low_open") else f"[{low}"
            raise ConfigError(f"{where}: value {_short(value)} is out of range {lo}, {high}] ({m['help']})")


def _short(value: Any) -> str:
    """``repr(value)``, cut: a pasted 5000-digit number must not make a 5000-character error line."""
    if isinstance(value, int) and abs(value) >= 10**60:
        return f"{str(value)[:40]}... ({len(str(value))} digits)"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}..."


def parse_set(assignments: list[str], option: str = "--set", example: str = "lr=3e-4") -> dict[str, Any]:
    """``["lr=3e-4", "policy_kwargs={seed=1}"]`` → values; the right-hand side is read as a TOML
    value (so 3e-4, true, "text", [1, 2] and {a = 1} work) and falls back to a bare string."""
    out: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{option} {item!r}: expected KEY=VALUE, e.g. {option} {example}")
        try:
            out[key] = tomllib.loads(f"v = {raw.strip()}")["v"]
        except ValueError:  # not TOML (TOMLDecodeError), or an integer of thousands of digits
            out[key] = raw.strip()
    return out


#: the first line :func:`dump_toml` writes: a file that starts with it is a run's whole configuration
RESOLVED_HEADER = "# resolved cast training configuration"


def read_config_text(path: str | Path) -> str:
    """The text of config file ``path``; a missing, unreadable or non-UTF-8 file (a binary file, a
    UTF-16 export) is one line naming it. A UTF-8 byte-order mark is allowed."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory; give a TOML file") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}); "
            "a config must be a UTF-8 TOML file: re-save it as UTF-8 (a binary or UTF-16 file cannot be read)"
        ) from None
    except OSError as err:
        raise ConfigError(f"config file {path} cannot be read: {err.strerror or err}") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = tomllib.loads(read_config_text(path))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from None
    if "train" in data:  # the [train] table layout: then it must hold every key
        others = sorted(k for k in data if k != "train")
        if others:
            raise ConfigError(
                f"config file {path}: key(s) {', '.join(others)} sit beside a [train] table and would be "
                "ignored; put every key at the top level (the layout of a run's config.toml) or every "
                "key inside [train]"
            )
        if not isinstance(data["train"], dict):
            raise ConfigError(f"config file {path}:{key_line(path, 'train') or 1}: 'train' must be a table ([train])")
        return data["train"]
    return data


def is_resolved_config(path: str | Path) -> bool:
    """Whether ``path`` is a run's ``config.toml`` (written by :func:`dump_toml`): every key of a
    run, so loading it with ``--config`` configures a new run like that one."""
    return read_config_text(path).startswith(RESOLVED_HEADER)


def key_line(path: str | Path, key: str) -> int | None:
    """The line of ``path`` where top-level ``key`` is set (for errors that name file and line)."""
    pattern = re.compile(rf"^\s*(\[\s*)?[\"']?{re.escape(key)}[\"']?\s*(=|\])")
    try:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8-sig").splitlines(), 1):
            if pattern.match(line):
                return number
    except (OSError, UnicodeDecodeError):
        return None
    return None


def update_from_file(config: "TrainConfig", values: Mapping[str, Any], path: str | Path) -> "TrainConfig":
    """``config.update`` key by key, each error naming ``path:line`` of the key."""
    for key, value in values.items():
        line = key_line(path, key)
        config.update({key: value}, f"{path}:{line}" if line else str(path))
    return config


def dump_toml(values: Mapping[str, Any]) -> str:
    """A TOML document for a flat mapping of scalars, lists and flat dicts (None is omitted,
    since TOML has no null, and written as a comment so the reader sees it was unset)."""
    lines = [f"{RESOLVED_HEADER} (load with --config)"]
    tables = []
    for key, value in values.items():
        if value is None:
            lines.append(f"# {key} = (unset)")
        elif isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {toml_value(value)}")
    for key, table in tables:
        inner = ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items())
        lines.append(f"{key} = {{{inner}}}")
    return "\n".join(lines) + "\n"


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if not isinstance(value, float) or math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {value!r} ({type(value).__name__}) to TOML")


#: the recipes tried, in order, when none is named (the first one installed is used)
DEFAULT_RECIPES = ("shapes", "cast")
#: the component kinds a recipe names and a command line may replace one by one
COMPONENT_KEYS = ("policy", "scorer", "window", "decomposer", "projector", "objective")


def build_config(
    *,
    recipe: str | None = None,
    components: Mapping[str, str | None] | None = None,
    config_file: str | Path | None = None,
    sets: list[str] | tuple[str, ...] = (),
    steps: int | None = None,
    require_scorer: bool = True,
    log: Callable[[str], None] | None = None,
) -> "TrainConfig":
    """A validated config from its layers, lowest first: defaults → ``recipe`` (the first of
    :data:`DEFAULT_RECIPES` installed when ``None``) → ``config_file`` → ``sets`` (``KEY=VALUE``)
    → ``components`` and ``steps`` (explicit choices; ``None`` values are not given).

    A run's own ``config.toml`` as ``config_file`` stands in for the recipe: it holds every key,
    so the new run is configured like that one. A component the user replaces drops the options
    the recipe gave the old one (they belong to it; ``log`` hears one line), keeping the user's.
    ``require_scorer=False`` is for callers that never judge an image (``cast plan``): everyone
    else must name a scorer, since the default ``constant`` one would train on a flat reward.

    Keyword-only because the layers are easy to mix up and most callers give one or two: the CLI,
    the shapes demo and bench, ``cast signal`` and the benchmarks all build their runs here."""
    from cast_core.registry import get_recipe, list_components

    components = dict(components or {})
    unknown = sorted(set(components) - set(COMPONENT_KEYS))
    if unknown:
        raise TypeError(f"build_config: unknown component key(s) {unknown}; expected some of {COMPONENT_KEYS}")
    cfg = TrainConfig()
    file_values = load_toml(config_file) if config_file else {}
    resolved = bool(config_file) and is_resolved_config(config_file)
    base: dict[str, Any] = {}  # what the recipe (or a run's config.toml) chose, before the user's layers
    if resolved:
        if recipe is not None:
            raise ConfigError(
                f"{config_file} is a run's resolved configuration (every key), so --recipe {recipe} would change "
                "nothing; drop --recipe, or start from the recipe and give your changes with --set"
            )
        update_from_file(cfg, file_values, config_file)
        name, base, base_label = cfg.recipe, dict(file_values), str(config_file)
    else:
        name = recipe
        if name is None:
            installed = set(list_components("recipe"))
            name = next((r for r in DEFAULT_RECIPES if r in installed), None)
        base_label = f"recipe {name!r}"
        if name is not None:
            found = get_recipe(name)
            parts = {k: getattr(found, k) for k in COMPONENT_KEYS if getattr(found, k) is not None}
            cfg.update(parts, base_label)
            cfg.update(dict(found.settings), base_label)
            cfg.recipe = name
            base = {**parts, **found.settings}
        if config_file:
            update_from_file(cfg, file_values, config_file)
    set_values = parse_set(list(sets))
    cfg.update(set_values, "--set")
    flags = {k: v for k, v in {**components, "steps": steps}.items() if v is not None}
    cfg.update(flags, "command line")
    layers = [] if resolved else [(file_values, str(config_file))]
    layers += [(set_values, "--set"), (flags, "command line")]
    user = {k.split(".")[0] for values, _ in layers for k in values}  # keys the user set: never dropped silently
    _drop_replaced_options(cfg, base, base_label, layers, log or _note)
    _drop_window_for_forward_objective(cfg, user)
    ignored = sorted(user & {"window_start", "window_size"})
    if ignored and cfg.window is not None:
        size = min(cfg.window_size, cfg.num_steps)  # the user's window, moved inside the schedule: a fix that runs
        start = min(cfg.window_start, cfg.num_steps - size)
        raise ConfigError(
            f"{' and '.join(ignored)} would be ignored: this run's window comes from the "
            f"{cfg.window!r} selector{f' ({base_label})' if base.get('window') == cfg.window else ''}. Set it "
            f"through the fixed selector with --window fixed --set window_kwargs.start={start} "
            f"--set window_kwargs.size={size}, or drop the selector with --set window=none"
        )
    cfg.validate()
    if cfg.scorers and user & {"scorer", "scorer_kwargs"}:
        raise ConfigError(
            f"{' and '.join(sorted(user & {'scorer', 'scorer_kwargs'}))} would be ignored: this run lists its "
            f"scorers in 'scorers' ({', '.join(str(e.get('name')) for e in cfg.scorers)}). Add the scorer to "
            "that list, or drop 'scorers' (--set scorers=[]) to use the one scorer"
        )
    if require_scorer and base.get("scorer") is None and not user & {"scorer", "scorers"}:
        where = f"recipe {name!r} names no scorer" if name else "no recipe names a scorer"
        raise ConfigError(
            f"{where}, and a run needs one to judge its images: choose one with --scorer NAME "
            f"(installed: {', '.join(list_components('atom_scorer'))})"
        )
    return cfg


def check_installed(cfg: "TrainConfig") -> None:
    """Every component ``cfg`` names is registered exactly once, or one line naming it (an unknown
    name, or two plugins that both register it). ``cast train`` calls this before it makes the
    run directory; it is not part of :func:`build_config`, whose callers may only read a config
    (a recipe's window selector need not be installed to plan its memory or to test a config)."""
    from cast_core.registry import lookup

    for key, kind in REGISTRY_KINDS.items():
        if getattr(cfg, key) and not (key == "scorer" and cfg.scorers):
            lookup(kind, getattr(cfg, key))
    for entry in [*cfg.scorers, *cfg.monitor_scorers]:
        lookup("atom_scorer", entry["name"])


#: the registry kind of each component key
REGISTRY_KINDS = {
    "policy": "policy",
    "scorer": "atom_scorer",
    "window": "window_selector",
    "decomposer": "atom_decomposer",
    "projector": "advantage_projector",
    "objective": "objective",
}
#: the options table of each component kind that has one
OPTION_TABLES = {
    "policy": "policy_kwargs",
    "scorer": "scorer_kwargs",
    "window": "window_kwargs",
    "decomposer": "decomposer_kwargs",
    "objective": "objective_kwargs",
}


def _note(message: str) -> None:
    """An informational line on stderr, from the first process only."""
    import os
    import sys

    if os.environ.get("RANK", "0") == "0":
        print(f"cast: note: {message}", file=sys.stderr)


def _component_key(value: Any) -> str | None:
    text = None if value is None else str(value).strip().lower()
    return None if text in (None, "", "none") else text


def _drop_replaced_options(
    cfg: "TrainConfig",
    base: Mapping[str, Any],
    base_label: str,
    layers: list[tuple[Mapping[str, Any], str]],
    log: Callable[[str], None],
) -> None:
    """Options the recipe gave a component are its arguments, meaningless to (and usually refused
    by) the one the user put in its place: ``--window fixed`` over ``window_kwargs = {embedder =
    ...}``. They are dropped; the options the user gave (``layers``, in order) are kept and checked."""
    for kind, table in OPTION_TABLES.items():
        old, options = base.get(kind), base.get(table)
        if not options or _component_key(getattr(cfg, kind)) == _component_key(old):
            continue
        fresh = TrainConfig()
        for values, source in layers:
            fresh.update({k: v for k, v in values.items() if k.split(".")[0] == table}, source)
        setattr(cfg, table, getattr(fresh, table))
        by = next(
            (
                f"--{kind} {values[kind]}" if source == "command line" else f"{source} {kind}={values[kind]}"
                for values, source in reversed(layers)
                if kind in values
            ),
            kind,
        )
        kept = f"; yours ({', '.join(sorted(getattr(cfg, table)))}) are kept" if getattr(cfg, table) else ""
        log(f"{by} replaces {old!r} of {base_label}, so its {table} ({', '.join(sorted(options))}) are dropped{kept}")


def _drop_window_for_forward_objective(cfg: "TrainConfig", user: set[str]) -> None:
    """An objective that samples with the plain ODE (``uses_window = False``: nft, awm) has no
    window: a recipe's selector is dropped, one the user asked for is refused."""
    from cast_core.registry import objective_uses_window

    if objective_uses_window(cfg.objective):
        return
    asked = sorted(user & {"window", "window_kwargs", "window_start", "window_size"})
    if asked and (
        cfg.window is not None or "window_kwargs" in asked or "window_start" in asked or "window_size" in asked
    ):
        raise ConfigError(
            f"{', '.join(asked)} would be ignored: objective {cfg.objective!r} samples with the plain ODE and "
            f"trains on the forward process, so it has no SDE window. Drop {asked[0]}, or choose an objective "
            f'that uses one (objective = "sde-clipped")'
        )
    cfg.window = None
    cfg.window_kwargs = {}


def dotted_kwargs(sets, table: str, base: dict | None = None) -> dict:
    """The ``table`` dict (``policy_kwargs``, ``scorer_kwargs``) from ``table.KEY=VALUE`` items,
    merged into ``base`` as a training config merges them (nested keys by further dots): commands
    that build one component take its options in the training config's spelling."""
    values = parse_set(list(sets), "--set", f"{table}.path=DIR") if sets else {}
    for key in values:
        if not key.startswith(table + "."):
            raise ConfigError(
                f"--set {key}=...: this command takes only {table}.KEY=VALUE (e.g. --set {table}.path=/models/...)"
            )
    config = TrainConfig(**{table: dict(base or {})}).update(values, "--set")
    return getattr(config, table)
