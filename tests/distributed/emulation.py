"""The native model with its own reduce, gather, scatter, reduce_scatter and all_to_all
switched off, so that the base class's emulations (what XLA, Horovod's reduce and backends
without those ops use) do the work on real gloo ranks; and the native model reducing by
NCCL's rule (no bitwise ops: AND / OR folded from an all-gather) on any backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from distbridge import _state
from distbridge.models import ComputationModel, NativeModel
from distbridge.models.native import ops

__all__ = ["as_on_nccl", "emulating"]


class _EmulatingNativeModel(NativeModel):
    _do_reduce = ComputationModel._do_reduce
    _do_gather = ComputationModel._do_gather
    _do_scatter = ComputationModel._do_scatter
    _do_reduce_scatter = ComputationModel._do_reduce_scatter
    _do_all_to_all = ComputationModel._do_all_to_all
    _do_all_to_all_even = ComputationModel._do_all_to_all_even


@contextmanager
def _installed(kind: type[NativeModel], what: str) -> Iterator[None]:
    """Within the block, the live native context is adopted as ``kind``."""
    native = _state.current()
    model = kind.from_context()
    assert model is not None, f"{what} applies to the native model only"
    _state.install(model)
    try:
        yield
    finally:
        _state.install(native)


def emulating() -> AbstractContextManager[None]:
    """Within the block, the live native context runs through the emulations."""
    return _installed(_EmulatingNativeModel, "the emulations")


class _NcclRuleNativeModel(NativeModel):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._torch_ops = ops.torch_ops("nccl")  # fold.backend_op for "nccl"


def as_on_nccl() -> AbstractContextManager[None]:
    """Within the block, the live native context picks its ReduceOps by NCCL's rule
    (``fold.backend_op``): its all_reduce, reduce and reduce_scatter fold AND / OR from
    an all-gather, as on NCCL, whatever the backend (gloo ranks on a CPU take NCCL's route)."""
    return _installed(_NcclRuleNativeModel, "NCCL's rule")
