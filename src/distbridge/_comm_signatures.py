"""The facade's object collectives with detectron2's ``comm`` signatures (``data``,
``input_dict``, no ``serializer``; ``reduce_dict``'s keys sorted); ``distbridge.compat.detectron2``
gives them detectron2's import path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distbridge import objects
from distbridge._types import Group

__all__ = ["all_gather", "gather", "reduce_dict"]


def all_gather(data: Any, group: Group | None = None) -> list[Any]:
    """Every rank's ``data`` (any picklable object), in rank order, on every rank.

    Example:
        >>> comm.all_gather({"rank": comm.get_rank()})
        [{'rank': 0}, {'rank': 1}]   # on each of 2 ranks
    """
    return objects.all_gather_object(data, group)


def gather(data: Any, dst: int = 0, group: Group | None = None) -> list[Any]:
    """Every rank's ``data`` on rank ``dst`` (a list in rank order); ``[]`` on the others.

    Example:
        >>> comm.gather(comm.get_rank() * 10)
        [0, 10]   # on rank 0 of 2; [] on rank 1
    """
    return objects.gather_object(data, dst, group)


def reduce_dict(input_dict: Mapping[str, Any], average: bool = True) -> dict[str, Any]:
    """The values of ``input_dict`` summed (averaged by default) over all ranks, on rank 0,
    keys in sorted order as detectron2 returns them; every rank must pass the same keys.

    Example:
        >>> comm.reduce_dict({"loss": torch.tensor(float(comm.get_rank()))})
        {'loss': tensor(0.5000)}   # on rank 0 of 2; rank 1 gets its input back
    """
    reduced = objects.reduce_dict(input_dict, average)
    return {key: reduced[key] for key in sorted(reduced)}
