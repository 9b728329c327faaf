"""Differential compatibility with pytorch-ignite itself on 2 real gloo ranks (the warm
world): the same calls to ``ignite.distributed`` and to distbridge, on the same ranks.
Per-rank bodies in ``ignite_targets.py``; the world of one is
``tests/unit/test_ignite_differential.py``."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "ignite.distributed", reason="pytorch-ignite is not installed (the test extra has it)"
)

from tests.distributed import ignite_targets, warm  # imports ignite

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

GENERATED = 25  # drawn cases per run, each through 8 calls on both libraries


def test_good_input_gives_ignites_results_and_types_on_two_ranks() -> None:
    assert warm.call(ignite_targets.good_input, world_size=2, args=(GENERATED,)) == [[], []]


def test_bad_input_raises_ignites_types_on_two_ranks() -> None:
    assert warm.call(ignite_targets.bad_input, world_size=2) == [[], []]


def test_messages_contain_ignites_words_on_two_ranks() -> None:
    assert warm.call(ignite_targets.ignites_words, world_size=2) == [[], []]


def test_ranks_outside_the_group_get_their_input_back_as_in_ignite() -> None:
    rank0, rank1 = warm.call(ignite_targets.outside_the_group, world_size=2)
    for lib in ("ignite", "distbridge"):
        assert rank0[f"{lib} object"] == {"rank": 0}  # not [obj]: rank 0 is outside [1]
        assert rank1[f"{lib} object"] == [{"rank": 1}]
        assert rank0[f"{lib} tensor"] == [1.0] and rank1[f"{lib} tensor"] == [2.0]
    for rank, seen in enumerate((rank0, rank1)):  # nobody is in new_group([])
        assert seen["empty group"] == [] == seen["ignite's serial new_group([])"]
        assert seen["empty all_reduce"] == [rank + 1.0]
        assert seen["empty all_gather"] == {"rank": rank}
        assert seen["empty all_reduce of a list"] == 7
        # migration.md: "`new_group([])` on several ranks"
        assert seen["ignite new_group([])"].startswith("TypeError")


def test_auto_dataloader_warns_as_ignite_on_two_ranks() -> None:
    for rank, seen in enumerate(warm.call(ignite_targets.loaders, world_size=2)):
        mine = [[i, i + 2] for i in range(rank, 12, 4)]  # the batch sampler's, used as given
        assert seen["distbridge batch_sampler batches"] == seen["ignite batch_sampler batches"]
        assert seen["distbridge batch_sampler batches"] == mine
        for lib in ("ignite", "distbridge"):
            assert any("Found batch_sampler" in w for w in seen[f"{lib} batch_sampler warnings"])
            said = " ".join(seen[f"{lib} sampler warnings"])
            # both values named: the sampler's and the process's
            assert f"rank={1 - rank}" in said and f"rank is {rank}" in said, said
            assert "num_replicas=3" in said and "world size is 2" in said, said
        assert seen["distbridge sampler batches"] == seen["ignite sampler batches"]
