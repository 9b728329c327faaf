"""NativeModel: torch.distributed with the nccl, gloo or mpi backend.

Where a process sits in the job (local rank, processes per node, nodes) comes
from the launcher's environment (``distbridge.environments``). Only when the
environment does not say, ``initialize`` asks the peers once, through the
store; adopting a context never communicates.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from typing_extensions import Self, override

from distbridge import environments
from distbridge._types import SpawnResult
from distbridge.algorithms.carriers import UNCARRIED_BY_C10D
from distbridge.algorithms.fold import all_reduce_by_fold
from distbridge.algorithms.groups import not_a_group
from distbridge.errors import DistributedError
from distbridge.launch.native import spawn_native
from distbridge.models._accelerator import backend_device_types
from distbridge.models._default_group import default_pg as _default_pg
from distbridge.models._failing_together import FailingTogether
from distbridge.models._layout import Layout, layout_from_env, restore_env
from distbridge.models.base import ComputationModel
from distbridge.models.native import flight_recorder, ops
from distbridge.models.native.backends import (
    NativeBackends,
    available_backends,
    backend_of,
    backend_problem,
    check_group_options,
    device_for,
    nccl_gpu_problem,
    optional_argument,
)
from distbridge.models.native.init import as_timeout, join_job
from distbridge.reliability import coordination, fail_together
from distbridge.reliability.connections import Connections

__all__ = ["NativeModel"]

_CPU = torch.device("cpu")
_INIT_KWARGS = ("timeout", "init_method", "rank", "world_size", "debug")
_SLOT_BROADCAST_BYTES = 1 << 20  # above this, gloo gathers objects by broadcasts (less memory)
SPAWN_OPTIONS = (
    "nnodes", "node_rank", "master_addr", "master_port", "init_method", "timeout",
    "start_method", "job_timeout", "join", "tag_output", "output_ranks",
)  # fmt: skip


class NativeModel(ComputationModel):
    """torch.distributed: nccl, gloo or mpi."""

    name: ClassVar[str] = "native-dist"
    backends: ClassVar[tuple[str, ...]] = NativeBackends()  # type: ignore[assignment]
    priority: ClassVar[int] = 0
    uncarried_dtypes: ClassVar[frozenset[torch.dtype]] = UNCARRIED_BY_C10D
    functional_collectives: ClassVar[bool] = True
    spawn_options: ClassVar[tuple[str, ...]] = SPAWN_OPTIONS
    spawn_takes_activate: ClassVar[bool] = True
    together: FailingTogether

    def __init__(
        self,
        backend: str,
        layout: Layout,
        *,
        env_set: Mapping[str, str | None] | None = None,
        connections: Connections | None = None,
    ) -> None:
        super().__init__()
        self._backend = backend
        # Held weakly: a destroyed group must be freed at once (gloo's destructor joins its
        # threads; run at interpreter exit instead, it can abort the process).
        self._pg = weakref.ref(_default_pg())
        self._layout = layout
        self._env_restore = dict(env_set or {})
        self._emulated: set[str] = set()  # ops this backend refused; the base class emulates them
        self._connections = connections or Connections()  # cut when this rank fails
        self._device = device_for(backend, layout)
        self._device_types = backend_device_types(backend)  # what its collectives take
        self._takes_cpu = "cpu" in self._device_types
        # The ReduceOp of (dtype, op) on this backend; None: folded from an all-gather (NCCL
        # has no bitwise ones). One rule for all_reduce, reduce and reduce_scatter.
        self._torch_ops = ops.torch_ops(backend)
        # The failure note and the peers' "left" marks live in the default group's store, so
        # an adopted context reads them too; initialize starts the rest (see from_backend).
        self.together = FailingTogether(self, coordination.default_store)

    # ---- class level -----------------------------------------------------------------------

    @classmethod
    @override
    def is_available(cls) -> bool:
        return dist.is_available()

    @classmethod
    @override
    def available_backends(cls) -> tuple[str, ...]:
        return available_backends()

    @classmethod
    @override
    def unavailable_reason(cls, backend: str) -> str | None:
        return backend_problem(backend)

    @classmethod
    @override
    def has_context(cls) -> bool:
        return _default_pg() is not None

    @classmethod
    @override
    def from_context(cls) -> Self | None:
        if not cls.has_context():
            return None
        backend = backend_of(None)
        if backend is None:
            return None
        rank, world = dist.get_rank(), dist.get_world_size()
        return cls(backend, layout_from_env(environments.detect(), rank, world))

    @classmethod
    @override
    def from_backend(cls, backend: str, **kwargs: Any) -> Self:
        debug = cls._check_init(backend, kwargs, _INIT_KWARGS)
        if dist.is_initialized():
            raise DistributedError(
                f"torch.distributed is already initialized (backend "
                f"{dist.get_backend()!r}); call distbridge.finalize() before initialize()."
            )
        connections = Connections()  # gloo's; NCCL and MPI abort by their own means
        with connections.opening(fail_together.store_ports, backend == "gloo"):
            layout, env_set = join_job(
                backend,
                timeout=as_timeout(kwargs.get("timeout")),
                init_method=optional_argument("init_method", kwargs.get("init_method"), str, 0),
                rank=optional_argument("rank", kwargs.get("rank"), int, 0),
                world_size=optional_argument("world_size", kwargs.get("world_size"), int, 1),
            )
        model = cls(backend, layout, env_set=env_set, connections=connections)
        if layout.world_size > 1:  # a failure here or on a peer ends the others' collectives
            model.together.start(model.abort_communicator)
        return model._set_debug(debug)

    @classmethod
    @override
    def _launcher(cls, options: dict[str, Any]) -> Callable[..., SpawnResult]:
        if options.get("backend") == "nccl":
            return functools.partial(spawn_native, gpu_problem=nccl_gpu_problem)
        return spawn_native

    # ---- queries -----------------------------------------------------------------------------

    @override
    def is_current(self) -> bool:
        live = _default_pg()
        return live is not None and live is self._pg()

    @override
    def backend(self) -> str | None:
        return self._backend

    @override
    def finalize(self) -> None:
        current = self.is_current()
        self.together.leave(current)
        if current:
            dist.destroy_process_group()
        restore_env(self._env_restore)
        self._env_restore.clear()
        super().finalize()

    @override
    def abort_communicator(self) -> None:
        fail_together.abort_communicator(self._backend, self._connections)

    # ---- primitives --------------------------------------------------------------------------

    @override
    def _native_avg(self) -> bool:
        return self._backend == "nccl"

    @override
    def _collective_device(self) -> torch.device:
        return _CPU if self._takes_cpu else self._device

    @override
    def _placement(self, tensor: torch.Tensor) -> torch.device:
        if not self._takes_cpu:
            return self._device
        return tensor.device if tensor.device.type in self._device_types else _CPU

    @override
    def _do_all_reduce(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        torch_op = self._torch_ops[tensor.dtype, op]
        if torch_op is None:
            return tensor.copy_(all_reduce_by_fold(self, tensor, op, group))
        dist.all_reduce(tensor, op=torch_op, group=group)
        return tensor

    @override
    def _do_all_gather(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        size = self._group_size(group)
        out = tensor.new_empty((size * tensor.shape[0], *tensor.shape[1:]))
        ops.all_gather_single(out, tensor, group=group)
        return out

    @override
    def _do_broadcast(self, tensor: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        dist.broadcast(tensor, src=src, group=group)
        return tensor

    @override
    def _do_all_gather_into(self, out: torch.Tensor, tensor: torch.Tensor, group: Any) -> None:
        slot = tensor.numel()
        if self._backend != "gloo" or slot * tensor.element_size() < _SLOT_BROADCAST_BYTES:
            ops.all_gather_single(out, tensor, group=group)  # NCCL: in place when tensor is a slot
            return
        # gloo's all-gather stages the whole output in a scratch buffer of its own (measured:
        # world x slot extra bytes); one broadcast per member writes into ``out`` directly.
        me = self._group_rank(group)
        mine = out[me * slot : (me + 1) * slot]
        if mine.data_ptr() != tensor.data_ptr():
            mine.copy_(tensor)
        for index, member in enumerate(self._group_members(group)):
            dist.broadcast(out[index * slot : (index + 1) * slot], src=member, group=group)

    @override
    def _object_transport(self, group: Any) -> tuple[Any, torch.device]:
        if self._takes_cpu:
            return group, _CPU
        # Objects never travel through accelerator memory: a gloo group over the same ranks.
        ranks = self._group_members(group)
        return self.groups.get(ranks, backend="gloo"), _CPU

    @override
    def _do_reduce(self, tensor: torch.Tensor, dst: int, op: str, group: Any) -> torch.Tensor:
        torch_op = self._torch_ops[tensor.dtype, op]
        if torch_op is None:  # folded from an all-gather, as all_reduce does
            return self._do_all_reduce(tensor, op, group)
        dist.reduce(tensor, dst=dst, op=torch_op, group=group)
        return tensor

    @override
    def _do_gather(self, tensor: torch.Tensor, dst: int, group: Any) -> list[torch.Tensor] | None:
        is_dst = self._layout.rank == dst
        sent = torch.view_as_real(tensor) if tensor.is_complex() else tensor  # gloo: no complex
        parts = [torch.empty_like(sent) for _ in range(self._group_size(group))] if is_dst else None
        dist.gather(sent, gather_list=parts, dst=dst, group=group)
        if parts is None or sent is tensor:
            return parts
        return [torch.view_as_complex(p) for p in parts]

    @override
    def _do_scatter(
        self, chunks: list[torch.Tensor] | None, out: torch.Tensor, src: int, group: Any
    ) -> torch.Tensor:
        dist.scatter(out, scatter_list=chunks, src=src, group=group)
        return out

    @override
    def _do_reduce_scatter(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        torch_op = self._torch_ops[tensor.dtype, op]  # None: the emulation, over all_reduce
        if "reduce_scatter" not in self._emulated and torch_op is not None:
            out = tensor.new_empty((tensor.shape[0] // self._group_size(group), *tensor.shape[1:]))
            try:
                ops.reduce_scatter_single(out, tensor, op=torch_op, group=group)
                return out
            except RuntimeError as err:
                self._fall_back("reduce_scatter", err)
        return super()._do_reduce_scatter(tensor, op, group)

    @override
    def _do_all_to_all(
        self, data: torch.Tensor, in_splits: list[int], out_splits: list[int], group: Any
    ) -> torch.Tensor:
        if "all_to_all" not in self._emulated:
            out = data.new_empty(sum(out_splits))
            try:
                dist.all_to_all_single(out, data, out_splits, in_splits, group=group)
                return out
            except RuntimeError as err:
                self._fall_back("all_to_all", err)
        return super()._do_all_to_all(data, in_splits, out_splits, group)

    @override
    def _do_all_to_all_even(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        if "all_to_all" not in self._emulated:  # no flat view, no view back: each costs
            out = torch.empty_like(tensor)
            try:
                dist.all_to_all_single(out, tensor, group=group)
                return out
            except RuntimeError as err:
                self._fall_back("all_to_all", err)
        return super()._do_all_to_all_even(tensor, group)

    def _fall_back(self, op: str, err: RuntimeError) -> None:
        """Emulate ``op`` from now on if the backend refused it. Backends refuse an op they
        lack before communicating, on every rank alike, so falling back keeps ranks in step;
        any other error is re-raised."""
        if "does not support" not in str(err) and "not supported" not in str(err):
            raise err
        self._emulated.add(op)

    @override
    def _make_coordination_store(self) -> Any | None:
        # The default group's own store; MPI rendezvous without one: rank 0 hosts a TCPStore.
        return coordination.job_store(
            self._layout.rank,
            self._layout.nnodes,
            coordination.default_store(),
            lambda tensor: self._do_broadcast(tensor, 0, None),
        )

    @override
    def _engine_trace(self, limit: int) -> dict[str, Any] | None:
        return flight_recorder.tail_of(self._pg(), limit)  # gloo; NCCL with its trace buffer

    @override
    def _do_barrier(self, group: Any) -> None:
        self._do_barrier_with(group, False, None)

    @override
    def _do_barrier_with(self, group: Any, async_op: bool, device_ids: list[int] | None) -> Any:
        """torch's barrier; ``device_ids`` reach backends that communicate accelerator tensors
        only (NCCL, XCCL: the others have no devices to name), which default to this rank's."""
        if self._takes_cpu:
            device_ids = None
        elif device_ids is None:
            device_ids = [self._layout.local_rank]
        return dist.barrier(group=group, async_op=async_op, device_ids=device_ids)

    @override
    def _make_group(self, ranks: tuple[int, ...], **kwargs: Any) -> Any:
        check_group_options(kwargs)
        gloo = kwargs.get("backend", self._backend) == "gloo"
        with self._connections.opening(fail_together.store_ports, gloo):
            return dist.new_group(ranks=list(ranks), **kwargs)

    @override
    def _check_group(self, group: object) -> None:
        if not isinstance(group, dist.ProcessGroup) and group != dist.GroupMember.NON_GROUP_MEMBER:
            raise not_a_group(group)

    @override
    def _group_rank(self, group: Any) -> int:
        if group is None:
            return self._layout.rank
        if not isinstance(group, dist.ProcessGroup):  # GroupMember.NON_GROUP_MEMBER
            return -1
        return dist.get_rank(group)

    @override
    def _group_members(self, group: Any) -> tuple[int, ...]:
        if group is None:
            return tuple(range(self._layout.world_size))
        return tuple(dist.get_process_group_ranks(group))
