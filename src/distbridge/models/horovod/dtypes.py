"""What Horovod moves and reduces itself, and how the other dtypes travel: as rows of bytes;
what its ADASUM reduction takes; and ``hvd.alltoall`` with split sizes.

Horovod's collectives take a handful of dtypes; a tensor of any other dtype goes as its raw
bytes, one row per entry of dim 0 (so ragged gathers and all-to-all splits still count rows),
and is viewed back in its own dtype on arrival.

The Horovod model's all_to_all (even and uneven), gather and scatter go through `alltoall`:
Horovod lacks gather and scatter, and through it each member sends to ``dst`` alone, or
``src`` sends member j its chunk alone (where an all-gather or a broadcast would send every
tensor to every member).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from distbridge.algorithms import byte_view

__all__ = [
    "HVD_OPS",
    "MOVED",
    "REDUCED",
    "WIDER",
    "alltoall",
    "as_received",
    "as_sent",
    "check_adasum",
]

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
    """``tensor`` as Horovod can move it: itself, or (at least 1-d) a 2-d uint8 view or copy
    of its bytes with one row per entry of dim 0."""
    if tensor.dtype in MOVED:
        return tensor
    if tensor.dim() == 0:
        raise ValueError(
            f"Got a 0-d tensor of {tensor.dtype}; rows of bytes need a tensor with a dim 0: "
            "pass tensor.reshape(1)."
        )
    row = math.prod(tensor.shape[1:]) * tensor.dtype.itemsize
    return byte_view.as_bytes(tensor).view(tensor.shape[0], row)


def as_received(out: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """What Horovod returned for ``as_sent(like)``, back in ``like``'s dtype and row shape
    (the number of rows may differ)."""
    if like.dtype in MOVED:
        return out
    return byte_view.from_bytes(out, like.dtype, (out.shape[0], *like.shape[1:]))


def check_adasum(dtype: torch.dtype, whole_world: bool, world_size: int, mpi: bool) -> None:
    """Refuse an ADASUM all-reduce Horovod cannot run: of ``dtype``, on a group that is not
    the ``whole_world``, in a world of ``world_size``, without its MPI controller (``mpi``)."""
    if not (dtype.is_floating_point and dtype in REDUCED | {torch.bfloat16}):
        raise TypeError(f"Reduction ADASUM needs a float or floating-point tensor, got {dtype}.")
    if not whole_world:
        raise NotImplementedError(
            "all_reduce with op ADASUM cannot take a group: Horovod runs Adasum only on the "
            "whole world. Drop group= or use op SUM."
        )
    if world_size & (world_size - 1):
        raise NotImplementedError(
            f"all_reduce with op ADASUM needs a power-of-two world size, got {world_size}: "
            "Horovod supports no other. Use op SUM or AVG."
        )
    if not mpi:
        raise NotImplementedError(
            "all_reduce with op ADASUM needs Horovod's MPI controller on CPU, and this job "
            "runs on Gloo: start it with `horovodrun --mpi` (Horovod built with MPI), or use "
            "op SUM or AVG."
        )


def alltoall(
    hvd: Any, ps: Any, tensor: torch.Tensor, splits: list[int], kind: str = "alltoall"
) -> torch.Tensor:
    """hvd.alltoall along dim 0 within process set ``ps``: ``splits[j]`` rows to member j.
    Named by ``kind`` too: Horovod's response cache keeps one entry per name, so gathers,
    scatters and all-to-alls of other shapes do not evict each other's."""
    name = f"distbridge.{kind}.{ps.process_set_id}"
    counts = torch.tensor(splits, dtype=torch.int32)
    out, _ = hvd.alltoall(as_sent(tensor), splits=counts, name=name, process_set=ps)
    return as_received(out, tensor)
