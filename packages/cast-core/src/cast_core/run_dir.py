"""The run directory: what a run writes, and what ``--resume`` reads back.

``config.toml`` (the resolved configuration), ``metrics.jsonl`` (one line per logged step),
``window.json`` (the measured window, so a resumed run keeps it), ``samples/`` (image grids)
and ``checkpoints/`` (:mod:`cast_core.checkpoints`). In a multi-process run only the main
process writes; every process reads.

A run's outputs cost GPU-days, so the directory defends them: a fresh run refuses any non-empty
directory (checkpoint rotation in a reused one would delete the other run's files), one process
at a time holds ``.lock`` (a second ``cast train`` on the same run gets one line, not a second
writer), and metrics are read tolerantly (a line torn by a crash is skipped with a warning).

``comparison.json`` (written by ``cast shapes demo``, read by :mod:`cast_core.report`) holds base
vs trained at several evaluation seeds. The bench's ``result.json`` and ``cast compare --out`` /
``--json`` hold the same comparison in the same layout, so that a number quoted from one means
the same in the others; :func:`cast_core.comparison.compare_evaluations` makes it from one
``evaluate()`` result per seed and model::

    {"layout": "cast-comparison/1",
     "seeds": [0, 1, ...],                  # evaluation seeds: each draws the same noise for both models
     "prompts": N, "images_per_prompt": K,  # per seed and model
     "per_seed": [{"seed": 0,
                   "base": {"gm", "am", "by_skill": {skill: am}},
                   "trained": {"gm", "am", "by_skill"},
                   "gm_difference": {"delta", "se", "prompts", "z"},      # trained - base, s.e. over prompts
                   "skill_differences": {skill: {"delta", "se", "prompts", "z"}}}, ...],
     "pooled": {"base", "trained", "gm_difference", "skill_differences"},  # the seeds pooled, then paired
     "over_seeds": {"base_gm", "trained_gm",                             # mean over seeds
                    "gm": {"delta", "se", "n", "z"},                     # s.e. over seeds
                    "skills": {skill: {"delta", "se", "n", "z"}}},       # skills every seed measured
     ...}                                                                # the writer's own keys

``over_seeds`` is null with one seed. ``pooled`` pairs :func:`~cast_core.comparison.pool_evaluations`
of each model's seeds, so its standard error is over prompts with every seed's images; the
number to quote is ``over_seeds.gm``, whose standard error also covers how much the seed moves
the difference. Each writer adds keys beside these: the demo ``evaluations`` (its
``eval-*.json``), ``suite`` and ``adapter``; the bench its run's ``method``, ``training_seed``,
``training_images``, ``train_wall_s``, ``checkpoint`` and ``machine``; ``cast compare`` ``policy``,
``adapter``, ``base_adapter``, ``suite``, ``steps`` and ``prompts_digest``. A new layout gets a new
``layout`` value; a file without the key predates this one: the report still reads the demo's,
and the bench converts its own result.json on reading, with null where the old rows held nothing
(``pooled``, the base's ``am`` and ``by_skill``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

from cast_core.config import dump_toml
from cast_core.errors import CastError

__all__ = ["RunDirectory", "read_metrics", "jsonable", "jsonable_tree", "write_atomic", "WriteError", "disk_problem"]

LOCK = ".lock"


# == atomic writes: a full or read-only disk gives one line and leaves no empty or partial file ==
class WriteError(CastError):
    """A file could not be written because of the disk (full, read-only, quota, permissions).
    Nothing half-written is left behind; the message names the path and the space it needed."""


_DISK_ERRNOS = {28: "no space left on device", 122: "disk quota exceeded", 27: "file too large"}
_DISK_WORDS = {30: "read-only file system", 13: "permission denied", 1: "operation not permitted"}


def _size(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024:
            break
    return f"{n:.1f} {unit}"


def disk_problem(where: str | Path, err: BaseException, needed: int | None = None) -> str | None:
    """Words for a write failure that is the disk's doing, or None for anything else (a bug must
    stay a traceback). torch.save and safetensors wrap ENOSPC in their own errors, so their
    messages are read too; when they say nothing, a nearly full disk is taken as the cause."""
    import re
    import shutil

    code = None
    for e in (err, err.__cause__, err.__context__):
        if isinstance(e, OSError) and e.errno in {**_DISK_ERRNOS, **_DISK_WORDS}:
            code = e.errno
            break
    if code is None:
        text = str(err)
        found = re.search(r"code: (\d+)", text)  # safetensors: IoError(Os { code: 28, ... })
        if found and int(found.group(1)) in {**_DISK_ERRNOS, **_DISK_WORDS}:
            code = int(found.group(1))
        elif "No space left" in text:
            code = 28
        elif "Read-only file system" in text:
            code = 30
    try:
        probe = next(p for p in (Path(where), *Path(where).parents) if p.exists())
        free = shutil.disk_usage(probe).free
    except (OSError, StopIteration):
        free = None
    if code is None and isinstance(err, (OSError, RuntimeError)) and free is not None and free < 1 << 20:
        code = 28  # torch.save's "file write failed" on a full disk
    if code in _DISK_WORDS:
        return _DISK_WORDS[code]
    if code is None:
        return None
    space = [f"needs about {_size(needed)}"] if needed else []
    space += [f"{_size(free)} free"] if free is not None else []
    return f"{_DISK_ERRNOS[code]} ({', '.join(space)})" if space else _DISK_ERRNOS[code]


def guard_write(path: Path, act: Callable[[], Any], hint: str = "") -> Any:
    """``act()``, with an OSError that the disk caused turned into a :class:`WriteError` naming
    ``path`` (for writes that cannot go through :func:`write_atomic`: appends, the lock file)."""
    try:
        return act()
    except OSError as err:
        why = disk_problem(path.parent, err)
        if why is None:
            raise
        raise WriteError(f"cannot write {path}: {why}{hint}") from None


def write_atomic(path: str | Path, data: bytes | str | Callable[[Path], None], needed: int | None = None) -> Path:
    """Write ``data`` (bytes, text, or ``write(temporary_path)``) to ``path`` under a temporary
    name in the same directory, then rename: a crash or a full disk never leaves ``path`` empty or
    half-written, and the temporary is removed on failure. A failure caused by the disk is a
    :class:`WriteError` naming ``path``; anything else propagates unchanged."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")  # the suffix kept: PIL picks the format by it
    if isinstance(data, str):
        data = data.encode()
    if isinstance(data, bytes):
        needed = len(data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        else:
            data(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        why = disk_problem(path.parent, err, needed) if isinstance(err, Exception) else None
        if why is None:
            raise
        raise WriteError(f"cannot write {path}: {why}") from None
    return path


def jsonable(metrics: dict) -> dict:
    """A metrics row as strict JSON: NaN and infinities become ``null`` (``json`` would write
    ``NaN``, which other readers of metrics.jsonl refuse)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


def jsonable_tree(obj: Any) -> Any:
    """Diagnostics as JSON (window.json): tensors and arrays become lists, other odd objects
    their repr, so a selector may put anything in ``Window.diagnostics``."""
    if isinstance(obj, dict):
        return {str(k): jsonable_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable_tree(v) for v in obj]
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)


def read_metrics(path: str | Path, warn: Callable[[str], None] | None = None) -> list[dict]:
    """The metric rows of a ``metrics.jsonl``; lines that are not JSON objects (a line torn by a
    crash, a stray edit) are skipped, and ``warn`` hears which."""
    path = Path(path)
    if not path.exists():
        return []
    rows, bad = [], []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(number)
    if bad and warn is not None:
        warn(
            f"warning: {path}: skipped {len(bad)} unreadable line(s) (line {', '.join(map(str, bad[:5]))}"
            f"{', ...' if len(bad) > 5 else ''}), e.g. one cut short by a crash"
        )
    return rows


class RunDirectory:
    def __init__(self, path: str | Path, *, writer: bool = True):
        self.path = Path(path)
        self.writer = writer  # False on every process but the main one

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def samples(self) -> Path:
        return self.path / "samples"

    @property
    def window_path(self) -> Path:
        return self.path / "window.json"

    def refuse_existing_run(self) -> None:
        """A fresh run must not write into another run's directory, nor into any non-empty one:
        checkpoint rotation there would delete files that are not this run's."""
        if (self.path / "config.toml").exists():
            raise CastError(
                f"{self.path} already holds a run; continue it with `cast train --resume {self.path}` "
                f"or choose another --out"
            )
        if self.path.is_dir():
            entries = sorted(p.name for p in self.path.iterdir() if p.name != LOCK)
            if entries:
                raise CastError(
                    f"{self.path} is not empty ({len(entries)} entries, e.g. {entries[0]!r}) and holds no "
                    "run to resume; a new run needs a new or empty --out"
                )
        elif self.path.exists():
            raise CastError(f"{self.path} is a file; --out must name a directory")

    def lock(self) -> None:
        """Hold ``.lock`` for as long as this object lives (or until :meth:`unlock`): a second
        writer on the same run would interleave metrics and race the checkpoint rotation."""
        if not self.writer or getattr(self, "_lock_fd", None) is not None:
            return
        fd = guard_write(self.path / LOCK, lambda: self._open_lock())
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # pragma: no cover - Windows: no advisory locks, no guard
            pass
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise CastError(
                f"{self.path} is in use by another cast process ({holder}); wait for it to finish, "
                "or stop it, before resuming this run"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}".encode())
        self._lock_fd = fd

    def abandon(self, made_here: bool) -> None:
        """Undo :meth:`lock` for a new run whose set-up failed before it wrote anything: the
        directory then holds only ``.lock`` (removed, and the directory too when ``made_here``),
        so a user who fixes the setting and runs the same command again is not told that the
        directory is in use or not empty."""
        self.unlock()
        if not self.writer or not self.path.is_dir() or [p.name for p in self.path.iterdir()] != [LOCK]:
            return
        (self.path / LOCK).unlink(missing_ok=True)
        if made_here:
            try:
                self.path.rmdir()
            except OSError:  # another process put something there meanwhile: leave it
                pass

    def _open_lock(self) -> int:
        self.path.mkdir(parents=True, exist_ok=True)
        return os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)

    def unlock(self) -> None:
        fd = getattr(self, "_lock_fd", None)
        if fd is not None:
            self._lock_fd = None
            try:
                os.close(fd)  # closing the descriptor releases the lock
            except OSError:  # already closed (e.g. at interpreter exit): the lock is gone with it
                pass

    def __del__(self):
        self.unlock()

    def create(self, config: dict[str, Any], notes: dict[str, str] | None = None) -> None:
        if not self.writer:
            return
        guard_write(self.samples, lambda: self.samples.mkdir(parents=True, exist_ok=True))
        self.write_config(config, notes)

    def write_config(self, config: dict[str, Any], notes: dict[str, str] | None = None) -> None:
        """``config.toml``, replaced atomically (a signal or crash mid-write must not leave an
        empty one that ``--resume`` cannot read). ``notes`` puts a TOML comment after a key's
        line, e.g. that a selector's window made ``window_size`` unused: a comment, so that the
        file still loads as the same configuration."""
        if not self.writer:
            return
        lines = dump_toml(config).splitlines()
        for i, line in enumerate(lines):
            key = line.split(" = ", 1)[0]
            if not line.startswith("#") and key in (notes or {}):
                lines[i] = f"{line}  # {' '.join(notes[key].split())}"
        write_atomic(self.path / "config.toml", "\n".join(lines) + "\n")

    def truncate_metrics(self, step: int, warn: Callable[[str], None] | None = None) -> None:
        """Drop metric lines written after the checkpoint we resume from (they will be redone)."""
        if self.writer and self.metrics_path.exists():
            keep = [row for row in read_metrics(self.metrics_path, warn) if row.get("step", 0) <= step]
            write_atomic(self.metrics_path, "".join(json.dumps(row) + "\n" for row in keep))

    def open_metrics(self):
        """An append-mode metrics file (a sink that drops lines on non-writers); a full or
        read-only disk is a :class:`WriteError` (a torn last line is skipped on reading)."""
        return _MetricsFile(self.metrics_path) if self.writer else _NullFile()

    def read_window(self) -> dict | None:
        return json.loads(self.window_path.read_text()) if self.window_path.exists() else None

    def write_window(self, record: dict) -> None:
        if self.writer:
            write_atomic(self.window_path, json.dumps(record, indent=2))


class _MetricsFile:
    def __init__(self, path: Path):
        self.path = path
        self.file = self._guard(lambda: open(path, "a"))

    def _guard(self, act: Callable[[], Any]) -> Any:
        return guard_write(self.path, act, "; the run can resume from its last checkpoint")

    def write(self, text: str) -> None:
        self._guard(lambda: self.file.write(text))

    def flush(self) -> None:
        self._guard(self.file.flush)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        if exc[0] is None:
            self._guard(self.file.close)
        else:  # the error in flight is the one to report; close's own flush may fail the same way
            try:
                self.file.close()
            except OSError:
                pass
        return False


class _NullFile:
    def write(self, _text: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False
