"""``distbridge.compat.detectron2`` on the serial model: detectron2's answers for a world of
one, the same as the facade's objects (2 ranks: tests/distributed/test_compat_detectron2_gloo)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge.compat import detectron2 as comm
from tests.distributed.compat_targets import VALUES


def test_world_of_one() -> None:
    assert (comm.get_world_size(), comm.get_rank(), comm.get_local_rank()) == (1, 0, 0)
    assert comm.get_local_size() == 1
    assert comm.is_main_process() is True
    assert comm.synchronize() is None
    assert comm._LOCAL_PROCESS_GROUP is None
    comm.create_local_process_group(1)
    assert comm.get_local_process_group() == idist.new_group([0])


def test_names_are_the_facades() -> None:
    for name in ("get_world_size", "get_rank", "get_local_rank", "get_local_size"):
        assert getattr(comm, name) is getattr(idist, name)
    assert comm.shared_random_seed is idist.shared_random_seed
    assert set(comm.__all__) <= set(dir(comm))


def test_shared_random_seed_is_detectron2s_draw() -> None:
    np.random.seed(7)
    want = np.random.randint(2**31)
    np.random.seed(7)
    assert comm.shared_random_seed() == want


@pytest.mark.parametrize("bad", [0, 3, -1, 1.0, True])
def test_create_local_process_group_rejects(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"divides the world size 1, got {bad!r}"):
        comm.create_local_process_group(bad)


def test_missing_attribute() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = comm.nope  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(value=VALUES)
def test_gathers_match_the_facade_and_detectron2(value: Any) -> None:
    assert comm.all_gather(value) == idist.all_gather_object(value) == [value]
    assert comm.gather(value) == idist.gather_object(value) == [value]
    assert comm.gather(value, dst=0) == [value]


@settings(max_examples=60, deadline=None)
@given(
    values=st.dictionaries(
        st.text(min_size=1, max_size=5), st.floats(-1e6, 1e6, allow_nan=False), min_size=1
    ),
    average=st.booleans(),
)
def test_reduce_dict_of_one_rank_is_the_input_sorted(
    values: dict[str, float], average: bool
) -> None:
    tensors = {k: torch.tensor(v) for k, v in values.items()}
    got = comm.reduce_dict(tensors, average=average)
    assert list(got) == sorted(values)
    assert all(torch.equal(got[k], tensors[k]) for k in values)
    facade = idist.reduce_dict(tensors, average=average)
    assert all(torch.equal(got[k], facade[k]) for k in values)
