"""Different numbers of dims on different ranks, on real gloo ranks: gather, scatter,
all_to_all of a list and all_gather_tensors_with_shapes give each tensor back in its own
shape, byte for byte, on the native model and through the base class's emulations (the
per-rank bodies are in ``ndims_targets.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.distributed import ndims_targets, warm

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

COUNT = 60  # cases per world size, each run twice (native, emulated); the machine has 2 cores


@pytest.mark.parametrize("world_size", [2, 3])
def test_mixed_ndims_match_the_local_answer(world_size: int) -> None:
    per_rank = warm.call(ndims_targets.run_cases, world_size=world_size, args=(COUNT,), timeout=240)
    failures = [f"rank {rank}: {f}" for rank, r in enumerate(per_rank) for f in r["failures"]]
    assert not failures, "\n".join(failures[:20])
    assert len({r["digest"] for r in per_rank}) == 1
    first = per_rank[0]
    assert first["cases"] == COUNT + len(ndims_targets.REGRESSIONS)
    # The property is about mixed dims: a good share of the cases must mix them, in every
    # collective (the draws are derandomized: about 35 of 60 here).
    assert first["mixed"] >= COUNT // 3, first
    assert first["kinds"] == sorted(ndims_targets.KINDS), first


def _same(got: Any, want: torch.Tensor) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_debug_mode_accepts_mixed_ndims_and_refuses_all_gather() -> None:
    rank0, rank1 = warm.call(ndims_targets.debug_examples, world_size=2, debug=True)
    scalar, cube = torch.tensor(5.0), torch.arange(24.0).reshape(2, 3, 4)
    assert rank0["gather"] == []
    assert [p.shape for p in rank1["gather"]] == [(), (2, 3, 4)]
    assert _same(rank1["gather"][0], scalar) and _same(rank1["gather"][1], cube)
    for seen in (rank0, rank1):
        assert _same(seen["with_shapes"][0], scalar) and _same(seen["with_shapes"][1], cube)
    assert _same(rank0["scatter"], scalar) and _same(rank1["scatter"], cube)
    assert _same(rank0["all_to_all"][0], scalar) and _same(rank0["all_to_all"][1], cube + 1)
    assert _same(rank1["all_to_all"][0], cube) and _same(rank1["all_to_all"][1], scalar + 1)
    for seen in (rank0, rank1):  # the same error, naming both shapes, on every rank
        assert "differ in shape" in seen["all_gather"]
        assert "shape=[]" in seen["all_gather"] and "shape=[2, 3, 4]" in seen["all_gather"]
