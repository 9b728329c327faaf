"""torchrun / torchelastic (and ``distbridge.spawn`` workers, which set the same variables)."""

from __future__ import annotations

from collections.abc import Mapping

from distbridge.environments.base import LaunchEnvironment, Variables, master_port, read_int

__all__ = ["detect"]

_NAMES = {  # LaunchEnvironment field: the variable it is read from
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "local_rank": "LOCAL_RANK",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "node_rank": "GROUP_RANK",
    "nnodes": "GROUP_WORLD_SIZE",
}


def detect(env: Mapping[str, str]) -> LaunchEnvironment | None:
    """Read RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and MASTER_* from ``env``.

    Returns None unless both RANK and WORLD_SIZE are set. The number of nodes is
    GROUP_WORLD_SIZE when torchrun set it, else WORLD_SIZE / LOCAL_WORLD_SIZE.
    """
    rank, world_size = read_int(env, "RANK"), read_int(env, "WORLD_SIZE")
    if rank is None or world_size is None:
        return None
    local_rank, local_world_size = read_int(env, "LOCAL_RANK"), read_int(env, "LOCAL_WORLD_SIZE")
    node_rank, nnodes = read_int(env, "GROUP_RANK"), read_int(env, "GROUP_WORLD_SIZE")
    names = dict(_NAMES)
    if nnodes is None and local_world_size and world_size % local_world_size == 0:
        nnodes = world_size // local_world_size
        names["nnodes"] = (
            f"WORLD_SIZE={world_size} / LOCAL_WORLD_SIZE={local_world_size} = {nnodes} nodes"
        )
    if node_rank is None and local_world_size and nnodes:
        node_rank = rank // local_world_size
        names["node_rank"] = (
            f"RANK={rank} // LOCAL_WORLD_SIZE={local_world_size} = node {node_rank}"
        )
    return LaunchEnvironment(
        launcher="torchelastic",
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=master_port(env, None),
        variables=Variables("torchrun variables", names),
    )
