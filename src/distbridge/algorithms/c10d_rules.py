"""Which reduction torch.distributed's engines (c10d, and the functional collectives over it)
must run to give the exact answer of a canonical op.

c10d adds bools as bytes (two Trues give the byte 2), so a bool SUM runs as MAX; it has no
complex PRODUCT, and NCCL has no bitwise AND / OR (``ValueError: Cannot use ReduceOp.BAND
with NCCL``): those are folded from an all-gather (``algorithms/fold.py``). Both the native
model's eager primitives and the traceable path inside torch.compile follow this rule, and
every reduction (all_reduce, reduce, reduce_scatter) asks it alike, so each takes the same
ops on every backend.
"""

from __future__ import annotations

import torch

__all__ = ["NO_BITWISE", "backend_op"]

#: The c10d backends that have no bitwise reduction (torch refuses ReduceOp.BAND / BOR there
#: before communicating).
NO_BITWISE = frozenset(("nccl",))


def backend_op(backend: str | None, dtype: torch.dtype, op: str) -> str | None:
    """The canonical op c10d backend ``backend`` (e.g. "gloo", "nccl"; None: c10d's own rule)
    runs for ``op`` on tensors of ``dtype``; None where it has none and the reduction must be
    folded: a complex PRODUCT on every backend, AND / OR on NCCL."""
    if op == "PRODUCT" and dtype.is_complex:
        return None
    if backend in NO_BITWISE and op in ("AND", "OR"):
        return None
    return "MAX" if op == "SUM" and dtype is torch.bool else op
