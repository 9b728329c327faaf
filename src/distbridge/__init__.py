"""distbridge: one facade for distributed PyTorch.

``import distbridge as idist`` runs the same code serially, on torch.distributed
(NCCL, Gloo, MPI), on PyTorch/XLA and on Horovod. It is a drop-in superset of
``ignite.distributed``.
"""

from __future__ import annotations

import importlib.util

import torch.distributed as _dist

from distbridge import errors
from distbridge._api import (
    available_backends,
    backend,
    device,
    finalize,
    get_local_rank,
    get_nnodes,
    get_node_rank,
    get_nproc_per_node,
    get_rank,
    get_world_size,
    hostname,
    initialize,
    model_name,
    set_local_rank,
    show_config,
    spawn,
    sync,
)
from distbridge._collectives import (
    all_gather,
    all_gather_tensors_with_shapes,
    all_reduce,
    all_to_all,
    barrier,
    broadcast,
    gather,
    new_group,
    reduce,
    reduce_scatter,
    scatter,
)
from distbridge._detectron2 import launch
from distbridge._registry import RegisteredModels, registry
from distbridge.auto import DistributedProxySampler, auto_dataloader, auto_model, auto_optim
from distbridge.checkpoint import load_checkpoint, save_checkpoint
from distbridge.diagnostics import dump_stacks
from distbridge.errors import (
    BackendUnavailableError,
    BarrierTimeout,
    CollectiveMismatch,
    CollectiveTimeout,
    DistributedError,
    PeerFailed,
    SpawnTimeoutError,
    WorkerFailedError,
)
from distbridge.helpers import (
    get_local_group,
    get_local_size,
    gpu_mem_usage,
    is_main_process,
    is_module_wrapper,
    one_rank_first,
    one_rank_only,
    rank_zero_only,
    synchronize,
)
from distbridge.mesh import device_mesh
from distbridge.models import ComputationModel
from distbridge.objects import (
    Serializer,
    all_gather_object,
    all_reduce_dict,
    average_across_processes,
    broadcast_object,
    gather_object,
    gather_results,
    reduce_dict,
    scatter_object,
    shared_random_seed,
)
from distbridge.parallel import Parallel
from distbridge.preemption import StopGuard, resume

__version__ = "0.1.0"

#: True when torch.distributed is usable in this torch build.
has_native_dist_support: bool = _dist.is_available()
#: True when torch_xla is installed (it is imported only when used).
has_xla_support: bool = importlib.util.find_spec("torch_xla") is not None
#: True when Horovod is installed (it is imported only when used).
has_hvd_support: bool = importlib.util.find_spec("horovod") is not None

#: The registered computation model classes, highest detection priority first (a live view).
registered_computation_models = RegisteredModels(registry)

__all__ = [
    "BackendUnavailableError",
    "BarrierTimeout",
    "CollectiveMismatch",
    "CollectiveTimeout",
    "ComputationModel",
    "DistributedError",
    "DistributedProxySampler",
    "Parallel",
    "PeerFailed",
    "Serializer",
    "SpawnTimeoutError",
    "StopGuard",
    "WorkerFailedError",
    "__version__",
    "all_gather",
    "all_gather_object",
    "all_gather_tensors_with_shapes",
    "all_reduce",
    "all_reduce_dict",
    "all_to_all",
    "auto_dataloader",
    "auto_model",
    "auto_optim",
    "available_backends",
    "average_across_processes",
    "backend",
    "barrier",
    "broadcast",
    "broadcast_object",
    "device",
    "device_mesh",
    "dump_stacks",
    "errors",
    "finalize",
    "gather",
    "gather_object",
    "gather_results",
    "get_local_group",
    "get_local_rank",
    "get_local_size",
    "get_nnodes",
    "get_node_rank",
    "get_nproc_per_node",
    "get_rank",
    "get_world_size",
    "gpu_mem_usage",
    "has_hvd_support",
    "has_native_dist_support",
    "has_xla_support",
    "hostname",
    "initialize",
    "is_main_process",
    "is_module_wrapper",
    "launch",
    "load_checkpoint",
    "model_name",
    "new_group",
    "one_rank_first",
    "one_rank_only",
    "rank_zero_only",
    "reduce",
    "reduce_dict",
    "reduce_scatter",
    "registered_computation_models",
    "registry",
    "resume",
    "save_checkpoint",
    "scatter",
    "scatter_object",
    "set_local_rank",
    "shared_random_seed",
    "show_config",
    "spawn",
    "sync",
    "synchronize",
]
