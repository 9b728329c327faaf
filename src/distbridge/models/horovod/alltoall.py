"""``hvd.alltoall`` with split sizes, which the Horovod model's all_to_all (even and uneven),
gather and scatter go through: Horovod lacks gather and scatter, and through it each member
sends to ``dst`` alone, or ``src`` sends member j its chunk alone (where an all-gather or a
broadcast would send every tensor to every member)."""

from __future__ import annotations

from typing import Any

import torch

from distbridge.models.horovod import dtypes as hvd_dtypes

__all__ = ["alltoall"]


def alltoall(
    hvd: Any, ps: Any, tensor: torch.Tensor, splits: list[int], kind: str = "alltoall"
) -> torch.Tensor:
    """hvd.alltoall along dim 0 within process set ``ps``: ``splits[j]`` rows to member j.
    Named by ``kind`` too: Horovod's response cache keeps one entry per name, so gathers,
    scatters and all-to-alls of other shapes do not evict each other's."""
    name = f"distbridge.{kind}.{ps.process_set_id}"
    counts = torch.tensor(splits, dtype=torch.int32)
    sent = hvd_dtypes.as_sent(tensor)
    out, _ = hvd.alltoall(sent, splits=counts, name=name, process_set=ps)
    return hvd_dtypes.as_received(out, tensor)
