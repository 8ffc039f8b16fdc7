"""``cast train --num-processes N``: start N local processes of the same command.

It hands the command to ``torch.distributed.run`` (what ``torchrun`` is), bound to 127.0.0.1
on a free port. On GPUs users usually type ``accelerate launch`` or ``torchrun`` themselves
(docs/distributed.md); this is the one-flag way on a single machine, and the way that works on
a CPU, where ``accelerate launch`` needs MPI for several processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

__all__ = ["free_port", "launch_local", "in_distributed_launch"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_distributed_launch() -> bool:
    """True inside a process started by torchrun / accelerate launch with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


#: how long torchrun's agent waits for the processes to checkpoint after a signal before it
#: sends SIGKILL (its own default, 30 s, is shorter than one step of a large model)
SHUTDOWN_TIMEOUT_S = 900


def launch_local(num_processes: int, argv: list[str]) -> tuple[int, int | None]:
    """Run ``cast <argv>`` as ``num_processes`` processes: ``(the launcher's exit code, the
    signal that stopped the run or None)``.

    The launcher runs in its own session, and each SIGINT / SIGTERM this process hears is passed
    on to it exactly once (the agent hands it to every process: the first makes them finish the
    step and checkpoint, a second aborts them). In the terminal's process group a Ctrl-C would
    reach the launcher twice, from the terminal and from us, and abort at once. Out of our
    process group, the launcher would outlive us: it is told to take our death (even by
    SIGKILL) as a SIGTERM, so the processes checkpoint and stop rather than train on unseen."""
    import signal

    from cast_core.interrupt import SIGNALS

    cmd = [
        sys.executable,
        "-m",
        "cast_core.launch",  # torch.distributed.run, minus its traceback when a signal stops it
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(num_processes),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        "--shutdown_timeout",
        str(SHUTDOWN_TIMEOUT_S),
        "-m",
        "cast_core.cli",
        *argv,
    ]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // num_processes)))
    heard: list[int] = []
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_sigterm_when_parent_dies())

    def forward(signum, frame) -> None:
        heard.append(signum)
        try:
            proc.send_signal(signum)
        except ProcessLookupError:  # already gone
            pass

    previous = {s: signal.signal(s, forward) for s in SIGNALS}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code, (heard[0] if heard else None)


def _sigterm_when_parent_dies():
    """A ``preexec_fn`` that asks Linux to send the child SIGTERM when this process dies
    (``PR_SET_PDEATHSIG``); None where that is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        import signal

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:  # runs in the child between fork and exec: no imports, no allocation-heavy work
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(143)

    return arm


def _torchrun(argv: list[str]) -> None:
    """``torch.distributed.run`` that ends with the signal's exit code when a signal stopped it:
    its agent has already passed the signal on to every process (which say how they stopped),
    so the launcher's own traceback would only bury their lines."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main

    try:
        main(argv)
    except SignalException as err:
        sys.exit(128 + int(err.sigval))


if __name__ == "__main__":  # what launch_local starts
    _torchrun(sys.argv[1:])
