"""MPICH's Hydra ``mpiexec``, Intel MPI and MVAPICH2 (the PMI family).

Hydra and Intel MPI set ``PMI_RANK`` and ``PMI_SIZE`` with ``MPI_LOCALRANKID`` and
``MPI_LOCALNRANKS`` (this node's share); MVAPICH2's launcher sets ``MV2_COMM_WORLD_*``. The
PMI names win when both are present. None of them gives the node's index or the number of
nodes, nor a job id shared by every rank, so the port is always ``MASTER_PORT``
(``mpiexec -genv MASTER_PORT 29500 ...``).

``srun --mpi=pmi2`` sets ``PMI_RANK`` / ``PMI_SIZE`` itself. When they equal ``SLURM_PROCID``
/ ``SLURM_NTASKS`` the SLURM environment describes the same world with more detail (nodes,
rank 0's host), so this detector steps aside for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from distbridge.environments.base import LaunchEnvironment, Variables, detect_from, read_int

__all__ = ["LAUNCHER", "detect"]

LAUNCHER = "mpich"

_PMI = Variables(
    "MPICH / PMI variables",
    {
        "rank": "PMI_RANK",
        "world_size": "PMI_SIZE",
        "local_rank": "MPI_LOCALRANKID",
        "local_world_size": "MPI_LOCALNRANKS",
    },
)
_MVAPICH2 = Variables(
    "MVAPICH2 variables",
    {
        "rank": "MV2_COMM_WORLD_RANK",
        "world_size": "MV2_COMM_WORLD_SIZE",
        "local_rank": "MV2_COMM_WORLD_LOCAL_RANK",
        "local_world_size": "MV2_COMM_WORLD_LOCAL_SIZE",
    },
)


def detect(env: Mapping[str, str]) -> LaunchEnvironment | None:
    """Read the PMI (or MVAPICH2) variables from ``env``; None unless a rank and a size are set.

    Example:
        >>> detect({"PMI_RANK": "3", "PMI_SIZE": "4"}).rank
        3
    """
    found = detect_from(env, LAUNCHER, _PMI)
    if found is None:
        return detect_from(env, LAUNCHER, _MVAPICH2)
    # srun set PMI_RANK / PMI_SIZE itself when they repeat SLURM_PROCID / SLURM_NTASKS in a
    # step's task (SLURM_STEP_ID, SLURM_STEPID before SLURM 20.11: what the SLURM detector reads)
    if not (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")):
        return found  # SLURM's variables are read only in a step, as the SLURM detector does
    srun = (read_int(env, "SLURM_PROCID"), read_int(env, "SLURM_NTASKS"))
    return None if srun == (found.rank, found.world_size) else found
