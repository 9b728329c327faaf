"""MPICH's Hydra ``mpiexec``, Intel MPI and MVAPICH2 (the PMI family).

Hydra and Intel MPI set ``PMI_RANK`` and ``PMI_SIZE`` with ``MPI_LOCALRANKID`` and
``MPI_LOCALNRANKS`` (this node's share); MVAPICH2's launcher sets ``MV2_COMM_WORLD_RANK``,
``_SIZE``, ``_LOCAL_RANK`` and ``_LOCAL_SIZE``. The PMI names win when both are present.
None of them gives the node's index or the number of nodes, nor a job id shared by every
rank, so:

- rank 0's address is ``MASTER_ADDR``, else ``127.0.0.1`` when every rank runs on this node;
- the port is always ``MASTER_PORT``: ``mpiexec -genv MASTER_PORT 29500 ...`` (Hydra, Intel
  MPI) or ``mpirun_rsh ... MASTER_PORT=29500`` (MVAPICH2).

``srun --mpi=pmi2`` sets ``PMI_RANK`` / ``PMI_SIZE`` itself. When they equal ``SLURM_PROCID``
/ ``SLURM_NTASKS`` the SLURM environment describes the same world with more detail (nodes,
rank 0's host), so this detector steps aside for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from distbridge.environments.base import (
    LaunchEnvironment,
    Variables,
    master_addr,
    master_port,
    read_int,
)

__all__ = ["LAUNCHER", "detect"]

LAUNCHER = "mpich"

_NAMES = (  # (rank, size, local rank, local size, whose), first match wins
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MPICH / PMI variables"),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE", "MVAPICH2 variables"),
)  # fmt: skip


def detect(env: Mapping[str, str]) -> LaunchEnvironment | None:
    """Read the PMI (or MVAPICH2) variables from ``env``; None unless a rank and a size are set.

    Example:
        >>> detect({"PMI_RANK": "3", "PMI_SIZE": "4"}).rank
        3
    """
    for rank_key, size_key, local_key, local_size_key, family in _NAMES:
        rank = read_int(env, rank_key)
        world_size = read_int(env, size_key)
        if rank is None or world_size is None:
            continue
        if rank_key == "PMI_RANK" and _srun_pmi(env, rank, world_size):
            return None
        local_size = read_int(env, local_size_key)
        one_node = local_size == world_size
        return LaunchEnvironment(
            launcher=LAUNCHER,
            rank=rank,
            world_size=world_size,
            local_rank=read_int(env, local_key),
            local_world_size=local_size,
            node_rank=0 if one_node else None,
            nnodes=1 if one_node else None,
            master_addr=master_addr(env, one_node=one_node),
            master_port=master_port(env, None),
            variables=Variables(
                family,
                {
                    "rank": rank_key,
                    "world_size": size_key,
                    "local_rank": local_key,
                    "local_world_size": local_size_key,
                },
            ),
        )
    return None


def _srun_pmi(env: Mapping[str, str], rank: int, world_size: int) -> bool:
    """True when srun itself set PMI_RANK / PMI_SIZE (they repeat SLURM_PROCID / NTASKS)."""
    return "SLURM_STEP_ID" in env and (
        read_int(env, "SLURM_PROCID"),
        read_int(env, "SLURM_NTASKS"),
    ) == (rank, world_size)
