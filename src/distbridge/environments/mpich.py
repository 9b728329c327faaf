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

_VARIABLES = (  # first match wins
    Variables(
        "MPICH / PMI variables",
        {
            "rank": "PMI_RANK",
            "world_size": "PMI_SIZE",
            "local_rank": "MPI_LOCALRANKID",
            "local_world_size": "MPI_LOCALNRANKS",
        },
    ),
    Variables(
        "MVAPICH2 variables",
        {
            "rank": "MV2_COMM_WORLD_RANK",
            "world_size": "MV2_COMM_WORLD_SIZE",
            "local_rank": "MV2_COMM_WORLD_LOCAL_RANK",
            "local_world_size": "MV2_COMM_WORLD_LOCAL_SIZE",
        },
    ),
)


def detect(env: Mapping[str, str]) -> LaunchEnvironment | None:
    """Read the PMI (or MVAPICH2) variables from ``env``; None unless a rank and a size are set.

    Example:
        >>> detect({"PMI_RANK": "3", "PMI_SIZE": "4"}).rank
        3
    """
    for variables in _VARIABLES:
        found = detect_from(env, LAUNCHER, variables)
        if found is not None:
            srun = variables is _VARIABLES[0] and _srun_pmi(env, found.rank, found.world_size)
            return None if srun else found
    return None


def _srun_pmi(env: Mapping[str, str], rank: int, world_size: int) -> bool:
    """True when srun itself set PMI_RANK / PMI_SIZE (they repeat SLURM_PROCID / NTASKS) in a
    step's task (SLURM_STEP_ID, SLURM_STEPID before SLURM 20.11: what the SLURM detector reads)."""
    return bool(env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")) and (
        read_int(env, "SLURM_PROCID"),
        read_int(env, "SLURM_NTASKS"),
    ) == (rank, world_size)
