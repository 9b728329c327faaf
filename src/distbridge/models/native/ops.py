"""How the native model hands reductions and single-tensor collectives to torch.distributed.

c10d reduces complex tensors by SUM and AVG only (a PRODUCT is folded from an all-gather),
and adds bools as bytes (two Trues give the byte 2), so a bool SUM goes as MAX.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "NON_MEMBER",
    "all_gather_single",
    "folds_product",
    "reduce_scatter_single",
    "torch_op",
]

_OPS: dict[str, Any] = {}
if dist.is_available():
    _OPS = {
        "SUM": dist.ReduceOp.SUM,
        "PRODUCT": dist.ReduceOp.PRODUCT,
        "MIN": dist.ReduceOp.MIN,
        "MAX": dist.ReduceOp.MAX,
        "AND": dist.ReduceOp.BAND,
        "OR": dist.ReduceOp.BOR,
        "AVG": dist.ReduceOp.AVG,
    }
    # torch 2.13 renamed the single-tensor forms (the old names warn).
    all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter_single = (
        getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    )
    NON_MEMBER = dist.GroupMember.NON_GROUP_MEMBER


def folds_product(tensor: torch.Tensor, op: str) -> bool:
    """Whether ``op`` on ``tensor`` must be folded: torch has no complex PRODUCT."""
    return op == "PRODUCT" and tensor.is_complex()


def torch_op(tensor: torch.Tensor, op: str) -> Any:
    """The ``dist.ReduceOp`` that reduces ``tensor`` by the canonical ``op`` exactly."""
    return _OPS["MAX" if op == "SUM" and tensor.dtype is torch.bool else op]
