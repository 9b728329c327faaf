"""Whether a model's context is still live, asked by the threads reliability runs beside it
(the stack watcher, the ledger reporter) without keeping a finalized model alive."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol

__all__ = ["HasContext", "while_current"]


class HasContext(Protocol):
    """What `while_current` asks of a model."""

    def is_current(self) -> bool: ...


def while_current(model: HasContext) -> Callable[[], bool]:
    """A check that is True while ``model`` exists and its context is the live one; the model
    is held weakly."""
    ref = weakref.ref(model)

    def alive() -> bool:
        current = ref()
        return current is not None and current.is_current()

    return alive
