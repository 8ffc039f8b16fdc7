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


def launch_local(num_processes: int, argv: list[str]) -> int:
    """Run ``cast <argv>`` as ``num_processes`` processes; the exit code of the launcher."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(num_processes),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        "-m",
        "cast_core.cli",
        *argv,
    ]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // num_processes)))
    return subprocess.call(cmd, env=env)
