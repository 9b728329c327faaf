"""The native model with its own reduce, gather, scatter, reduce_scatter and all_to_all
switched off, so that the base class's emulations (what XLA, Horovod's reduce and backends
without those ops use) do the work on real gloo ranks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from distbridge import _state
from distbridge.models import ComputationModel, NativeModel

__all__ = ["emulating"]


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
