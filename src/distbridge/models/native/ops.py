"""How the native model hands reductions and single-tensor collectives to torch.distributed.

Which reduction c10d runs for a canonical op is ``algorithms/c10d_rules.py``'s rule (a bool
SUM as MAX, a complex PRODUCT folded), shared with the traceable path of torch.compile.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from distbridge.algorithms.c10d_rules import c10d_op

__all__ = [
    "NON_MEMBER",
    "all_gather_single",
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


_BY_DTYPE: dict[tuple[torch.dtype, str], Any] = {}  # (dtype, op) -> torch_op's answer


def torch_op(dtype: torch.dtype, op: str) -> Any:
    """The ``dist.ReduceOp`` that reduces tensors of ``dtype`` by the canonical ``op`` exactly;
    None where c10d has none and the reduction is folded (``c10d_rules.c10d_op``). Remembered
    per dtype and op: a training loop asks it once."""
    try:
        return _BY_DTYPE[(dtype, op)]
    except KeyError:
        name = c10d_op(dtype, op)
        answer = _BY_DTYPE[(dtype, op)] = None if name is None else _OPS[name]
        return answer
