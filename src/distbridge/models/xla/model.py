"""XlaModel: PyTorch/XLA (TPU pods and any PJRT device), backend ``"xla-tpu"``.

torch_xla is imported inside methods only (``import distbridge`` neither pays its import
time nor allocates its runtime); availability comes from ``importlib.util.find_spec`` and the
installed versions, and an import that fails makes the backend unavailable, saying why. The
layout comes from ``torch_xla.runtime``, once; one replica per process (threads are refused).

Every value arrives exactly, whatever the device stores:

- gathers and broadcasts move raw bytes: torch_xla 2.9's all_gather adds a float token to
  the data (-0.0 becomes 0.0; after one NaN every later gather is NaN), and its
  collective_broadcast multiplies by 0 (NaN * 0 is NaN);
- a CPU tensor is reduced on the device in its own dtype only when a round trip through the
  device returns it bit for bit (probed once per dtype): float64 on a TPU, int64 under
  ``XLA_USE_32BIT_LONG`` or complex128 (whose imaginary part torch_xla 2.9 drops) are not;
- what XLA cannot reduce (those dtypes; AND/OR on integers; float8; bfloat16 on the XLA CPU
  device) is all-gathered and folded on the CPU in rank order: the same bits on every rank.

Lines that only run with several replicas (the XLA CPU device cannot replicate) end with
``# several replicas only``; their tests carry the ``xla_replicas`` marker.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from typing_extensions import Self, override

from distbridge._types import SpawnResult
from distbridge.algorithms import byte_view
from distbridge.algorithms.fold import all_reduce_by_fold
from distbridge.algorithms.groups import not_a_group
from distbridge.errors import BackendUnavailableError, DistributedError
from distbridge.launch.xla import spawn_xla
from distbridge.models._default_group import default_pg as _default_pg
from distbridge.models._engine_state import engines
from distbridge.models._layout import Layout
from distbridge.models.base import ComputationModel
from distbridge.models.xla.dtypes import own_zeros, round_trips
from distbridge.reliability import coordination

__all__ = ["BACKEND", "SPAWN_OPTIONS", "XlaGroup", "XlaModel"]

BACKEND = "xla-tpu"
SPAWN_OPTIONS = ("start_method", "job_timeout", "join", "nnodes", "node_rank")
#: Set by xmp.spawn (and torch_xla's torchrun rendezvous) in every replica it configures.
_SPAWN_MARKER = "PJRT_LOCAL_PROCESS_COUNT"
_CPU = torch.device("cpu")
_XM_OPS = {
    "AVG": "sum",
    "SUM": "sum",
    "PRODUCT": "mul",
    "MIN": "min",
    "MAX": "max",
    "AND": "and",
    "OR": "or",
}
_IMPORT_FAILURE: dict[str, str] = {}  # filled once when importing torch_xla fails


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])  # "2.9.0+cu128": (2, 9)


@functools.cache
def _install_problem() -> str | None:
    """Why torch_xla cannot run here, judged without importing it; None when it looks usable."""
    try:
        spec = importlib.util.find_spec("torch_xla")
    except (ImportError, ValueError) as err:
        return f"importlib cannot look up torch_xla ({type(err).__name__}: {err})"
    if spec is None:
        return "torch_xla is not installed; e.g. pip install torch==2.9.0 torch_xla==2.9.0"
    site = Path(spec.origin).parent.parent if spec.origin else None  # _XLAC*.so lies beside it
    if site is None or not any(site.glob("_XLAC*")):
        return f"torch_xla at {spec.origin} lacks its _XLAC extension; reinstall torch_xla"
    try:
        version = importlib.metadata.version("torch_xla")
    except importlib.metadata.PackageNotFoundError:
        return None  # a source checkout: no release to compare
    if _release(version) != _release(torch.__version__):
        wanted = ".".join(map(str, _release(version)))
        return (
            f"torch_xla {version} needs torch {wanted}.*, but torch {torch.__version__} is "
            f"installed; install a matching pair, e.g. pip install torch=={wanted}.0 "
            f"torch_xla=={wanted}.0"
        )
    return None


def _import_modules() -> tuple[Any, Any, Any]:
    """``(torch_xla, torch_xla.core.xla_model, torch_xla.runtime)``, imported on first use."""
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr
    except Exception as err:  # a broken install fails in many ways (OSError, RuntimeError, ...)
        reason = f"importing torch_xla failed ({type(err).__name__}: {err}); reinstall it"
        _IMPORT_FAILURE.setdefault("reason", reason)
        raise BackendUnavailableError(f"Backend {BACKEND!r} is not available: {reason}.") from err
    return torch_xla, xm, xr


def _on_xla(tensor: torch.Tensor) -> bool:
    return tensor.is_xla  # type: ignore[attr-defined,no-any-return]  # missing from the stubs


@dataclass(frozen=True)
class XlaGroup:
    """A group of global replica ordinals, as ``distbridge.new_group`` returns it."""

    ranks: tuple[int, ...]


class XlaModel(ComputationModel):
    """PyTorch/XLA replicas (``xmp.spawn``, torchrun with the ``xla`` process group)."""

    name: ClassVar[str] = "xla-dist"
    context_module: ClassVar[str | None] = "torch_xla"  # no context before its import
    backends: ClassVar[tuple[str, ...]] = (BACKEND,)
    priority: ClassVar[int] = 10  # an ``xla`` torch.distributed group is XLA's, not native's
    spawn_options: ClassVar[tuple[str, ...]] = SPAWN_OPTIONS
    spawn_takes_activate: ClassVar[bool] = True

    def __init__(self, pg: Any = None) -> None:
        super().__init__()
        torch_xla, self._xm, xr = _import_modules()
        self._sync = torch_xla.sync
        if xr.addressable_device_count() > 1:
            raise DistributedError(
                f"This process drives {xr.addressable_device_count()} XLA devices in threads "
                "(TPU v2/v3 or CPU_NUM_DEVICES > 1), but distbridge runs one replica per "
                "process; use a host with one device per process, or set CPU_NUM_DEVICES=1."
            )
        self._device: torch.device = torch_xla.device()
        self._hw: str = self._xm.xla_device_hw(self._device)
        world, nproc = xr.world_size(), xr.local_device_count()
        self._layout = Layout(
            rank=xr.global_ordinal(),
            world_size=world,
            local_rank=xr.local_ordinal(),
            nproc_per_node=nproc,
            nnodes=max(1, world // nproc),
            node_rank=xr.host_index(),
        )
        self._pg = pg
        self._live = True
        #: whether the device stores a dtype exactly, probed once per dtype
        self._holds: Callable[[torch.dtype], bool] = functools.cache(
            functools.partial(round_trips, device=self._device)
        )

    # ---- class level -----------------------------------------------------------------------

    @classmethod
    @override
    def is_available(cls) -> bool:
        return _install_problem() is None and not _IMPORT_FAILURE

    @classmethod
    @override
    def unavailable_reason(cls, backend: str) -> str | None:
        if backend not in cls.backends:
            return f"{cls.__name__} runs only {', '.join(cls.backends)}"
        return _install_problem() or _IMPORT_FAILURE.get("reason")

    @classmethod
    @override
    def has_context(cls) -> bool:
        if "torch_xla" not in sys.modules:  # no import, no XLA context: the hot path stops here
            return False
        pg = _default_pg()
        if pg is not None:
            return str(dist.get_backend(pg)).lower() == "xla"
        return not engines.xla_left and _SPAWN_MARKER in os.environ

    @classmethod
    @override
    def from_context(cls) -> Self | None:
        return cls(_default_pg()) if cls.has_context() else None

    @classmethod
    @override
    def from_backend(cls, backend: str, **kwargs: Any) -> Self:
        debug = cls._check_init(backend, kwargs, ("debug",), " (the runtime knows the replicas)")
        _, xm, _ = _import_modules()
        if dist.is_initialized():
            raise DistributedError(
                f"torch.distributed is already initialized (backend {dist.get_backend()!r}); "
                f"call distbridge.finalize() before initialize({backend!r})."
            )
        pg = None
        if dist.is_torchelastic_launched():  # torchrun: torch_xla's own rendezvous sets PJRT up
            from torch_xla.distributed import xla_backend  # noqa: F401  (registers "xla")

            dist.init_process_group("xla", init_method="xla://")
            pg = _default_pg()
        try:
            model = cls(pg)
        except BaseException:
            if pg is not None:
                dist.destroy_process_group()
            raise
        engines.xla_left = False
        xm.rendezvous("distbridge.initialize")
        return model._set_debug(debug)

    @classmethod
    @override
    def _launcher(cls, options: dict[str, Any]) -> Callable[..., SpawnResult]:
        return spawn_xla

    # ---- queries -----------------------------------------------------------------------------

    @override
    def is_current(self) -> bool:
        return self._live and _default_pg() is self._pg

    @override
    def backend(self) -> str | None:
        return BACKEND

    @override
    def set_local_rank(self, index: int) -> None:
        pass  # the XLA runtime knows each replica's local ordinal; a hint cannot improve on it

    @override
    def finalize(self) -> None:
        if self._live and self._pg is not None and _default_pg() is self._pg:
            dist.destroy_process_group()
        self._live = False
        engines.xla_left = True
        super().finalize()

    # ---- primitives --------------------------------------------------------------------------

    @override
    def _number_device(self, dtype: torch.dtype) -> torch.device:
        return self._device if self._holds(dtype) else _CPU  # one transfer less

    @override
    def _number_value(self, tensor: torch.Tensor) -> Any:
        if _on_xla(tensor):
            self._sync()  # end the graph first: see _cpu
        return tensor.item()

    @override
    def _native_avg(self) -> bool:
        return True  # _do_all_reduce averages itself, so float8 averages in float32

    @override
    def _placement(self, tensor: torch.Tensor) -> torch.device:
        return self._device if _on_xla(tensor) else _CPU  # primitives move the rest

    def _reduces(self, tensor: torch.Tensor, op: str) -> bool:
        """Whether XLA's own all-reduce gives ``op`` of ``tensor`` exactly: it reduces the
        dtype, and the tensor is on the device or the device holds its dtype exactly."""
        dtype = tensor.dtype
        if op in ("AND", "OR") and dtype is not torch.bool:
            return False  # XLA reduces predicates with and/or, not integer bits
        if dtype.is_floating_point and dtype.itemsize == 1:
            return False  # float8
        if dtype is torch.bfloat16 and self._hw == "CPU":
            return False  # "not supported" there
        return _on_xla(tensor) or self._holds(dtype)

    def _cpu(self, tensor: torch.Tensor) -> torch.Tensor:
        # Run the pending graph first, as xm.rendezvous does: XLA chains collectives through
        # a token, and a graph that still holds the earlier ones would grow (and recompile)
        # with every call. Results for the CPU are computed now anyway.
        self._sync()
        return tensor.cpu()

    def _replica_groups(self, group: Any) -> list[list[int]] | None:
        return None if group is None else [list(group.ranks)]

    @override
    def _do_all_reduce(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        if self._reduces(tensor, op):
            work = tensor.to(self._device)  # itself when it is on the device: reduced in place
            self._xm.all_reduce(_XM_OPS[op], [work], groups=self._replica_groups(group))
            if op == "AVG":
                work.div_(self._group_size(group))
            return work if _on_xla(tensor) else self._cpu(work)
        # Gather and fold on the CPU, in rank order: exact, and the same bits on every rank.
        return all_reduce_by_fold(self, self._cpu(tensor), op, group).to(tensor.device)

    @override
    def _do_all_gather(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        rows = self._group_size(group) * tensor.shape[0]
        if tensor.numel() == 0:  # empty on every member (one shape); XLA's gather op refuses it
            return tensor.new_empty((rows, *tensor.shape[1:]))
        groups = self._replica_groups(group)
        data = byte_view.as_bytes(tensor).to(self._device)  # raw bytes: see the module docstring
        raw = self._xm.all_gather(data, dim=0, groups=groups, pin_layout=False)
        raw = raw if _on_xla(tensor) else self._cpu(raw)
        return byte_view.from_bytes(raw, tensor.dtype, (rows, *tensor.shape[1:]))

    @override
    def _do_reduce_scatter(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        # xm.reduce_scatter where all_reduce would reduce on the device too; else the base
        # class emulates it over _do_all_reduce (which gathers and folds exactly).
        size = self._group_size(group)
        if tensor.numel() == 0:  # as in _do_all_gather
            return tensor.new_empty((tensor.shape[0] // size, *tensor.shape[1:]))
        if not self._reduces(tensor, op):
            return super()._do_reduce_scatter(tensor, op, group)
        work = tensor.to(self._device)  # itself when it is on the device
        groups = self._replica_groups(group)
        out: torch.Tensor = self._xm.reduce_scatter(_XM_OPS[op], work, 1.0, 0, size, groups=groups)
        if op == "AVG":
            out.div_(size)
        out = out if _on_xla(tensor) else self._cpu(out)
        if size == 1 and op in ("SUM", "AVG"):  # XLA's sum starts from +0.0: -0.0 came back 0.0
            out = own_zeros(out, tensor)
        return out

    @override
    def _do_all_to_all_even(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        if tensor.numel() == 0:  # empty on every member (one shape); XLA's gather op refuses it
            return torch.empty_like(tensor)
        # Raw bytes, as in _do_all_gather: the contiguous dim-0 chunks are equal byte ranges.
        data = byte_view.as_bytes(tensor).to(self._device)
        size, groups = self._group_size(group), self._replica_groups(group)
        raw = self._xm.all_to_all(data, 0, 0, size, groups=groups, pin_layout=False)
        raw = raw if _on_xla(tensor) else self._cpu(raw)
        return byte_view.from_bytes(raw, tensor.dtype, tuple(tensor.shape))

    @override
    def _do_broadcast(self, tensor: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        # Every rank runs the same graph: its bytes times 1 (the source) or 0, summed.
        data = byte_view.as_bytes(tensor).to(self._device)
        keep = torch.full((1,), int(self._layout.rank == src), dtype=torch.uint8)
        summed = [data * keep.to(self._device)]
        self._xm.all_reduce("sum", summed, groups=self._replica_groups(group))
        raw = summed[0] if _on_xla(tensor) else self._cpu(summed[0])
        return byte_view.from_bytes(raw, tensor.dtype, tuple(tensor.shape))

    @override
    def _make_coordination_store(self) -> Any | None:
        # Untested here (the XLA CPU device cannot replicate): under torchrun the "xla" process
        # group's store; under xmp.spawn rank 0 hosts a TCPStore and broadcasts its address.
        pg = None if self._pg is None else coordination.default_store()  # several replicas only
        send = functools.partial(self._do_broadcast, src=0, group=None)  # several replicas only
        where = self._layout.rank, self._layout.nnodes  # several replicas only
        return coordination.job_store(*where, pg, send)  # several replicas only

    @override
    def _do_barrier(self, group: Any) -> None:
        if group is None or len(group.ranks) == self._layout.world_size:
            self._xm.rendezvous("distbridge.barrier")
            return
        # xm.rendezvous takes only the whole world: a sub-group waits on a tiny all-reduce.
        token = torch.zeros(1, dtype=torch.uint8, device=self._device)  # several replicas only
        self._cpu(self._do_all_reduce(token, "SUM", group))  # several replicas only

    @override
    def _make_group(self, ranks: tuple[int, ...], **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(
                f"new_group() got unexpected keyword arguments {sorted(kwargs)}; the XLA "
                "backend takes only the ranks."
            )
        return XlaGroup(ranks)

    @override
    def _check_group(self, group: object) -> None:
        if not isinstance(group, XlaGroup):
            raise not_a_group(group)
