"""Running one facade call with bad inputs and recording what it raised.

A `Case` is plain data (picklable), identical on every rank: an input that is bad is bad
everywhere alike, so every collective stays matched. Values that cannot travel to a worker
(a lock, a lambda) are named by a `Built` marker and made where the case runs; a list with
one entry per rank is a `PerRank` marker, so a case means the same in a world of 1 and of 2.
The strategies that draw cases are in ``tests/property_cases.py``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import distbridge as idist
from distbridge.errors import DistributedError

__all__ = [
    "DOCUMENTED",
    "Built",
    "Case",
    "Opaque",
    "Outcome",
    "PerRank",
    "normalize",
    "run_case",
]

#: What a bad argument may raise: plain TypeError / ValueError, or the DistributedError family.
DOCUMENTED = (TypeError, ValueError, DistributedError)


class Opaque:
    """An object with a stable repr (a bare ``object()`` prints its address)."""

    def __repr__(self) -> str:
        return "Opaque()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque)

    def __hash__(self) -> int:
        return 1


@dataclass(frozen=True)
class PerRank:
    """A list with one ``item`` per rank of the case's group (when it is a list no longer
    than the world), else of the world; built where the case runs."""

    item: Any


@dataclass(frozen=True)
class Built:
    """A value that cannot be pickled to a worker, made where the case runs."""

    what: str  # "lock", "lambda", "deep", "sparse", "nine_dims", "strided"


def _build(what: str) -> Any:
    if what == "lock":
        return threading.Lock()
    if what == "lambda":
        return lambda: None
    if what == "deep":  # deeper than pickle's recursion limit
        deep: list[Any] = []
        for _ in range(100_000):
            deep = [deep]
        return deep
    if what == "sparse":
        return torch.eye(2).to_sparse()
    if what == "nine_dims":
        return torch.zeros((1,) * 9)
    if what == "strided":  # not contiguous
        return torch.arange(6.0).reshape(2, 3).t()
    raise ValueError(f"unknown Built({what!r})")


def _resolve(value: Any, ranks: int) -> Any:
    if isinstance(value, PerRank):
        return [_resolve(value.item, ranks) for _ in range(ranks)]
    if isinstance(value, Built):
        return _build(value.what)
    if isinstance(value, torch.Tensor):
        return value.clone()  # in-place collectives must not change the case
    if isinstance(value, list):
        return [_resolve(v, ranks) for v in value]
    if isinstance(value, tuple):
        return tuple(_resolve(v, ranks) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, ranks) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Case:
    """One call: ``distbridge.<func>(*args, **kwargs)`` (markers resolved where it runs)."""

    func: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()

    def label(self) -> str:
        parts = [_short(a) for a in self.args] + [f"{k}={_short(v)}" for k, v in self.kwargs]
        return f"{self.func}({', '.join(parts)})"


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor({value.dtype}, {list(value.shape)})"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


@dataclass(frozen=True)
class Outcome:
    """What one case did on one rank: ``error`` is "" when the call returned."""

    label: str
    error: str  # the exception's class name, or ""
    message: str
    documented: bool


# ---- running a case ---------------------------------------------------------------------------


def _one_rank_only(rank: Any, with_barrier: Any) -> Any:
    return idist.one_rank_only(rank, with_barrier)(lambda: "ran")()


def _one_rank_first(rank: Any, local: Any, timeout: Any) -> None:
    with idist.one_rank_first(rank, local, timeout):
        pass


def _set_local_rank(index: Any) -> None:
    before = idist.get_local_rank()
    try:
        idist.set_local_rank(index)
    finally:
        idist.set_local_rank(before)  # a valid index would change later cases


_WRAPPERS: dict[str, Callable[..., Any]] = {
    "one_rank_only": _one_rank_only,
    "one_rank_first": _one_rank_first,
    "set_local_rank": _set_local_rank,
}


def run_case(case: Case) -> Outcome:
    """Run ``case`` on this rank and record what it raised (or that it returned)."""
    world, group = idist.get_world_size(), dict(case.kwargs).get("group")
    fits = isinstance(group, (list, tuple, range)) and 0 < len(group) <= world
    ranks = len(group) if fits else world  # type: ignore[arg-type]
    args = _resolve(case.args, ranks)
    kwargs = {k: _resolve(v, ranks) for k, v in case.kwargs}
    func = _WRAPPERS.get(case.func) or getattr(idist, case.func)
    try:
        func(*args, **kwargs)
    except Exception as err:  # recorded, judged by the test
        message = str(err)
        return Outcome(case.label(), type(err).__name__, message, isinstance(err, DOCUMENTED))
    return Outcome(case.label(), "", "", True)


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_WORLD_SIZE_PATTERNS = (
    (re.compile(r"world of size \d+"), "world of size W"),
    (re.compile(r"valid ranks: 0\.\.\d+"), "valid ranks: 0..W-1"),
    (
        re.compile(r"rank should be between 0 and \d+, but given"),
        "rank should be between 0 and W-1, but given",
    ),
    (re.compile(r"the world has \d+ ranks?\."), "the world has W ranks."),
    (re.compile(r"this node has \d+ process(es)?\."), "this node has W processes."),
    (re.compile(r"only \d+ results were gathered"), "only N results were gathered"),
    (re.compile(r"a list of \d+ (tensors|objects)"), r"a list of N \1"),
    (re.compile(r"Group ranks \[[^\]]*\] are outside"), "Group ranks [...] are outside"),
)


def normalize(message: str) -> str:
    """``message`` with what legitimately differs between a world of 1 and of 2 (the world
    size) and between processes (object addresses) replaced by placeholders."""
    message = _ADDRESS.sub(" at 0x?", message)
    for pattern, replacement in _WORLD_SIZE_PATTERNS:
        message = pattern.sub(replacement, message)
    return message
