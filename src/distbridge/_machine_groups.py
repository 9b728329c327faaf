"""The local process group as detectron2 builds it: one group for each machine's block of
consecutive ranks (the placement of detectron2's ``launch``), the blocks
``num_workers_per_machine`` ranks long.

``distbridge.compat.detectron2`` gives these functions detectron2's names; the facade's own
``get_local_group`` finds each rank's machine instead, whatever the placement.
"""

from __future__ import annotations

from typing import Any

from distbridge import _api, _collectives

__all__ = ["create_local_process_group", "get_local_process_group", "local_process_group_or_none"]


def _machine_ranks(num_workers_per_machine: int) -> tuple[list[list[int]], int]:
    """Every machine's ranks (blocks of ``num_workers_per_machine``) and this rank's machine."""
    world = _api.get_world_size()
    if (
        not isinstance(num_workers_per_machine, int)
        or isinstance(num_workers_per_machine, bool)
        or num_workers_per_machine < 1
        or world % num_workers_per_machine
    ):
        raise ValueError(
            f"num_workers_per_machine must be a positive int that divides the world size "
            f"{world}, got {num_workers_per_machine!r}; pass the processes per machine "
            f"(comm.get_local_size() is {_api.get_nproc_per_node()})."
        )
    n = num_workers_per_machine
    machines = [list(range(start, start + n)) for start in range(0, world, n)]
    return machines, _api.get_rank() // n


def create_local_process_group(num_workers_per_machine: int) -> None:
    """Create the group of the ranks on each machine (blocks of ``num_workers_per_machine``
    consecutive ranks, as detectron2's ``launch`` places them). Every rank must call it."""
    machines, _ = _machine_ranks(num_workers_per_machine)
    for ranks in machines:
        _collectives.new_group(ranks)


def get_local_process_group() -> Any:
    """The group of the ranks on this process's machine (blocks of ``get_local_size()``
    ranks). Created by ``create_local_process_group``, which every rank calls first; on one
    machine the first call here may create it instead."""
    machines, mine = _machine_ranks(_api.get_nproc_per_node())
    return _collectives.new_group(machines[mine])


def local_process_group_or_none() -> Any:
    """detectron2's module variable ``_LOCAL_PROCESS_GROUP``: the local group, or None
    without a distributed context."""
    return get_local_process_group() if _api.get_world_size() > 1 else None
