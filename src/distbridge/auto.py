"""auto_model, auto_optim, auto_dataloader: make a training loop distributed in three calls.

The same calls work serially, under torch.distributed, Horovod and XLA, with the signatures
and meaning of ``ignite.distributed.auto`` (import them from ``distbridge.auto`` instead);
``auto_dataloader``'s ``batch_size`` is the global batch size, split across the processes.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler
from torch.utils.data.distributed import DistributedSampler

from distbridge import _api
from distbridge._sharding import (
    ShardModules,
    check_shard_options,
    chosen_submodules,
    fully_shard_model,
    was_replaced,
)
from distbridge.errors import ArgumentTypeError, DistributedError

__all__ = ["DistributedProxySampler", "auto_dataloader", "auto_model", "auto_optim"]

_STRATEGIES = ("ddp", "fsdp")

#: ignite's "ignite.distributed.auto.*" INFO lines, under distbridge's names. No handler is
#: attached (ignite's setup_logger attaches one): configure logging to see them.
_model_log = logging.getLogger("distbridge.auto.auto_model")
_loader_log = logging.getLogger("distbridge.auto.auto_dataloader")


def _info(log: logging.Logger, message: str) -> None:
    """Log ``message`` at INFO on rank 0 only, as ignite does (its other ranks are silent)."""
    if _api.get_rank() == 0:
        log.info(message)


def auto_model(
    model: torch.nn.Module,
    sync_bn: bool = False,
    *,
    strategy: str = "ddp",
    shard_modules: ShardModules | None = None,
    **kwargs: Any,
) -> torch.nn.Module:
    """Move ``model`` to ``device()`` and wrap it for the active backend.

    With ``strategy="ddp"`` (the default, ignite's behaviour):

    - native with several processes: ``DistributedDataParallel`` (``device_ids`` set on CUDA),
      after converting BatchNorm to SyncBatchNorm when ``sync_bn=True``;
    - Horovod: parameters broadcast from rank 0 (Horovod averages gradients in
      ``auto_optim``'s optimizer);
    - XLA and a world of one: the model on the device, unwrapped.

    With ``strategy="fsdp"`` on a native backend, FSDP2: ``fully_shard`` on each submodule of
    ``shard_modules`` (deepest first), then on the model, so parameters become DTensors sharded
    across the ranks (a world of one too). Without a distributed context the model is returned
    unwrapped, as with DDP; Horovod and XLA cannot run FSDP2 and raise. Build the optimizer
    from the returned model's parameters (``auto_optim`` refuses one built before).

    Args:
        sync_bn: convert BatchNorm layers to SyncBatchNorm (native backends only).
        shard_modules: with "fsdp", the submodules sharded as units of their own: None for
            the model's children that hold parameters, a module class or tuple of classes
            (e.g. your transformer block) for every submodule of that class, or the modules
            (a list, or a ModuleList for its items).
        kwargs: passed to DistributedDataParallel ("ddp") or to every ``fully_shard`` call
            ("fsdp": ``mesh``, ``reshard_after_forward``, ``mp_policy``, ``offload_policy``,
            ...). With "ddp", ``data_parallel=True`` asks for ``torch.nn.DataParallel`` over
            every visible GPU when there is no distributed context (never applied without
            being asked, unlike ignite).
    """
    _require_context("auto_model")
    if strategy not in _STRATEGIES:
        raise ValueError(
            f"auto_model() got strategy={strategy!r}; the strategies are "
            f"{', '.join(map(repr, _STRATEGIES))}: pass one of them."
        )
    model_name, world = _api.model_name(), _api.get_world_size()
    fsdp = strategy == "fsdp"
    if fsdp:
        if model_name not in ("native-dist", "serial"):
            raise DistributedError(
                f"auto_model(strategy='fsdp') shards with torch.distributed's FSDP2, which the "
                f"active model {model_name!r} cannot run; use strategy='ddp' (the default) there."
            )
        check_shard_options(kwargs)
        chosen = chosen_submodules(model, shard_modules)  # the same errors without a context
    elif shard_modules is not None:
        raise TypeError(
            "auto_model() got shard_modules with strategy='ddp'; it chooses FSDP2's units: "
            "pass strategy='fsdp' with it, or drop it."
        )
    data_parallel = bool(kwargs.pop("data_parallel", False))
    device = _api.device()
    model = model.to(device)
    if model_name == "native-dist" and (world > 1 or fsdp):  # FSDP2 shards a world of one too
        if sync_bn:
            _info(_model_log, "Convert batch norm to sync batch norm")
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
        if fsdp:
            return fully_shard_model(model, chosen, kwargs)
        message = "Apply torch DistributedDataParallel on model"
        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device.index])
            message += f", device id: {device.index}"
        _info(_model_log, message)
        return torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    if fsdp:  # serial: the model on the device, unsharded
        return model
    if kwargs:
        raise TypeError(
            f"auto_model() got keyword arguments {sorted(kwargs)} that only apply to "
            f"DistributedDataParallel, but the active model is {model_name!r} with {world} rank(s)."
        )
    if model_name == "horovod-dist":
        import horovod.torch as hvd

        _info(
            _model_log, "Broadcast the initial variable states from rank 0 to all other processes"
        )
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    elif data_parallel and torch.cuda.device_count() > 1 and model_name == "serial":
        _info(_model_log, "Apply torch DataParallel on model")
        return torch.nn.DataParallel(model)
    return model


def auto_optim(optimizer: torch.optim.Optimizer, **kwargs: Any) -> torch.optim.Optimizer:
    """Adapt ``optimizer`` to the active backend.

    - Horovod: ``hvd.DistributedOptimizer(optimizer, **kwargs)`` with its state broadcast
      from rank 0;
    - XLA: ``step()`` goes through ``xm.optimizer_step`` (reduces gradients across replicas);
    - otherwise the optimizer is returned unchanged (DDP reduces the gradients; FSDP2's
      sharded parameters are DTensors that torch's optimizers step as they are).

    Raises:
        ValueError: the optimizer holds parameters that ``auto_model(strategy="fsdp")``
            replaced with sharded ones (it was built before ``auto_model``).
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    stale = [p for p in params if was_replaced(p)]
    if stale:
        raise ValueError(
            f"auto_optim() got an optimizer over {len(stale)} parameter(s) that "
            "auto_model(strategy='fsdp') replaced with sharded ones, so stepping it would not "
            "train the model; build the optimizer from the returned model's parameters()."
        )
    model_name = _api.model_name()
    if model_name == "horovod-dist":
        import horovod.torch as hvd

        named = [(f"param{i}", p) for i, p in enumerate(params)]  # unique across groups
        kwargs.setdefault("named_parameters", named)
        wrapped = hvd.DistributedOptimizer(optimizer, **kwargs)
        hvd.broadcast_optimizer_state(wrapped, root_rank=0)
        return wrapped  # type: ignore[no-any-return]
    if kwargs:
        raise TypeError(
            f"auto_optim() got keyword arguments {sorted(kwargs)}; they only apply to "
            f"Horovod's DistributedOptimizer, and the active model is {model_name!r}."
        )
    if model_name == "xla-dist":
        return _XlaOptimizer(optimizer)
    return optimizer


class _XlaOptimizer(torch.optim.Optimizer):
    """Steps the wrapped optimizer through ``xm.optimizer_step`` (gradients reduced across
    replicas first); shares its parameter groups and state."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.wrapped = optimizer
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.defaults = optimizer.defaults

    def step(self, closure: Any = None) -> Any:
        import torch_xla.core.xla_model as xm

        return xm.optimizer_step(self.wrapped, optimizer_args={"closure": closure})

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.wrapped.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.wrapped.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wrapped.load_state_dict(state_dict)


def auto_dataloader(dataset: Dataset[Any], **kwargs: Any) -> DataLoader[Any] | Any:
    """A DataLoader that gives each process its own shard of ``dataset``.

    With several processes: a ``DistributedSampler`` (or ``DistributedProxySampler``
    around your own ``sampler``), ``batch_size`` and ``num_workers`` split across the
    processes, ``pin_memory`` on CUDA; under XLA the loader is an ``MpDeviceLoader``.

    Args:
        dataset: a map-style dataset (an IterableDataset must shard itself).
        kwargs: DataLoader arguments. ``batch_size`` is the **global** batch size (each of
            the W processes loads ``batch_size // W`` per step; a warning says so when it
            does not divide); ``num_workers`` is per machine (split across its processes).
    """
    _require_context("auto_dataloader")
    world, rank = _api.get_world_size(), _api.get_rank()
    if world > 1:
        if "batch_size" in kwargs:
            kwargs["batch_size"] = _split(kwargs["batch_size"], world)
        if "num_workers" in kwargs:
            per_node = _api.get_nproc_per_node()
            kwargs["num_workers"] = (kwargs["num_workers"] + per_node - 1) // per_node
        if "batch_sampler" in kwargs:  # it chooses the indices: nothing to shard here
            warnings.warn(
                "Found batch_sampler in provided kwargs: auto_dataloader uses it as given, so "
                f"make sure it gives each of the {world} processes its own batches (e.g. "
                "wrap a DistributedSampler in a BatchSampler).",
                UserWarning,
                stacklevel=2,
            )
        elif isinstance(dataset, IterableDataset):
            _info(
                _loader_log,
                "Found iterable dataset, dataloader will be created without any distributed "
                "sampling. Please, make sure that the dataset itself produces different data on "
                "different ranks.",
            )
        else:
            sampler = kwargs.get("sampler")
            if sampler is None:
                kwargs["sampler"] = DistributedSampler(
                    dataset,
                    num_replicas=world,
                    rank=rank,
                    shuffle=kwargs.pop("shuffle", True),
                    drop_last=kwargs.get("drop_last", False),
                )
            elif isinstance(sampler, DistributedSampler):
                _check_distributed_sampler(sampler, world, rank)
            else:
                kwargs["sampler"] = DistributedProxySampler(sampler, num_replicas=world, rank=rank)
            kwargs.pop("shuffle", None)
    kwargs.setdefault("pin_memory", _api.device().type == "cuda")  # False: DataLoader's default
    _info(
        _loader_log,
        f"Use data loader kwargs for dataset '{repr(dataset)[:20].strip()}': \n\t{kwargs}",
    )
    loader: DataLoader[Any] = DataLoader(dataset, **kwargs)
    if _api.model_name() == "xla-dist":  # batches go to the XLA device, as the model does
        import torch_xla.distributed.parallel_loader as pl

        _info(_loader_log, "DataLoader is wrapped by `MpDeviceLoader` on XLA")
        return pl.MpDeviceLoader(loader, _api.device())
    return loader


def _require_context(what: str) -> None:
    """DistributedError when a launcher started several processes but none is initialized:
    each would otherwise train alone on its share of the data, without a word."""
    if _api.model_name() == "serial" and _api.get_world_size() > 1:
        raise DistributedError(
            f"{what}: this process is rank {_api.get_rank()} of {_api.get_world_size()} "
            "started by a launcher, but no distributed context is initialized. Call "
            "idist.initialize(backend) first (or use idist.Parallel)."
        )


def _check_distributed_sampler(sampler: DistributedSampler[Any], world: int, rank: int) -> None:
    """Warn, naming both values, when ``sampler`` shards for another rank or world size."""
    if sampler.rank != rank:
        warnings.warn(
            f"Found distributed sampler with rank={sampler.rank}, but process rank is {rank}: "
            f"this process reads rank {sampler.rank}'s shard. Make it with rank={rank}.",
            UserWarning,
            stacklevel=3,
        )
    if sampler.num_replicas != world:
        warnings.warn(
            f"Found distributed sampler with num_replicas={sampler.num_replicas}, but world "
            f"size is {world}: the shards overlap or miss samples. Make it with "
            f"num_replicas={world}.",
            UserWarning,
            stacklevel=3,
        )


def _split(value: object, world: int) -> int | None:
    """The global batch size ``value`` split across ``world`` processes (None: no automatic
    batching, nothing to split); ValueError unless an int >= 1 (ArgumentTypeError, a
    TypeError too, for a str, ...)."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        error = ValueError if isinstance(value, (int, float)) else ArgumentTypeError
        raise error(
            f"auto_dataloader(batch_size={value!r}): the global batch size must be an int >= 1, "
            "or None for no automatic batching."
        )
    each = max(value // world, 1)
    if value % world:
        warnings.warn(
            f"batch_size={value} is the global batch size and does not divide by the {world} "
            f"processes: each loads {each} per step, {each * world} in all. Pass a multiple "
            f"of {world} to keep it.",
            UserWarning,
            stacklevel=3,
        )
    return each


class DistributedProxySampler(DistributedSampler[Any]):
    """Shard the indices of any sampler (weighted, custom, ...) across processes.

    ``sampler`` has a ``__len__`` and is not already distributed. Each epoch its indices are
    repeated to a multiple of ``num_replicas`` (default: the world size) and process ``rank``
    (default: this one) takes every ``num_replicas``-th index from ``rank`` on. Call
    ``set_epoch`` each epoch as with DistributedSampler.
    """

    def __init__(
        self, sampler: Sampler[Any], num_replicas: int | None = None, rank: int | None = None
    ) -> None:
        if not isinstance(sampler, Sampler):
            raise TypeError(
                "Argument sampler should be instance of torch Sampler, but given "
                f"{type(sampler).__name__}: pass a Sampler such as RandomSampler(dataset)."
            )
        if isinstance(sampler, DistributedSampler):
            raise TypeError(
                "Argument sampler must not be a distributed sampler already: pass the "
                "DistributedSampler to the DataLoader as is."
            )
        if not hasattr(sampler, "__len__"):
            raise TypeError(
                f"Argument sampler should have length, but {type(sampler).__name__} has no "
                "__len__: define it (the proxy splits a fixed number of indices)."
            )
        num_replicas = _api.get_world_size() if num_replicas is None else num_replicas
        rank = _api.get_rank() if rank is None else rank
        super().__init__(sampler, num_replicas=num_replicas, rank=rank, shuffle=False)  # type: ignore[arg-type]
        self.sampler = sampler

    def __iter__(self) -> Iterator[Any]:
        torch.manual_seed(self.epoch)  # as ignite: random samplers differ per epoch
        indices: list[Any] = []
        while len(indices) < self.total_size:
            more = list(self.sampler)
            if not more:  # repeating it would loop for ever
                raise ValueError(
                    f"{type(self.sampler).__name__} yielded no indices, but its len() is "
                    f"{len(self.sampler)}: make its __iter__ give the indices its __len__ counts."
                )
            indices += more
        return iter(indices[self.rank : self.total_size : self.num_replicas])
