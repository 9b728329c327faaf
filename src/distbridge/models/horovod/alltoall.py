"""Horovod's collectives that go through ``hvd.alltoall`` with split sizes: all_to_all (even
and uneven), and gather and scatter, which Horovod lacks: each member sends to ``dst``
alone, or ``src`` sends member j its chunk alone (where an all-gather or a broadcast would
send every tensor to every member)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from typing_extensions import override

from distbridge.models._primitives import BackendPrimitives
from distbridge.models.horovod import dtypes as hvd_dtypes

__all__ = ["HorovodAllToAll"]


class HorovodAllToAll(BackendPrimitives):
    """The hvd.alltoall primitives of ``HorovodModel``."""

    if TYPE_CHECKING:
        _hvd: Any

        def _set(self, group: Any) -> Any:
            """The Horovod process set of ``group`` (None: the world's)."""

    @override
    def _do_all_to_all(
        self, data: torch.Tensor, in_splits: list[int], out_splits: list[int], group: Any
    ) -> torch.Tensor:
        return self._alltoall(data.reshape(-1, 1), in_splits, group).reshape(-1)

    @override
    def _do_all_to_all_even(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        # One element a row, as _do_all_to_all sends: Horovod refuses rows of different
        # shapes across ranks, and another rank may send the same chunks through that path
        # (its list was no x.chunk(n)).
        rows = tensor.reshape(-1, 1)
        size = self._group_size(group)
        return self._alltoall(rows, [rows.shape[0] // size] * size, group).reshape(tensor.shape)

    @override
    def _do_gather(self, tensor: torch.Tensor, dst: int, group: Any) -> list[torch.Tensor] | None:
        members = self._group_members(group)
        to_dst = [int(rank == dst) for rank in members]
        rows = self._alltoall(tensor.unsqueeze(0), to_dst, group, "gather")
        return list(rows.unbind(0)) if self.get_rank() == dst else None

    @override
    def _do_scatter(
        self, chunks: list[torch.Tensor] | None, out: torch.Tensor, src: int, group: Any
    ) -> torch.Tensor:
        size = self._group_size(group)
        if chunks is None:
            rows = self._alltoall(out.new_empty((0, *out.shape)), [0] * size, group, "scatter")
        else:
            rows = self._alltoall(torch.stack(chunks), [1] * size, group, "scatter")
        return rows[0]

    def _alltoall(
        self, tensor: torch.Tensor, splits: list[int], group: Any, kind: str = "alltoall"
    ) -> torch.Tensor:
        """hvd.alltoall along dim 0: ``splits[j]`` rows to member j. Named by ``kind`` too:
        Horovod's response cache keeps one entry per name, so gathers, scatters and
        all-to-alls of other shapes do not evict each other's."""
        ps = self._set(group)
        name = f"distbridge.{kind}.{ps.process_set_id}"
        counts = torch.tensor(splits, dtype=torch.int32)
        sent = hvd_dtypes.as_sent(tensor)
        out, _ = self._hvd.alltoall(sent, splits=counts, name=name, process_set=ps)
        return hvd_dtypes.as_received(out, tensor)
