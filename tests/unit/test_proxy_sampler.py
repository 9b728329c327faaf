"""DistributedProxySampler against references, on generated datasets and worlds.

- Over a SequentialSampler it shards exactly as torch's own DistributedSampler (no shuffle).
- Over any sampler, the ranks' shards interleaved give the sampler's indices repeated up to
  a multiple of the world size, each rank the same number.
- Over a RandomSampler, every rank draws the same order for an epoch (``set_epoch`` seeds
  it): the sampler's draws after ``torch.manual_seed(epoch)``, the next draw padding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler, RandomSampler, Sampler, SequentialSampler

from distbridge import DistributedProxySampler

worlds = st.integers(1, 8)


class ListSampler(Sampler[int]):
    """Yields a fixed list of indices (duplicates allowed, any order)."""

    def __init__(self, indices: Sequence[int]) -> None:
        self.indices = list(indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def _shards(sampler: Sampler[int], world: int, epoch: int = 0) -> list[list[int]]:
    out = []
    for rank in range(world):
        proxy = DistributedProxySampler(sampler, num_replicas=world, rank=rank)
        proxy.set_epoch(epoch)
        out.append(list(proxy))
    return out


@given(size=st.integers(1, 300), world=worlds)
def test_a_sequential_sampler_shards_as_torchs_distributed_sampler(size: int, world: int) -> None:
    data = range(size)
    for rank, shard in enumerate(_shards(SequentialSampler(data), world)):
        reference = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)  # type: ignore[arg-type]
        assert shard == list(reference)


@given(indices=st.lists(st.integers(0, 50), min_size=1, max_size=200), world=worlds)
def test_the_shards_interleave_to_the_padded_indices(indices: list[int], world: int) -> None:
    shards = _shards(ListSampler(indices), world)
    each = math.ceil(len(indices) / world)
    assert [len(s) for s in shards] == [each] * world
    padded = (indices * math.ceil(each * world / len(indices)))[: each * world]
    assert [shards[i % world][i // world] for i in range(each * world)] == padded


@given(size=st.integers(1, 200), world=worlds, epoch=st.integers(0, 10_000))
def test_a_random_sampler_gives_every_rank_one_order_per_epoch(
    size: int, world: int, epoch: int
) -> None:
    sampler = RandomSampler(range(size))
    each = math.ceil(size / world)
    torch.manual_seed(epoch)
    draws: list[int] = []
    while len(draws) < each * world:  # padding takes the sampler's next draw, as in ignite
        draws += list(sampler)
    padded = draws[: each * world]
    assert sorted(padded[:size]) == list(range(size))  # the first draw is a permutation
    shards = _shards(sampler, world, epoch)
    assert [shards[i % world][i // world] for i in range(each * world)] == padded
