"""Compatibility on 2 real gloo ranks: ignite's barrier options, and
``distbridge.compat.detectron2`` giving the same answers as the facade's objects and as exact
local answers (per-rank bodies in ``compat_targets.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.distributed import compat_targets, warm

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]


def test_comm_matches_the_facade_on_two_ranks() -> None:
    rank0, rank1 = warm.call(compat_targets.compare_with_facade, world_size=2)
    for rank, seen in enumerate((rank0, rank1)):
        assert seen["sizes"] == seen["facade_sizes"] == (2, rank, rank)
        assert seen["local_size"] == 2
        assert seen["main"] is (rank == 0)
        assert seen["all_gather"] == seen["facade_all_gather"] == [{"rank": 0}, {"rank": 1}]
        assert seen["local_is_cached"] is True
        assert seen["local_members"] == 2
    assert rank0["gather"] == [] and rank1["gather"] == [0, 10]
    assert list(rank0["reduce"]) == ["a", "b"]  # sorted keys, as detectron2 returns them
    assert rank0["reduce"]["a"].item() == 1.0 and rank0["reduce"]["b"].item() == 1.0
    assert rank1["reduce"]["b"].item() == 2.0  # the other ranks keep their input
    assert rank0["seed"] == rank1["seed"] and 0 <= rank0["seed"] < 2**31
    assert isinstance(rank0["reduce"]["a"], torch.Tensor)


def test_comm_property_on_two_ranks() -> None:
    failures = warm.call(compat_targets.property_cases, world_size=2, args=(40,))
    assert failures == [[], []]


def test_barrier_takes_torch_options_on_two_ranks() -> None:
    per_rank = warm.call(compat_targets.barrier_options, world_size=2)
    assert per_rank == [[None, None, (True, True), None, True]] * 2
