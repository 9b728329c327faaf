"""all_reduce_dict / reduce_dict with dicts that differ across 2 real gloo ranks (the warm
world): in key count, keys, value kinds or shapes, or refused on one rank only; or with the
same dict and other arguments (op, average, dst) on each rank. Every rank must raise the same
error, naming what differs, where the fused sums would hang (their sizes differ, or one rank
refused) or mix up the values; and the world must stay in step for the next call."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import distbridge as idist
from tests.distributed import warm

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

# name: (function, rank 0's dict, rank 1's dict)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "key_count": ("all_reduce_dict", {"a": torch.ones(3), "b": 1}, {"a": torch.ones(3)}),
    "key_count_onto_dst": ("reduce_dict", {"a": torch.ones(3), "b": 1}, {"a": torch.ones(3)}),
    "keys": ("all_reduce_dict", {"a": 1.0}, {"b": 1.0}),
    "tensor_kinds": (
        "all_reduce_dict",
        {"a": torch.ones(3)},
        {"a": torch.ones(3, dtype=torch.int64)},
    ),
    "number_kinds": ("reduce_dict", {"a": 1.5, "n": 2}, {"a": 1, "n": 2}),
    "shapes": ("all_reduce_dict", {"a": torch.ones(3)}, {"a": torch.ones(2)}),
    "many_keys": ("all_reduce_dict", {f"k{i}": i for i in range(7)}, {}),
    "refused_on_rank_0": ("all_reduce_dict", {"a": "text"}, {"a": 1.0}),
}
# name: (function, rank 0's keyword arguments, rank 1's), with the same dict on both ranks
ARGUMENTS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "ops": ("all_reduce_dict", {"op": "sum"}, {"op": "mean"}),
    "averages": ("reduce_dict", {"average": True}, {"average": False}),
    "dsts": ("reduce_dict", {"dst": 0}, {"dst": 1}),
    "op_refused_on_rank_1": ("all_reduce_dict", {"op": "sum"}, {"op": "avg"}),
}


def _outcomes(local_rank: int) -> dict[str, Any]:
    """Each case's error on this rank (type and message), then a matching call's result."""
    del local_rank
    rank = idist.get_rank()
    found: dict[str, Any] = {}
    calls = [(name, func, dicts[rank], {}) for name, (func, *dicts) in CASES.items()]
    calls += [
        (name, func, {"a": torch.ones(2)}, kw[rank]) for name, (func, *kw) in ARGUMENTS.items()
    ]
    for name, func, d, kwargs in calls:
        try:
            getattr(idist, func)(d, **kwargs)
        except (TypeError, ValueError) as err:
            found[name] = (type(err).__name__, str(err))
        else:
            found[name] = ("no error", "")
    found["after"] = idist.all_reduce_dict({"x": torch.tensor([float(rank)]), "n": rank + 1})
    return found


@pytest.fixture(scope="module")
def outcomes() -> list[dict[str, Any]]:
    return warm.call(_outcomes, world_size=2, timeout=120)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("key_count", "all_reduce_dict: the dictionaries differ across ranks ('b': int on "
         "group rank(s) [0], missing on group rank(s) [1])"),
        ("key_count_onto_dst", "reduce_dict: the dictionaries differ across ranks ('b': int"),
        ("keys", "('a': float on group rank(s) [0], missing on group rank(s) [1]; 'b': missing "
         "on group rank(s) [0], float on group rank(s) [1])"),
        ("tensor_kinds", "('a': float tensor of shape (3,) on group rank(s) [0], int tensor of "
         "shape (3,) on group rank(s) [1])"),
        ("number_kinds", "('a': float on group rank(s) [0], int on group rank(s) [1])"),
        ("shapes", "('a': float tensor of shape (3,) on group rank(s) [0], float tensor of "
         "shape (2,) on group rank(s) [1])"),
        ("many_keys", "'k4': int on group rank(s) [0], missing on group rank(s) [1]; and 2 "
         "more keys)"),
    ],
)  # fmt: skip
def test_every_rank_raises_the_same_error_naming_the_difference(
    outcomes: list[dict[str, Any]], name: str, text: str
) -> None:
    rank0, rank1 = (per_rank[name] for per_rank in outcomes)
    assert rank0 == rank1
    error, message = rank0
    assert error == "ValueError"
    assert text in message, message
    assert "Pass the same keys with the same kinds (float or int) and shapes" in message


def test_a_dict_refused_on_one_rank_fails_every_rank(outcomes: list[dict[str, Any]]) -> None:
    rank0, rank1 = (per_rank["refused_on_rank_0"] for per_rank in outcomes)
    assert rank0 == ("TypeError", "Value of 'a' must be a tensor or a number, got 'text'.")
    assert rank1 == (
        "TypeError",
        "all_reduce_dict: group rank(s) [0] passed a dict or arguments that cannot be reduced "
        "(see their error).",
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("ops", "all_reduce_dict: the ranks asked for different reductions (op='sum' on group "
         "rank 0; op='mean' on group rank 1). Pass the same arguments on every rank."),
        ("averages", "reduce_dict: the ranks asked for different reductions (average=True, "
         "dst=0 on group rank 0; average=False, dst=0 on group rank 1)."),
        ("dsts", "(average=True, dst=0 on group rank 0; average=True, dst=1 on group rank 1)"),
    ],
)  # fmt: skip
def test_other_arguments_on_each_rank_raise_the_same_error(
    outcomes: list[dict[str, Any]], name: str, text: str
) -> None:
    rank0, rank1 = (per_rank[name] for per_rank in outcomes)
    assert rank0 == rank1
    assert rank0[0] == "ValueError"
    assert text in rank0[1], rank0[1]


def test_an_op_refused_on_one_rank_fails_every_rank(outcomes: list[dict[str, Any]]) -> None:
    rank0, rank1 = (per_rank["op_refused_on_rank_1"] for per_rank in outcomes)
    assert rank1 == ("ValueError", "op must be 'sum' or 'mean', got 'avg'.")
    assert rank0 == (
        "ValueError",
        "all_reduce_dict: group rank(s) [1] passed a dict or arguments that cannot be reduced "
        "(see their error).",
    )


def test_the_world_stays_in_step(outcomes: list[dict[str, Any]]) -> None:
    for per_rank in outcomes:
        assert per_rank["after"]["x"].tolist() == [1.0]
        assert per_rank["after"]["n"] == 3
