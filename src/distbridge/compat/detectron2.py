"""detectron2's ``detectron2.utils.comm`` on distbridge: change one import line.

``from detectron2.utils import comm`` becomes ``from distbridge.compat import detectron2 as
comm``; every function keeps detectron2's name, signature and result, and runs on every
distbridge model (serial, torch.distributed, Horovod, XLA) instead of torch.distributed only.

Where it differs from detectron2 (each an improvement a caller cannot rely on the other
way round):

- ``all_gather`` / ``gather`` of one rank: detectron2 returns ``[data]`` itself; here the
  object is serialized and rebuilt (a copy, equal to it), so an object that cannot travel
  fails on a laptop as it would on a cluster.
- ``reduce_dict`` on ranks other than 0: detectron2 returns whatever ``dist.reduce`` left in
  its buffer; here the input values, unchanged. Values keep their own dtypes and shapes.
- ``get_local_rank`` / ``get_local_size`` work without ``create_local_process_group``
  (distbridge reads them from the launcher), and ``create_local_process_group`` may be called
  again (the groups are cached).
- ``_LOCAL_PROCESS_GROUP`` is read through ``get_local_process_group()``; nothing sets it.
- Not mirrored: detectron2's private helpers and its ``differentiable_all_*`` functions
  (use ``torch.distributed.nn``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import distbridge as idist
from distbridge._types import Group

__all__ = [
    "all_gather",
    "create_local_process_group",
    "gather",
    "get_local_process_group",
    "get_local_rank",
    "get_local_size",
    "get_rank",
    "get_world_size",
    "is_main_process",
    "reduce_dict",
    "shared_random_seed",
    "synchronize",
]

get_world_size = idist.get_world_size
get_rank = idist.get_rank
get_local_rank = idist.get_local_rank
get_local_size = idist.get_local_size
is_main_process = idist.is_main_process
synchronize = idist.synchronize
shared_random_seed = idist.shared_random_seed


def all_gather(data: Any, group: Group | None = None) -> list[Any]:
    """Every rank's ``data`` (any picklable object), in rank order, on every rank.

    Example:
        >>> comm.all_gather({"rank": comm.get_rank()})
        [{'rank': 0}, {'rank': 1}]   # on each of 2 ranks
    """
    return idist.all_gather_object(data, group)


def gather(data: Any, dst: int = 0, group: Group | None = None) -> list[Any]:
    """Every rank's ``data`` on rank ``dst`` (a list in rank order); ``[]`` on the others.

    Example:
        >>> comm.gather(comm.get_rank() * 10)
        [0, 10]   # on rank 0 of 2; [] on rank 1
    """
    return idist.gather_object(data, dst, group)


def reduce_dict(input_dict: Mapping[str, Any], average: bool = True) -> dict[str, Any]:
    """The values of ``input_dict`` summed (averaged by default) over all ranks, on rank 0,
    keys in sorted order as detectron2 returns them; every rank must pass the same keys.

    Example:
        >>> comm.reduce_dict({"loss": torch.tensor(float(comm.get_rank()))})
        {'loss': tensor(0.5000)}   # on rank 0 of 2; rank 1 gets its input back
    """
    reduced = idist.reduce_dict(input_dict, average)
    return {key: reduced[key] for key in sorted(reduced)}


def _machine_ranks(num_workers_per_machine: int) -> tuple[list[list[int]], int]:
    world = idist.get_world_size()
    if (
        not isinstance(num_workers_per_machine, int)
        or isinstance(num_workers_per_machine, bool)
        or num_workers_per_machine < 1
        or world % num_workers_per_machine
    ):
        raise ValueError(
            f"num_workers_per_machine must be a positive int that divides the world size "
            f"{world}, got {num_workers_per_machine!r}; pass the processes per machine "
            f"(comm.get_local_size() is {idist.get_local_size()})."
        )
    n = num_workers_per_machine
    machines = [list(range(start, start + n)) for start in range(0, world, n)]
    return machines, idist.get_rank() // n


def create_local_process_group(num_workers_per_machine: int) -> None:
    """Create the group of the ranks on each machine (blocks of ``num_workers_per_machine``
    consecutive ranks, as detectron2's ``launch`` places them). Every rank must call it."""
    machines, _ = _machine_ranks(num_workers_per_machine)
    for ranks in machines:
        idist.new_group(ranks)


def get_local_process_group() -> Any:
    """The group of the ranks on this process's machine (blocks of ``get_local_size()``
    ranks). Created by ``create_local_process_group``, which every rank calls first; on one
    machine the first call here may create it instead."""
    machines, mine = _machine_ranks(idist.get_local_size())
    return idist.new_group(machines[mine])


def __getattr__(name: str) -> Any:
    """``_LOCAL_PROCESS_GROUP``, as detectron2's module variable: the local group, or None
    without a distributed context."""
    if name == "_LOCAL_PROCESS_GROUP":
        return get_local_process_group() if idist.get_world_size() > 1 else None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
