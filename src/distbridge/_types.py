"""Type aliases shared by the facade and the computation models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

__all__ = ["Group", "Number", "ReduceOp", "SpawnResult"]

#: Reduction names accepted by ``all_reduce`` (case-insensitive; "AVERAGE" is an alias of "AVG").
ReduceOp: TypeAlias = Literal[
    "SUM", "PRODUCT", "MIN", "MAX", "AND", "OR", "AVG", "ADASUM",
    "sum", "product", "min", "max", "and", "or", "avg", "adasum",
]  # fmt: skip

#: A group of ranks: a backend's own group object, or the list of global ranks in it.
Group: TypeAlias = Any | Sequence[int]

#: Python numbers that collectives return with their type unchanged.
Number: TypeAlias = int | float | bool

#: What ``spawn`` returns: each worker's return value, in rank order.
SpawnResult: TypeAlias = list[Any]
