"""Object collectives on the serial model against pickle, on generated payloads.

A world of one still serializes and rebuilds every object (so an object that cannot travel
fails here too): each result must be what ``pickle.loads(pickle.dumps(obj))`` gives, byte
for byte. The same cases run on real gloo ranks in
``tests/distributed/test_differential_objects_gloo.py``.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distbridge as idist
from tests.differential.dict_cases import DictCase, check_dict_case, dict_cases
from tests.differential.object_cases import ObjectCase, check_case, object_cases
from tests.differential.payloads import PAYLOADS, difference, pickle_round_trip

_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@_SETTINGS
@given(PAYLOADS)
def test_a_payload_comes_back_as_pickle_rebuilds_it(payload: Any) -> None:
    expected = pickle_round_trip(payload)
    (gathered,) = idist.all_gather_object(payload)
    assert difference(expected, gathered) == ""
    (gathered,) = idist.gather_object(payload)
    assert difference(expected, gathered) == ""
    assert difference(expected, idist.scatter_object([payload])) == ""


@_SETTINGS
@given(object_cases())
def test_every_object_collective_matches_pickle(case: ObjectCase) -> None:
    assert check_case(case) == ""


def test_the_comparison_sees_what_matters() -> None:
    """The reference comparison itself must fail on the differences users would notice."""
    import numpy as np
    import torch

    assert difference(-0.0, 0.0) and difference(float("nan"), float("nan")) == ""
    assert difference(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert difference(torch.tensor([float("nan")]), torch.tensor([float("-nan")]))
    assert difference(np.arange(3), np.arange(3).astype(np.int32))
    assert difference(np.zeros((2, 3)), np.zeros((3, 2)))
    assert difference({"a": 1, "b": 2}, {"b": 2, "a": 1}), "key order is part of a dict"
    assert difference([1], (1,)) and difference(np.float32(1), np.float64(1))
    readonly = np.zeros(2)
    readonly.flags.writeable = False
    assert difference(np.zeros(2), readonly)
    assert difference(torch.ones(1, requires_grad=True), torch.ones(1))


@_SETTINGS
@given(dict_cases())
def test_metric_dicts_and_the_seed_match_the_exact_answer(case: DictCase) -> None:
    assert check_dict_case(case) == ""


class _Json:
    """A serializer for JSON values: ``serializer=`` replaces pickle entirely."""

    def dumps(self, obj: Any) -> bytes:
        return json.dumps(obj).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@_SETTINGS
@given(_JSON)
def test_a_serializer_round_trips_what_it_was_given(value: Any) -> None:
    serializer = _Json()
    expected = serializer.loads(serializer.dumps(value))
    assert idist.all_gather_object(value, serializer=serializer) == [expected]
    assert idist.gather_object(value, serializer=serializer) == [expected]
    assert idist.scatter_object([value], serializer=serializer) == expected
    assert idist.broadcast_object(value, serializer=serializer) is value
