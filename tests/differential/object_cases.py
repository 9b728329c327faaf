"""Object collectives against pickle: drawn cases, and the check of one case on this rank.

A case names a function, every rank's payload (for a world of up to ``MAX_WORLD`` ranks),
a root and a group of a subset of ranks. Each rank runs the call with its own payload and
compares its result with what pickle rebuilds from the payloads it should have received,
using ``payloads.difference`` (types, dtypes, shapes, byte-exact values, writability).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

import distbridge as idist
from distbridge.algorithms import codec
from tests.differential.payloads import PAYLOADS, difference, pickle_round_trip

__all__ = ["FUNCTIONS", "MAX_WORLD", "ObjectCase", "check_case", "object_cases"]

MAX_WORLD = 4
FUNCTIONS = (
    "all_gather_object",
    "gather_object",
    "broadcast_object",
    "scatter_object",
    "all_gather",
    "gather_results",
)


@dataclass(frozen=True, eq=False)
class ObjectCase:
    """``func`` called on every rank; ``payloads[r]`` is rank r's object (scatter_object's
    source sends the members' payloads); ``root`` indexes ``members`` (the group's ranks
    that exist in this world; every rank when None or when none exists)."""

    func: str
    payloads: tuple[Any, ...]
    root: int
    members: tuple[int, ...] | None
    order: str = "interleave"
    total_cut: int = 0  # gather_results: total = results gathered minus this (at least 0)

    def label(self) -> str:
        kinds = [type(p).__name__ for p in self.payloads]
        return f"{self.func}(payload kinds {kinds}, root {self.root}, members {self.members})"


def object_cases() -> st.SearchStrategy[ObjectCase]:
    """Any object collective with every rank's payload, a root and a group."""
    return st.builds(
        ObjectCase,
        func=st.sampled_from(FUNCTIONS),
        payloads=st.tuples(*[PAYLOADS] * MAX_WORLD),
        root=st.integers(0, MAX_WORLD - 1),
        members=st.one_of(
            st.none(),
            st.lists(st.integers(0, MAX_WORLD - 1), min_size=1, max_size=MAX_WORLD, unique=True)
            .map(sorted)
            .map(tuple),
        ),
        order=st.sampled_from(["interleave", "contiguous"]),
        total_cut=st.integers(0, 3),
    )


def _as_object(payload: Any) -> Any:
    """all_gather sends tensors, real numbers (numpy's too, as Python numbers) and str by
    their own rules, tested with the tensor collectives: anything else goes as a pickled
    object, as here."""
    own_rules = isinstance(payload, torch.Tensor) or codec.kind_of(payload) != codec.KIND_OBJECT
    return [payload] if own_rules else payload  # e.g. a 0-d bool array goes as a bool


def _as_items(payload: Any) -> list[Any]:
    return list(payload) if isinstance(payload, list) else [payload]


def _merged(per_rank: list[list[Any]], order: str) -> list[Any]:
    if order == "contiguous":
        return [item for part in per_rank for item in part]
    longest = max(len(part) for part in per_rank)
    return [part[i] for i in range(longest) for part in per_rank if i < len(part)]


def _gather_results(case: ObjectCase, members: list[int], group: Any, rank: int) -> str:
    items = _as_items(case.payloads[rank])
    gathered = [_as_items(case.payloads[m]) for m in members]
    dst = None if case.root % 2 else members[case.root % len(members)]
    if rank not in members:  # sees its own list alone (dst=None) or nothing; no total then
        got = idist.gather_results(items, order=case.order, dst=dst, group=group)
        return difference(items if dst is None else [], got)
    total = max(0, len(_merged(gathered, case.order)) - case.total_cut)
    got = idist.gather_results(items, total=total, order=case.order, dst=dst, group=group)
    expected = _merged([pickle_round_trip(g) for g in gathered], case.order)[:total]
    return difference(expected if dst is None or rank == dst else [], got)


def check_case(case: ObjectCase) -> str:
    """Run ``case`` on this rank: "" when the result is pickle's, else how it differs."""
    world, rank = idist.get_world_size(), idist.get_rank()
    in_world = [m for m in case.members or () if m < world]
    members = in_world or list(range(world))
    group = in_world if case.members is not None and in_world else None
    root = members[case.root % len(members)]
    mine = case.payloads[rank]
    member = rank in members
    if case.func == "gather_results":
        return _gather_results(case, members, group, rank)
    if case.func == "all_gather_object":
        got = idist.all_gather_object(mine, group=group)
        if not member:
            return "" if len(got) == 1 and got[0] is mine else f"outside the group: {got!r}"
        return difference([pickle_round_trip(case.payloads[m]) for m in members], got)
    if case.func == "gather_object":
        got = idist.gather_object(mine, dst=root, group=group)
        expected = [pickle_round_trip(case.payloads[m]) for m in members]
        return difference(expected if rank == root else [], got)
    if case.func == "broadcast_object":
        got = idist.broadcast_object(mine, src=root, group=group)
        if rank == root or not member:
            return "" if got is mine else "the source's (or a non-member's) own object is not kept"
        return difference(pickle_round_trip(case.payloads[root]), got)
    if case.func == "scatter_object":
        sent = [case.payloads[m] for m in members] if rank == root else None
        got = idist.scatter_object(sent, src=root, group=group)
        if not member:
            return "" if got is None else f"outside the group: {got!r}"
        return difference(pickle_round_trip(case.payloads[rank]), got)
    if case.func == "all_gather":
        sent = _as_object(mine)
        got = idist.all_gather(sent, group=group)
        if not member:  # as for tensors, and as ignite: the input back
            return "" if got is sent else f"outside the group: {got!r}"
        return difference([pickle_round_trip(_as_object(case.payloads[m])) for m in members], got)
    raise ValueError(f"unknown function {case.func!r}")
