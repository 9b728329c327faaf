"""How the native model hands reductions and single-tensor collectives to torch.distributed.

Which reduction a backend runs for a canonical op is ``algorithms/fold.py``'s rule (a
bool SUM as MAX; a complex PRODUCT, and AND / OR on NCCL, folded), shared with the traceable
path of torch.compile; all_reduce, reduce and reduce_scatter ask it alike.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from distbridge.algorithms.fold import backend_op

__all__ = [
    "all_gather_single",
    "reduce_scatter_single",
    "torch_ops",
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


_DTYPES = {value for value in vars(torch).values() if isinstance(value, torch.dtype)}


def torch_ops(backend: str) -> dict[tuple[torch.dtype, str], Any]:
    """``ops[(dtype, op)]``: the ``dist.ReduceOp`` that reduces tensors of ``dtype`` by the
    canonical ``op`` exactly on ``backend``; None where the backend has none and the
    reduction is folded (``fold.backend_op``: a complex PRODUCT, AND / OR on NCCL).
    Filled for every dtype torch names, so that even a first call reads it at a dict's cost."""
    names = {(dtype, op): backend_op(backend, dtype, op) for dtype in _DTYPES for op in _OPS}
    return {key: None if name is None else _OPS[name] for key, name in names.items()}
