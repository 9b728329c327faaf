"""The rank-order fold: an exact reduction of the rows an all-gather brought (one per rank),
for a backend whose own all-reduce is inexact for a dtype or lacks the op (XLA; NCCL has no
bitwise AND / OR). Works on any device torch computes on.

Which reduction torch.distributed's engines (c10d, and the functional collectives over it)
must run to give the exact answer of a canonical op is ``backend_op``'s rule: c10d adds bools
as bytes (two Trues give the byte 2), so a bool SUM runs as MAX; it has no complex PRODUCT,
and NCCL has no bitwise AND / OR (``ValueError: Cannot use ReduceOp.BAND with NCCL``): those
are folded. Both the native model's eager primitives and the traceable path inside
torch.compile follow this rule, and every reduction (all_reduce, reduce, reduce_scatter) asks
it alike, so each takes the same ops on every backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from distbridge.algorithms import carriers
from distbridge.algorithms.checks import divide_

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = ["NO_BITWISE", "all_reduce_by_fold", "backend_op", "fold"]

#: The c10d backends that have no bitwise reduction (torch refuses ReduceOp.BAND / BOR there
#: before communicating).
NO_BITWISE = frozenset(("nccl",))

_STEPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "AVG": torch.add,
    "SUM": torch.add,
    "PRODUCT": torch.mul,
    "MIN": torch.minimum,
    "MAX": torch.maximum,
    "AND": torch.bitwise_and,
    "OR": torch.bitwise_or,
}


def fold(rows: torch.Tensor, op: str) -> torch.Tensor:
    """Reduce the gathered ``rows`` (one per rank) with ``op``, in rank order."""
    dtype = rows.dtype
    if (dtype.itemsize == 1 and dtype.is_floating_point) or dtype is torch.complex32:
        rows = rows.to(torch.complex64 if dtype.is_complex else torch.float32)  # no CPU arithmetic
    # uint16-64 widened or viewed (no CPU add / minimum), float MIN / MAX as IEEE's everywhere
    rows, back = carriers.reduction_carrier(rows, op, carriers.UNCARRIED_BY_C10D)
    parts = rows.is_complex() and op in ("SUM", "AVG")
    if parts:  # part by part: torch's complex add turns inf + finite into NaN in the other part
        rows = torch.view_as_real(rows)
    out = functools.reduce(_STEPS[op], rows)  # rank 0's row first
    if op == "AVG":
        out = divide_(out.clone(), len(rows))
    if parts:
        out = torch.view_as_complex(out.contiguous())
    return (out if back is None else back(out)).to(dtype)


def all_reduce_by_fold(
    model: ModelContract, tensor: torch.Tensor, op: str, group: Any
) -> torch.Tensor:
    """``tensor`` reduced with ``op`` over ``group`` where the backend's own all-reduce cannot
    (or not exactly): every member's tensor all-gathered as one row and folded here in rank
    order, so every member gets the same bits. A new tensor of ``tensor``'s shape."""
    rows = model._do_all_gather(tensor.reshape(1, -1), group)
    return fold(rows, op).view(tensor.shape)


def backend_op(backend: str | None, dtype: torch.dtype, op: str) -> str | None:
    """The canonical op c10d backend ``backend`` (e.g. "gloo", "nccl"; None: c10d's own rule)
    runs for ``op`` on tensors of ``dtype``; None where it has none and the reduction must be
    folded: a complex PRODUCT on every backend, AND / OR on NCCL."""
    if op == "PRODUCT" and dtype.is_complex:
        return None
    if backend in NO_BITWISE and op in ("AND", "OR"):
        return None
    return "MAX" if op == "SUM" and dtype is torch.bool else op
