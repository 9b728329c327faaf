"""The rank-order fold of gathered rows, which NCCL's AND / OR use (NCCL has no bitwise
reductions), over three ranks' rows; XLA's uses are tested in test_xla.py."""

from __future__ import annotations

import pytest
import torch

from distbridge.algorithms.fold import fold

RANKS = 3


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64])
@pytest.mark.parametrize("op", ["AND", "OR"])
def test_integers_fold_every_rank(dtype: torch.dtype, op: str) -> None:
    values = [torch.tensor([[1 << r, 0b0111], [-1 if dtype.is_signed else 255, r]], dtype=dtype)
              for r in range(RANKS)]  # fmt: skip
    out = fold(torch.stack([v.reshape(-1) for v in values]), op).view(2, 2)
    want = values[0].clone()
    for v in values[1:]:
        want = want & v if op == "AND" else want | v
    assert out.dtype == dtype and torch.equal(out, want)


@pytest.mark.parametrize(("op", "want"), [("AND", [False, True]), ("OR", [True, True])])
def test_bools_fold_to_all_and_any(op: str, want: list[bool]) -> None:
    rows = torch.stack([torch.tensor([r == 0, True]) for r in range(RANKS)])
    out = fold(rows, op)
    assert out.dtype == torch.bool and out.tolist() == want
