"""Type aliases shared by the facade and the computation models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

__all__ = ["Group", "SpawnResult"]

#: A group of ranks: a backend's own group object, or the list of global ranks in it.
Group: TypeAlias = Any | Sequence[int]

#: What ``spawn`` returns: each worker's return value, in rank order.
SpawnResult: TypeAlias = list[Any]
