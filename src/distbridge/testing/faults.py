"""Deterministic fault injection: make a rank fail at its n-th call of a collective, e.g.
``with faults.inject(faults.Raise(RuntimeError("boom")), op="all_reduce", call=2, rank=1):``.

An action decides what happens at that call: `Raise`, `Exit`, `Kill`, `Sleep` (then run the
call), `Skip` (do not run it), or send a wrong argument (`WrongDtype`, `WrongShape`,
`Transform`). It fires once, at call ``call`` counted from the block's start, on the ranks
named; every other call runs unchanged. While the block runs, the collective named is
shadowed on the ranks named only (``testing/_interpose.py``); elsewhere it costs nothing.
Faults are per process: inject them in the function each rank runs.
"""

from __future__ import annotations

import math
import os
import signal as signals
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from distbridge import _state
from distbridge.errors import suggest
from distbridge.models.base import COLLECTIVES
from distbridge.testing._interpose import Call, Layer, installed
from distbridge.testing._worker import exit_now

__all__ = [
    "Action",
    "Exit",
    "FaultCall",
    "Injection",
    "Kill",
    "Raise",
    "Skip",
    "Sleep",
    "Transform",
    "WrongDtype",
    "WrongShape",
    "inject",
]


#: The collective call a fault fires at: ``data``, ``run()``, ``op``, ``args``, ``kwargs``.
FaultCall = Call


class Action(ABC):
    """What an injected fault does at its call (see the subclasses; subclass it for more)."""

    @abstractmethod
    def fire(self, call: FaultCall) -> Any:
        """Do the fault; ``call.run()`` runs the collective. Returns what the call returns."""


@dataclass(frozen=True)
class Raise(Action):
    """Raise ``error`` (an exception instance or class) instead of running the call."""

    error: BaseException | type[BaseException]

    def __post_init__(self) -> None:
        ok = isinstance(self.error, BaseException) or (
            isinstance(self.error, type) and issubclass(self.error, BaseException)
        )
        if not ok:
            raise TypeError(f"Raise needs an exception, got {self.error!r}.")

    def fire(self, call: FaultCall) -> Any:
        raise self.error


@dataclass(frozen=True)
class Exit(Action):
    """End the process with exit code ``code`` at once, as a crash does (``os._exit``: no
    ``finally`` blocks, no ``atexit``; stdout and stderr are flushed first)."""

    code: int = 1

    def __post_init__(self) -> None:
        code = self.code
        if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code < 256:
            raise ValueError(f"Exit code must be an int from 0 to 255, got {self.code!r}.")

    def fire(self, call: FaultCall) -> Any:
        exit_now(self.code)


@dataclass(frozen=True)
class Kill(Action):
    """Send this process ``signal`` (default SIGKILL: it dies at once). A signal it survives
    (one with a handler) lets the call run afterwards."""

    signal: int = signals.SIGKILL

    def __post_init__(self) -> None:
        if self.signal not in signals.valid_signals():
            raise ValueError(f"Kill needs a signal number, got {self.signal!r}.")

    def fire(self, call: FaultCall) -> Any:
        os.kill(os.getpid(), self.signal)
        return call.run()


@dataclass(frozen=True)
class Sleep(Action):
    """Sleep ``seconds``, then run the call: a slow rank (the others wait in the call)."""

    seconds: float

    def __post_init__(self) -> None:
        ok = isinstance(self.seconds, (int, float)) and not isinstance(self.seconds, bool)
        if not ok or not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"Sleep needs a finite number of seconds >= 0, got {self.seconds!r}.")

    def fire(self, call: FaultCall) -> Any:
        time.sleep(self.seconds)
        return call.run()


@dataclass(frozen=True)
class Skip(Action):
    """Do not run the call: return its first argument unchanged (None for ``barrier``), as
    a rank that forgot the collective would go on."""

    def fire(self, call: FaultCall) -> Any:
        return call.data


