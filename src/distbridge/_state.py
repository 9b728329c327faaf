"""The facade's state: which computation model is active (and the local rank hint).

It is the one module that rebinds module globals (``global``). Other process-wide state
is kept where its owner is: what the engines went through in ``models/_engine_state.py``,
and caches (the ledger's file names, the native model's reduce ops) beside their code.

``current()`` is on every facade call's path, so it does one cheap check: is the
active model's context still the live one? When it is not (a process group was
created or destroyed outside distbridge), the registry finds the live context,
without communicating, or falls back to the serial model. The collectives write the
same check out (``active`` and ``resync``): one call fewer on their path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from distbridge._registry import registry
from distbridge.models.base import ComputationModel
from distbridge.models.serial import SerialModel

__all__ = [
    "activated",
    "active",
    "current",
    "install",
    "reset",
    "resync",
    "set_local_rank_hint",
]


#: the active model (read it through ``current()``, or check ``active.is_current()`` first)
active: ComputationModel = SerialModel(registry)
_local_rank_hint: int | None = None


def current() -> ComputationModel:
    """The active model; adopts a context created outside distbridge on first use."""
    return active if active.is_current() else resync()


def install(model: ComputationModel) -> None:
    """Make ``model`` the active one (used by ``initialize`` and the launchers)."""
    global active
    active = model


@contextmanager
def activated(model: ComputationModel) -> Iterator[ComputationModel]:
    """Make ``model`` the active one for the block, and forget it after (``reset``).

    ``spawn`` hands this to the spawners: each worker runs its function inside it. A module
    function, so it reaches the workers by pickle, by reference."""
    install(model)
    try:
        yield model
    finally:
        reset()


def resync() -> ComputationModel:
    """Find the live context again: adopt it, or fall back to the serial model. The active
    model stays when the live context is still its own (``sync()`` after ``initialize()``
    keeps what ``initialize`` set up: the failure watcher, the debug mode, the variables
    that ``finalize`` restores)."""
    adopted = registry.detect()
    if adopted is not None and type(adopted) is type(active) and active.is_current():
        adopted = active
    model: ComputationModel = adopted if adopted is not None else SerialModel(registry)
    if adopted is not None and _local_rank_hint is not None:
        adopted.set_local_rank(_local_rank_hint)
    install(model)
    return model


def reset() -> None:
    """Forget the active model and the local-rank hint; nothing is destroyed."""
    global _local_rank_hint
    _local_rank_hint = None
    install(SerialModel(registry))


def set_local_rank_hint(index: int) -> None:
    """Remember ``index`` as this process's local rank for contexts adopted from now on."""
    global _local_rank_hint
    _local_rank_hint = index
