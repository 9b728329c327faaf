"""Default primitives for backends that lack reduce-scatter, gather, scatter or all-to-all.

Each is built on the primitives every backend has (all-gather, broadcast, all-reduce) and
is exact; it moves more data than the native op would (see bench/README.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = ["emulate_all_to_all", "emulate_gather", "emulate_reduce_scatter", "emulate_scatter"]


def emulate_gather(model: ModelContract, tensor: torch.Tensor, group: Any) -> list[torch.Tensor]:
    """Gather through all-gather: every rank receives everything (fine for small worlds)."""
    stacked = model._do_all_gather(tensor.unsqueeze(0).contiguous(), group)
    return list(stacked.unbind(0))


def emulate_scatter(
    model: ModelContract,
    chunks: list[torch.Tensor] | None,
    out: torch.Tensor,
    src: int,
    group: Any,
) -> torch.Tensor:
    """Scatter through one broadcast of every chunk; each rank keeps its own."""
    size = model._group_size(group)
    stacked = torch.stack(chunks) if chunks is not None else out.new_empty((size, *out.shape))
    stacked = model._do_broadcast(stacked, src, group)
    return stacked[model._group_rank(group)].clone()


def emulate_reduce_scatter(
    model: ModelContract, tensor: torch.Tensor, op: str, group: Any
) -> torch.Tensor:
    """Reduce-scatter through all-reduce of a copy, then this rank's chunk."""
    full = model._do_all_reduce(tensor.clone(), op, group)
    size = model._group_size(group)
    return full.chunk(size)[model._group_rank(group)].clone()


def emulate_all_to_all(
    model: ModelContract,
    data: torch.Tensor,
    in_splits: list[int],
    out_splits: list[int],
    group: Any,
) -> torch.Tensor:
    """All-to-all through all-gathers: every rank's split table, then every padded buffer."""
    size, me = model._group_size(group), model._group_rank(group)
    header = torch.tensor(
        [data.numel(), *in_splits], dtype=torch.int64, device=model._collective_device()
    )
    table = model._do_all_gather(header, group).view(size, size + 1).cpu()
    longest = int(table[:, 0].max())
    padded = data.new_zeros(longest)
    padded[: data.numel()] = data
    everything = model._do_all_gather(padded, group).view(size, longest)
    pieces = []
    for sender in range(size):
        start = int(table[sender, 1 : 1 + me].sum())  # what the sender sends to ranks before me
        pieces.append(everything[sender, start : start + out_splits[sender]])
    return torch.cat(pieces) if pieces else data.new_empty(0)
