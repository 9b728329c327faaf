"""What Horovod moves and reduces itself, and how the other dtypes travel: as rows of bytes.

Horovod's collectives take a handful of dtypes; a tensor of any other dtype goes as its raw
bytes, one row per entry of dim 0 (so ragged gathers and all-to-all splits still count rows),
and is viewed back in its own dtype on arrival.
"""

from __future__ import annotations

import torch

from distbridge.algorithms import byte_view

__all__ = ["HVD_OPS", "MOVED", "REDUCED", "WIDER", "as_received", "as_sent"]

#: dtypes Horovod reduces itself (CPU and CUDA).
REDUCED = frozenset((torch.int32, torch.int64, torch.float16, torch.float32, torch.float64))
#: dtypes Horovod gathers, broadcasts and exchanges itself; the others travel as bytes.
MOVED = REDUCED | {torch.uint8, torch.int8, torch.int16}
#: reduced in a wider dtype, then cast back (exact: sums wrap as in the narrow type).
WIDER = {torch.bool: torch.int32, torch.uint8: torch.int32, torch.int8: torch.int32,
         torch.bfloat16: torch.float32}  # fmt: skip
#: distbridge's op names -> the names of Horovod's op constants.
HVD_OPS = {"SUM": "Sum", "AVG": "Average", "ADASUM": "Adasum", "MIN": "Min", "MAX": "Max",
           "PRODUCT": "Product"}  # fmt: skip


def as_sent(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as Horovod can move it: itself, or its bytes as rows along dim 0."""
    return tensor if tensor.dtype in MOVED else byte_view.as_byte_rows(tensor)


def as_received(out: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """What Horovod returned for ``as_sent(like)``, back in ``like``'s dtype and row shape
    (the number of rows may differ)."""
    return out if like.dtype in MOVED else byte_view.from_byte_rows(out, like)
