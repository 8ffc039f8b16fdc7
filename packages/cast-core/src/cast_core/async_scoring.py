"""``async_scoring = true``: the judge scores one chunk of a step's images while the policy
samples the next, and the update runs when the last chunk's scores arrive.

Why inside a step, not across steps: step ``t+1`` samples with the adapter that update ``t``
produced, and update ``t`` needs step ``t``'s scores, so judging step ``t`` while sampling step
``t+1`` would sample with an older adapter — a different run. Within a step nothing waits on a
score: every sample draws its noise from its own generator (:mod:`cast_core.seeding`), so the
chunks (``sample_batch_size`` images each, the same chunks a synchronous run samples) come out
the same whenever they are judged, and the judge sees each group's images in one call, exactly
as the synchronous judge does. So the overlap changes timing, never numbers: same samples, same
verdicts, same advantages, same adapter (tests/test_async_scoring.py checks it bit for bit,
across a SIGKILL resume and over two processes).

With ``k`` chunks a step takes about ``max(sampling, judging) + one chunk`` instead of
``sampling + judging``: when the judge is as slow as the sampler that is up to ``2k/(k+1)``
times the steps per second (1.6× at k = 4; benchmarks/async_scoring.py measures it).

The judge runs in one worker thread and makes no collective call: gathering the verdicts over the
processes (:meth:`cast_core.judging.Judge.collect`) stays on the main thread, after sampling.
A judge that computes on the CPU competes with the sampler for cores; a GPU judge or a remote
one (``cast serve-scorer``) leaves them to it.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

import torch

from cast_core.judging import Judge
from cast_core.types import Rollout

__all__ = ["OverlappedJudging"]


def _judge_thread(device: int | None) -> None:
    """Set up the judge's worker thread:

    * the current CUDA device is per thread: the worker judges on this process's GPU (cuda:k of
      rank k), not on cuda:0, where a judge built on the main thread would not find its weights;
    * the worker computes without an OpenMP team of its own (``omp_set_num_threads(1)``, which
      is per thread). Measured on the shapes policy on 2 cores: once a second thread has run one
      parallel torch kernel (an index, a copy), the main thread samples at half its speed for the
      rest of the process, and async steps came out 1.34x instead of about 1.6x. A judge in the
      worker should compute on a GPU or in another process (``remote``); a CPU judge competing
      with the sampler for cores would not overlap anyway.
    """
    if device is not None:
        torch.cuda.set_device(device)
    torch.get_num_threads()  # torch sets each thread's OpenMP threads on its first use: before ours
    omp = _openmp_library()
    if omp is not None:
        omp.omp_set_num_threads(1)


def _openmp_library():
    """The OpenMP runtime torch loaded (GNU, LLVM or Intel), or None (a build without one)."""
    import ctypes

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if line.rstrip().endswith((".so", ".so.1", ".so.5"))}
    except OSError:  # not Linux
        paths = set()
    for path in sorted(paths):
        name = path.rsplit("/", 1)[-1]
        if name.startswith(("libgomp", "libomp", "libiomp")):
            try:
                lib = ctypes.CDLL(path)
                lib.omp_set_num_threads  # noqa: B018 - present in every OpenMP runtime
                return lib
            except (OSError, AttributeError):
                continue
    return None


class OverlappedJudging:
    """Scores whole groups in a worker thread as soon as the sampler has finished them."""

    def __init__(self, judge: Judge):
        self.judge = judge
        device = torch.cuda.current_device() if torch.cuda.is_available() else None
        self.executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="cast-judge", initializer=_judge_thread, initargs=(device,)
        )
        self.futures: list[Future] = []
        self.waited_s = 0.0

    def begin(self, prompts: Sequence[str], ids: Sequence[tuple[int, int]]) -> None:
        """A new step: its prompts and this process's samples ``ids`` in sampling order. Every
        prompt is decomposed here, on the main thread, before the first chunk is sampled."""
        for slot in self.judge.slots:
            for p in sorted({p for p, _ in ids}):
                self.judge.graph_for(slot, prompts[p])
        self.prompts = list(prompts)
        self.ids = list(ids)
        self.members = {p: sum(1 for q, _ in ids if q == p) for p, _ in ids}
        self.sent: set[int] = set()
        self.futures = []

    def on_chunk(self, parts: Sequence[Rollout], sampled: int) -> None:
        """After each sampled chunk (``parts`` so far, ``sampled`` samples in all): send every
        group whose members on this process are all sampled now to the judge."""
        done = self.ids[:sampled]
        ready = [p for p, n in self.members.items() if p not in self.sent and sum(1 for q, _ in done if q == p) == n]
        if not ready:
            return
        images = parts[0].images if len(parts) == 1 else torch.cat([r.images for r in parts])
        rows = [i for i, (p, _) in enumerate(done) if p in ready]
        self.sent.update(ready)
        self.futures.append(
            self.executor.submit(
                self.judge.score_local, self.prompts, images[rows], [done[i] for i in rows], sorted(ready)
            )
        )

    def parts(self) -> dict[str, dict[int, tuple]]:
        """Every group's parts (``{label: {group: part}}``), waiting for the judge where it is
        still busy (the wait is added to :attr:`waited_s`)."""
        start = time.perf_counter()
        merged: dict[str, dict[int, tuple]] = {}
        for future in self.futures:
            for label, groups in future.result().items():
                merged.setdefault(label, {}).update(groups)
        self.waited_s = time.perf_counter() - start
        missing = set(self.members) - self.sent
        if missing:  # cannot happen unless sampling stopped early: say so rather than train on less
            raise RuntimeError(f"async scoring: groups {sorted(missing)} were sampled but never sent to the judge")
        self.futures = []
        return merged

    def close(self) -> None:
        """Stop the worker; a call still running finishes on its own (it makes no collective)."""
        self.executor.shutdown(wait=False, cancel_futures=True)
