"""Whether a model's context is still live, asked by the threads reliability runs beside it
(the stack watcher, the ledger reporter) without keeping a finalized model alive."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = ["while_current"]


def while_current(model: ModelContract) -> Callable[[], bool]:
    """A check that is True while ``model`` exists and its context is the live one; the model
    is held weakly."""
    ref = weakref.ref(model)

    def alive() -> bool:
        current = ref()
        return current is not None and current.is_current()

    return alive
