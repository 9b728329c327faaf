"""Mirrors ``ignite.distributed.utils``: ``from distbridge.utils import ...`` (this module's
names, re-exported at ignite's path) is ``from ignite.distributed.utils import ...`` with one
import changed.

Every name is the facade's own object (``distbridge.utils.barrier is distbridge.barrier``);
this module has no logic. ignite's private helpers (``_model``, ``_set_model``, ...) are
not mirrored: distbridge keeps its state in ``distbridge._state``.
"""

from __future__ import annotations

from distbridge import (
    all_gather,
    all_gather_tensors_with_shapes,
    all_reduce,
    available_backends,
    backend,
    barrier,
    broadcast,
    device,
    finalize,
    get_local_rank,
    get_nnodes,
    get_node_rank,
    get_nproc_per_node,
    get_rank,
    get_world_size,
    has_hvd_support,
    has_native_dist_support,
    has_xla_support,
    hostname,
    initialize,
    model_name,
    new_group,
    one_rank_first,
    one_rank_only,
    registered_computation_models,
    set_local_rank,
    show_config,
    spawn,
    sync,
)

__all__ = [
    "all_gather",
    "all_gather_tensors_with_shapes",
    "all_reduce",
    "available_backends",
    "backend",
    "barrier",
    "broadcast",
    "device",
    "finalize",
    "get_local_rank",
    "get_nnodes",
    "get_node_rank",
    "get_nproc_per_node",
    "get_rank",
    "get_world_size",
    "has_hvd_support",
    "has_native_dist_support",
    "has_xla_support",
    "hostname",
    "initialize",
    "model_name",
    "new_group",
    "one_rank_first",
    "one_rank_only",
    "registered_computation_models",
    "set_local_rank",
    "show_config",
    "spawn",
    "sync",
]
