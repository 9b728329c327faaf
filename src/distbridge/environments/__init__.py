"""Where am I? Each launcher's environment variables, read by a pure function of a mapping.

Every module here has ``detect(env) -> LaunchEnvironment | None``: it reads only ``env`` (a
dict in the tests, ``os.environ`` in real use), never the network or the file system, and
returns None when its launcher did not start this process. ``detect()`` below asks them in
this order; the first that answers wins:

1. ``torchelastic``: torchrun, ``torch.distributed.launch`` and ``distbridge.spawn`` workers
   (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_*).
2. ``horovodrun``: horovodrun's Gloo controller (HOROVOD_RANK, HOROVOD_SIZE, ...).
3. ``lsf``: IBM jsrun in an LSF job (JSM_NAMESPACE_*, LSB_JOBID, LSB_MCPU_HOSTS).
4. ``mpi``: Open MPI's mpirun / mpiexec (OMPI_COMM_WORLD_*).
5. ``mpich``: MPICH's Hydra, Intel MPI, MVAPICH2 (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MV2_*).
6. ``slurm``: an srun step (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, ...).

Why this order: the *innermost* launcher describes the process, and the outer ones describe
the processes they started, which are the inner launchers, not this one:

- **torchrun inside srun** (``srun --ntasks-per-node=1 torchrun ...``): SLURM_PROCID is the
  torchrun agent's index (one per node); torchrun's RANK / WORLD_SIZE describe the worker.
  torchelastic comes first, so RANK wins.
- **srun inside torchrun** (a worker that runs ``srun`` for a helper step): the step's
  processes are SLURM's, but they inherit torchrun's RANK / WORLD_SIZE. torchelastic still
  wins: clear RANK / WORLD_SIZE in the step (``env -u RANK -u WORLD_SIZE srun ...``) for
  its processes to be read as SLURM's.
- **mpirun (or mpiexec, jsrun) inside an sbatch allocation**: mpirun starts its daemons
  with srun, so SLURM_PROCID is a daemon's index; OMPI_COMM_WORLD_RANK is the process's.
  The MPI environments come before SLURM, so OMPI wins.
- **horovodrun** is innermost wherever it runs; with its MPI controller it runs mpirun,
  whose variables describe the same world.
- **jsrun** sets JSM_NAMESPACE_* and, with Spectrum MPI, OMPI_COMM_WORLD_* too; LSF comes
  first because it also knows rank 0's host.
- ``srun --mpi=pmi2`` sets PMI_RANK / PMI_SIZE itself; ``mpich`` steps aside when they equal
  SLURM_PROCID / SLURM_NTASKS, so SLURM (which knows the nodes) describes the step.

XLA has no module here: a TPU process's rank and world are the runtime's devices
(``torch_xla.runtime.global_ordinal()`` / ``world_size()``), known only once the PJRT
runtime has started, and ``torch_xla``'s own launchers (``xmp.spawn``, torchrun on GPU) set
no variables of their own that this order misses: torchrun's are read by ``torchelastic``.

Where a launcher does not give rank 0's address (``MASTER_ADDR``) or a port, the module says
how it derives them (the loopback address when every rank is on this machine, a port derived
from the job id) or leaves them None; ``initialize()`` then says what to export.
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
