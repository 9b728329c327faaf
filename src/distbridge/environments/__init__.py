"""Where am I? Each launcher's environment variables, read by a pure function of a mapping.

Every module here has ``detect(env) -> LaunchEnvironment | None``: it reads only ``env`` (a
dict in the tests, ``os.environ`` in real use), never the network or the file system, and
returns None when its launcher did not start this process. ``detect()`` below asks them in
the order of ``DETECTORS``, innermost launcher first (see its comments); the first that
answers wins. docs/environments.md has the variables each module reads, why this order, the
addresses and ports each derives, and why XLA has no module here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from distbridge.environments import horovodrun, lsf, mpi, mpich, slurm, torchelastic
from distbridge.environments.base import LaunchEnvironment

__all__ = ["DETECTORS", "LaunchEnvironment", "detect"]

DETECTORS: tuple[Callable[[Mapping[str, str]], LaunchEnvironment | None], ...] = (
    torchelastic.detect,  # innermost launcher: torchrun / spawn workers
    horovodrun.detect,  # horovodrun --gloo
    lsf.detect,  # jsrun: before Open MPI, whose variables Spectrum MPI sets too
    mpi.detect,  # Open MPI: before SLURM (mpirun inside sbatch)
    mpich.detect,  # MPICH / Intel MPI / MVAPICH2: before SLURM (mpiexec inside sbatch)
    slurm.detect,  # SLURM: last, every launcher above may run inside an allocation
)


def detect(env: Mapping[str, str] | None = None) -> LaunchEnvironment | None:
    """Return the first launcher environment found in ``env`` (default: ``os.environ``).

    Raises:
        ValueError: a launcher's variable is malformed or inconsistent (RANK >= WORLD_SIZE,
            a non-integer, ...); the message names the variable.
    """
    env = os.environ if env is None else env
    for detector in DETECTORS:
        found = detector(env)
        if found is not None:
            return found
    return None
