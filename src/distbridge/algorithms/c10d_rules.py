"""Which reduction torch.distributed's engines (c10d, and the functional collectives over it)
must run to give the exact answer of a canonical op.

c10d adds bools as bytes (two Trues give the byte 2), so a bool SUM runs as MAX; it has no
complex PRODUCT, which is then folded from an all-gather (``algorithms/fold.py``). Both the
native model's eager primitives and the traceable path inside torch.compile follow this rule.
"""

from __future__ import annotations

import torch

__all__ = ["c10d_op"]


def c10d_op(dtype: torch.dtype, op: str) -> str | None:
    """The canonical op c10d runs for ``op`` on tensors of ``dtype``; None where c10d has
    none and the reduction must be folded (complex PRODUCT)."""
    if op == "PRODUCT" and dtype.is_complex:
        return None
    if op == "SUM" and dtype is torch.bool:
        return "MAX"
    return op
