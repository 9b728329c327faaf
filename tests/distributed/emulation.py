"""The native model with its own reduce, gather, scatter, reduce_scatter and all_to_all
switched off, so that the base class's emulations (what XLA, Horovod's reduce and backends
without those ops use) do the work on real gloo ranks; and the native model reducing by
NCCL's rule (no bitwise ops: AND / OR folded from an all-gather) on any backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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
def emulating() -> Iterator[None]:
    """Within the block, the live native context runs through the emulations."""
    native = _state.current()
    emulated = _EmulatingNativeModel.from_context()
    assert emulated is not None, "the emulations run on the native model only"
    _state.install(emulated)
    try:
        yield
    finally:
        _state.install(native)


class _NcclRuleNativeModel(NativeModel):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._torch_op = ops.torch_ops("nccl")  # c10d_rules.backend_op for "nccl"


@contextmanager
def as_on_nccl() -> Iterator[None]:
    """Within the block, the live native context picks its ReduceOps by NCCL's rule
    (``c10d_rules.backend_op``): its all_reduce, reduce and reduce_scatter fold AND / OR from
    an all-gather, as on NCCL, whatever the backend (gloo ranks on a CPU take NCCL's route)."""
    native = _state.current()
    as_nccl = _NcclRuleNativeModel.from_context()
    assert as_nccl is not None, "NCCL's rule applies to the native model only"
    _state.install(as_nccl)
    try:
        yield
    finally:
        _state.install(native)
