"""HorovodModel: Horovod's collectives (Gloo or MPI controller), with groups as process sets.

Horovod is imported only inside methods, so ``import distbridge`` never loads it. Where a
process sits (rank, local rank, nodes) comes from Horovod itself. Horovod lacks some dtypes
and the bitwise reductions; they are carried exactly here: narrow types are widened,
unsigned ones go through ``carriers``, complex sums reduce their real view, and AND / OR
(and a complex PRODUCT) fold an all-gather. Every operation carries an explicit name, so
ranks that sit out a group's operations never disagree with the others about the next name.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from typing_extensions import Self, override

from distbridge._types import SpawnResult
from distbridge.algorithms import byte_view, carriers
from distbridge.algorithms.fold import all_reduce_by_fold
from distbridge.algorithms.groups import not_a_group
from distbridge.errors import BackendUnavailableError, DistributedError
from distbridge.launch.horovod import spawn_horovod
from distbridge.models._engine_state import engines
from distbridge.models._failing_together import FailingTogether
from distbridge.models._layout import Layout, restore_env, visible_gpus
from distbridge.models.base import ComputationModel
from distbridge.models.horovod import dtypes as hvd_dtypes
from distbridge.models.horovod.dtypes import alltoall
from distbridge.models.horovod.runtime import (
    DYNAMIC_VAR,
    hvd_module,
    mpi_outlives_shutdown,
    set_init_environ,
    unavailable,
)
from distbridge.reliability import coordination

__all__ = ["HorovodModel"]

_CPU = torch.device("cpu")
_INIT_KWARGS = ("comm", "process_sets", "debug")
SPAWN_OPTIONS = ("hosts", "nnodes", "node_rank", "job_timeout", "start_timeout", "verbose")


class HorovodModel(ComputationModel):
    """Horovod: backend ``"horovod"``, model name ``"horovod-dist"``."""

    name: ClassVar[str] = "horovod-dist"
    context_module: ClassVar[str | None] = "horovod.torch"  # no context before its import
    backends: ClassVar[tuple[str, ...]] = ("horovod",)
    priority: ClassVar[int] = 20  # a Horovod job may also hold a torch process group
    spawn_options: ClassVar[tuple[str, ...]] = SPAWN_OPTIONS
    spawn_takes_activate: ClassVar[bool] = True
    reduce_ops: ClassVar[frozenset[str]] = frozenset(
        ("SUM", "PRODUCT", "MIN", "MAX", "AND", "OR", "AVG", "ADASUM")
    )

    def __init__(self, layout: Layout) -> None:
        super().__init__()
        hvd = hvd_module()
        self._hvd = hvd
        self._ops = {name: getattr(hvd, attr) for name, attr in hvd_dtypes.HVD_OPS.items()}
        self._world_set = hvd.global_process_set
        self._is_initialized = hvd.is_initialized
        self._mpi_ops = sys.modules["horovod.torch.mpi_ops"]
        self._token = self._mpi_ops._handle_map  # a new dict on every hvd.init()
        self._layout = layout
        self._device = layout.device(visible_gpus())

    # ---- class level -----------------------------------------------------------------------

    @classmethod
    @override
    def is_available(cls) -> bool:
        return unavailable() is None

    @classmethod
    @override
    def unavailable_reason(cls, backend: str) -> str | None:
        if backend not in cls.backends:
            return f"{cls.__name__} runs only {', '.join(cls.backends)}"
        return unavailable()

    @classmethod
    @override
    def has_context(cls) -> bool:
        module = sys.modules.get("horovod.torch")  # never imports horovod
        return module is not None and bool(module.is_initialized())

    @classmethod
    @override
    def from_context(cls) -> Self | None:
        if not cls.has_context():
            return None
        hvd = hvd_module()
        layout = Layout(
            rank=hvd.rank(),
            world_size=hvd.size(),
            local_rank=hvd.local_rank(),
            nproc_per_node=hvd.local_size(),
            nnodes=hvd.cross_size(),
            node_rank=hvd.cross_rank(),
        )
        return cls(layout)

    @classmethod
    @override
    def from_backend(cls, backend: str, **kwargs: Any) -> Self:
        debug = cls._check_init(backend, kwargs, _INIT_KWARGS, " (passed to hvd.init)")
        hvd = hvd_module()
        if hvd.is_initialized():
            raise DistributedError(
                "Horovod is already initialized (hvd.init() was called); call "
                "distbridge.finalize() before initialize('horovod'), or just use it as it is."
            )
        if engines.mpi_finalized:
            raise DistributedError(
                "Horovod cannot start again in this process: its MPI controller finalized MPI "
                "at finalize(), and MPI starts only once. Install mpi4py (distbridge then "
                "starts MPI so that it outlives finalize()), or initialize only once."
            )
        mpi_outlives_shutdown(hvd)  # under mpirun: MPI started by mpi4py outlives shutdown
        previous = set_init_environ()  # read by hvd.init(), restored right after
        try:
            hvd.init(comm=kwargs.get("comm"), process_sets=kwargs.get("process_sets"))
        except ValueError as err:
            raise DistributedError(f"hvd.init() failed: {err}") from err
        finally:
            restore_env(previous)
        model = cls.from_context()
        if model is None:  # pragma: no cover - hvd.init() returned without a context
            raise DistributedError("hvd.init() returned but Horovod is not initialized.")
        if model._device.type == "cuda":
            torch.cuda.set_device(model._device)
        if model.get_world_size() > 1:
            # Make the coordination store now (one broadcast: every rank initializes here),
            # so that a rank that fails later has somewhere to leave its note; then let an
            # uncaught exception leave one and shut Horovod down, and watch for a peer's. A
            # failing rank's shutdown, which every rank's engine agrees on, is what ends the
            # others' collectives: Horovod errors with "Horovod has been shut down", and
            # `fail_together.peer_failure` names the rank from the note. A context adopted
            # from ``hvd.init()`` has no store from the start and keeps Horovod's own behaviour.
            model._coordination_store()
            model.together = FailingTogether(model, model._coordination_store)
            model.together.start(model._hvd.shutdown)
        return model._set_debug(debug)

    @classmethod
    @override
    def _launcher(cls, options: dict[str, Any]) -> Callable[..., SpawnResult]:
        options.pop("backend", None)  # spawn_horovod takes none: Horovod is the backend
        reason = unavailable()
        if reason is not None:
            raise BackendUnavailableError(f"Backend 'horovod' is not available: {reason}.")
        return spawn_horovod

    # ---- queries -----------------------------------------------------------------------------

    @override
    def is_current(self) -> bool:
        return self._mpi_ops._handle_map is self._token and bool(self._is_initialized())

    @override
    def backend(self) -> str | None:
        return "horovod"

    @override
    def finalize(self) -> None:
        current = self.is_current()
        if self.together is not None:  # before the shutdown: the peers learn why it left
            self.together.leave(current)
        if current:
            if self._hvd.mpi_enabled() and not mpi_outlives_shutdown(self._hvd):
                engines.mpi_finalized = True  # hvd.shutdown() ends MPI for this process
            self._hvd.shutdown()
        super().finalize()

    @override
    def abort_communicator(self) -> None:
        """Nothing to do: by the time a peer's failure shows here, Horovod's shutdown (which
        every rank's engine agrees on) has already stopped this rank's engine. Shutting it
        down here too would make ``hvd.is_initialized()`` false, and the facade would fall
        back to the serial model for this rank's later calls."""

    # ---- primitives --------------------------------------------------------------------------

    @override
    def _native_avg(self) -> bool:
        return True

    @override
    def _placement(self, tensor: torch.Tensor) -> torch.device:
        return tensor.device if tensor.device.type in ("cpu", "cuda") else _CPU

    def _set(self, group: Any) -> Any:
        return self._world_set if group is None else group

    @override
    def _do_all_reduce(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        dtype = tensor.dtype
        if op == "ADASUM":
            world = self._layout.world_size
            whole = group is None or self._group_size(group) == world
            hvd_dtypes.check_adasum(dtype, whole, world, self._hvd.mpi_enabled())
        if op in ("AND", "OR") and dtype is torch.bool:  # widened below: AND is MIN, OR MAX
            op = "MIN" if op == "AND" else "MAX"
        elif op in ("AND", "OR"):
            return all_reduce_by_fold(self, tensor, op, group)
        if dtype in hvd_dtypes.REDUCED:
            return self._reduce(tensor, op, group)
        if dtype.is_complex:
            if op == "PRODUCT":
                return all_reduce_by_fold(self, tensor, op, group)
            self._do_all_reduce(torch.view_as_real(tensor), op, group)  # in place
            return tensor
        if dtype in carriers.UNCARRIED_BY_C10D:
            carrier, back = carriers.integer_carrier(tensor, op)
            return back(self._reduce(carrier, op, group))
        wider = hvd_dtypes.WIDER.get(dtype)
        if wider is None:
            raise TypeError(
                f"Horovod cannot reduce dtype {dtype}; convert the tensor to float32 or int64 "
                "before all_reduce."
            )
        return self._reduce(tensor.to(wider), op, group).to(dtype)

    def _reduce(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        ps = self._set(group)
        name = f"distbridge.allreduce.{ps.process_set_id}"
        self._hvd.allreduce_(tensor, name=name, op=self._ops[op], process_set=ps)
        return tensor

    @override
    def _do_all_gather(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        ps = self._set(group)
        ops = self._mpi_ops
        name = f"distbridge.allgather.{ps.process_set_id}"
        # Rows may differ between ranks (ragged), as Horovod allows.
        sent = hvd_dtypes.as_sent(tensor)
        out: torch.Tensor = ops.synchronize(ops.allgather_async(sent, name, ps))
        return hvd_dtypes.as_received(out, tensor)

    @override
    def _do_reduce_scatter(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        # hvd.reducescatter sums or averages (floats only: check_reducible refuses integer
        # ones) the dtypes Horovod reduces; the base class emulates the rest over _do_all_reduce.
        if tensor.dtype not in hvd_dtypes.REDUCED or op not in ("SUM", "AVG"):
            return super()._do_reduce_scatter(tensor, op, group)
        ps = self._set(group)
        name = f"distbridge.reducescatter.{ps.process_set_id}"
        out: torch.Tensor = self._hvd.reducescatter(
            tensor, name=name, op=self._ops[op], process_set=ps
        )
        return out

    @override
    def _do_broadcast(self, tensor: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        ps = self._set(group)
        moved = tensor.dtype in hvd_dtypes.MOVED
        work = tensor if moved else byte_view.as_bytes(tensor)
        name = f"distbridge.broadcast.{ps.process_set_id}.{src}"
        self._hvd.broadcast_(work, root_rank=src, name=name, process_set=ps)
        if moved or tensor.is_contiguous():  # as_bytes gave a view: tensor holds the bytes
            return tensor
        return byte_view.from_bytes(work, tensor.dtype, tuple(tensor.shape))

    @override
    def _do_all_to_all(
        self, data: torch.Tensor, in_splits: list[int], out_splits: list[int], group: Any
    ) -> torch.Tensor:
        # One element a row: Horovod refuses rows of different shapes across ranks. The even
        # all-to-all is the base class's, over this one, so that a rank that sends
        # x.chunk(n) and one that sends another list of the same sizes agree.
        return alltoall(self._hvd, self._set(group), data.reshape(-1, 1), in_splits).reshape(-1)

    @override
    def _do_gather(self, tensor: torch.Tensor, dst: int, group: Any) -> list[torch.Tensor] | None:
        to_dst = [int(rank == dst) for rank in self._group_members(group)]
        rows = alltoall(self._hvd, self._set(group), tensor.unsqueeze(0), to_dst, "gather")
        return list(rows.unbind(0)) if self._layout.rank == dst else None

    @override
    def _do_scatter(
        self, chunks: list[torch.Tensor] | None, out: torch.Tensor, src: int, group: Any
    ) -> torch.Tensor:
        size = self._group_size(group)
        if chunks is None:  # not the source: sends nothing, gets one row
            sent, splits = out.new_empty((0, *out.shape)), [0] * size
        else:
            sent, splits = torch.stack(chunks), [1] * size
        return alltoall(self._hvd, self._set(group), sent, splits, "scatter")[0]

    @override
    def _make_coordination_store(self) -> Any | None:
        # Rank 0 hosts a TCPStore; one broadcast (inside the collective call that first needs
        # the store, made by every rank) tells the others where. Under horovodrun, rank 0's
        # address is the one on its route to the rendezvous server all hosts reach.
        toward = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")
        address = coordination.reachable_address(self._layout.nnodes, toward)
        return coordination.host_store(
            self._layout.rank, address, lambda t: self._do_broadcast(t, 0, None)
        )

    @override
    def _do_barrier(self, group: Any) -> None:
        self._hvd.barrier(process_set=self._set(group))

    @override
    def _make_group(self, ranks: tuple[int, ...], **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(
                f"new_group() got unexpected keyword arguments {sorted(kwargs)}; Horovod "
                "process sets take only ranks."
            )
        for set_id, members in self._mpi_ops._basics._get_process_set_ids_and_ranks().items():
            if tuple(members) == ranks:  # made at hvd.init() or earlier: reuse it
                if set_id == 0:
                    return self._world_set
                existing = self._hvd.ProcessSet(list(ranks))
                existing.process_set_id = set_id
                return existing
        try:
            return self._hvd.add_process_set(list(ranks))
        except ValueError as err:
            if DYNAMIC_VAR not in str(err):
                raise
            raise NotImplementedError(
                f"new_group({list(ranks)}) needs Horovod's dynamic process sets, and this job "
                "called hvd.init() without them: call hvd.init(process_sets='dynamic') (as "
                "distbridge.initialize('horovod') does), or create the set at init with "
                f"hvd.init(process_sets=[hvd.ProcessSet({list(ranks)})])."
            ) from err

    @override
    def _check_group(self, group: object) -> None:
        if not isinstance(group, self._hvd.ProcessSet) or group.process_set_id is None:
            raise not_a_group(group)  # or a ProcessSet registered with Horovod