class _TensorAction(Action):
    """Run the call with `change` applied to its tensor argument (each tensor of a list)."""

    @abstractmethod
    def change(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor to send instead of ``tensor``."""

    def fire(self, call: FaultCall) -> Any:
        value = call.data
        if isinstance(value, torch.Tensor):
            return call.run(self.change(value))
        is_list = isinstance(value, (list, tuple)) and len(value) > 0
        if not is_list or not all(isinstance(t, torch.Tensor) for t in value):
            raise TypeError(
                f"{type(self).__name__} changes a tensor argument, but this {call.op} call "
                f"got {type(value).__name__}: {value!r}. Inject it at a call with a tensor."
            )
        return call.run([self.change(t) for t in value])


@dataclass(frozen=True)
class Transform(_TensorAction):
    """Run the call with ``fn(tensor)`` in place of its tensor argument."""

    fn: Callable[[torch.Tensor], torch.Tensor]

    def change(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.fn(tensor)


@dataclass(frozen=True)
class WrongDtype(_TensorAction):
    """Run the call with its tensor argument converted to ``dtype``."""

    dtype: torch.dtype

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"WrongDtype needs a torch.dtype, got {self.dtype!r}.")

    def change(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.dtype)


@dataclass(frozen=True)
class WrongShape(_TensorAction):
    """Run the call with zeros of ``shape`` (default: flat, one element more than the
    argument) in its tensor argument's place, with its dtype and device."""

    shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.shape is not None:
            shape = tuple(self.shape)
            if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                raise ValueError(f"WrongShape needs a shape of ints >= 0, got {self.shape!r}.")
            object.__setattr__(self, "shape", shape)

    def change(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.new_zeros(self.shape if self.shape is not None else (tensor.numel() + 1,))


@dataclass(eq=False)
class Injection(Layer):
    """A fault of an `inject` block on this rank: ``calls`` seen so far, whether it ``fired``."""

    action: Action
    op: str
    call: int
    active: bool  # False on a rank the fault does not target
    calls: int = 0
    fired: bool = False

    def __post_init__(self) -> None:
        self.ops = (self.op,) if self.active else ()

    def intercept(self, call: Call) -> Any:
        """Count the call; at the chosen one, fire the action."""
        self.calls += 1
        if self.calls != self.call:
            return call.run()
        self.fired = True
        try:
            return self.action.fire(call)
        except Exception as error:  # say where it came from (Python 3.11+: a note)
            note = f"(distbridge.testing.faults: {self.action!r} at {self.op} call {self.call})"
            if hasattr(error, "add_note") and note not in getattr(error, "__notes__", ()):
                error.add_note(note)
            raise


def _ranks(rank: int | Collection[int] | None, world: int) -> frozenset[int] | None:
    if rank is None:
        return None
    chosen = [rank] if isinstance(rank, int) else list(rank)
    for r in chosen:
        if not isinstance(r, int) or isinstance(r, bool):
            raise TypeError(f"rank must be an int, a collection of ints or None, got {rank!r}.")
        if not 0 <= r < world:
            raise ValueError(
                f"rank={r} is not a rank of this world of size {world}; inject the fault "
                f"inside the function every rank runs (spawn's workers), with a rank < {world}."
            )
    return frozenset(chosen)


@contextmanager
def inject(
    action: Action,
    *,
    op: str,
    call: int = 1,
    rank: int | Collection[int] | None = None,
) -> Iterator[Injection]:
    """Make ``action`` happen at this rank's ``call``-th ``op`` in the block, if this rank is
    ``rank`` (or in ``rank``; None: every rank); on the other ranks the block does nothing.

    ``op`` is the collective's facade name (``"all_reduce"``, ``"barrier"``, ...); ``call``
    counts from 1 at the block's start (calls the model makes inside another collective do
    not count). It yields the `Injection`: ``fired`` says whether the fault happened,
    ``calls`` how many ``op`` calls this rank made in the block.

    Example:
        >>> with inject(Skip(), op="barrier", call=1, rank=1) as fault:
        ...     idist.barrier()
        >>> fault.fired   # on rank 1 (rank 0 waits for it: a hang, or PeerFailed)
        True
    """
    if not isinstance(action, Action):
        raise TypeError(
            f"action must be a fault action such as faults.Raise(RuntimeError('boom')), "
            f"got {action!r}."
        )
    if not isinstance(op, str):
        raise TypeError(f"op must be the name of a collective (a str), got {op!r}.")
    if op not in COLLECTIVES:
        raise ValueError(
            f"op={op!r} is not a distbridge collective. Choose one of: "
            f"{', '.join(COLLECTIVES)}.{suggest(op, COLLECTIVES)}"
        )
    if not isinstance(call, int) or isinstance(call, bool) or call < 1:
        raise ValueError(f"call must be an int >= 1 (1: the first {op} call), got {call!r}.")
    model = _state.current()
    ranks = _ranks(rank, model.get_world_size())
    injection = Injection(action, op, call, ranks is None or model.get_rank() in ranks)
    with installed(injection, model):
        yield injection
