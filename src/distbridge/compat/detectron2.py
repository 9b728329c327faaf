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

A mirror, no logic: every name is an object of the facade (``distbridge``) or of
``distbridge._detectron2`` (detectron2's signatures for the object collectives, and the local
group in blocks of consecutive ranks).
"""

from __future__ import annotations

from typing import Any

from distbridge import (
    get_local_rank,
    get_local_size,
    get_rank,
    get_world_size,
    is_main_process,
    shared_random_seed,
    synchronize,
)
from distbridge._detectron2 import (
    all_gather,
    create_local_process_group,
    gather,
    get_local_process_group,
    local_process_group_or_none,
    reduce_dict,
)

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


def __getattr__(name: str) -> Any:
    """``_LOCAL_PROCESS_GROUP``, detectron2's module variable (the local group, or None without
    a distributed context), read when asked for."""
    if name == "_LOCAL_PROCESS_GROUP":
        return local_process_group_or_none()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
