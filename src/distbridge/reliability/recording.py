"""Recording each public collective of a model in its ledger (`distbridge.reliability.ledger`).

`recorded` decorates the model's methods (``all_reduce``, ``barrier``, ...). Each call
starts an entry in its group's log (sequence number, op, payload's dtype and shape or type,
the caller's code position outside distbridge), calls the method and marks the entry passed
(or raised). Under ``torch.compile`` (Dynamo tracing) nothing is recorded: the call goes to
the method as it is.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any, Final, NamedTuple, TypeVar

import torch

from distbridge._frames import SEEN, outside
from distbridge.reliability.ledger import Entry

__all__ = ["Recording", "recorded"]

_getframe = sys._getframe
_seen = SEEN.get  # file name -> whether it is distbridge's own, None: not asked yet
# Dynamo cannot trace frames: traced calls go bare. Dynamo folds this to True; eager it is a
# plain `return False` (a third of `is_compiling`'s cost: no TorchScript check)
_dynamo_compiling = torch.compiler.is_dynamo_compiling
_Tensor = torch.Tensor
_Method = TypeVar("_Method", bound=Callable[..., Any])


class _NotGiven:
    """The default of the wrapper's positional slots: the caller passed nothing there."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not given>"


_NO: Final = _NotGiven()
_SLOTS: Final = 4  # positional arguments after self that the wrapper forwards without packing


def _forward(method: Callable[..., Any], self: Any, given: tuple[Any, ...], kwargs: Any) -> Any:
    """Call ``method`` with the slots that were given (a prefix of them), then the rest."""
    end = 0
    while end < len(given) and given[end] is not _NO:
        end += 1
    return method(self, *given[:end], **kwargs)


def _payload_name(method: Callable[..., Any], x_at: int) -> str:
    """The name of the parameter at ``x_at`` after ``self`` (for a payload passed by keyword);
    "" for none."""
    if x_at < 0:
        return ""
    names = list(inspect.signature(method).parameters)[1:]
    return names[x_at]


def _wrapper(
    method: Callable[..., Any], op: str, payload: bool, x_name: str, group_at: int
) -> Callable[..., Any]:
    """The recording wrapper: its common path is written out in full (up to four
    positional arguments arrive in positional-only slots and are passed on as they came; a
    caller outside distbridge costs one ``sys._getframe(1)`` and one dict look-up of its file
    name; the facade's caller is its ``f_back``; the entry is one tuple in a preallocated
    ring)."""

    @functools.wraps(method)
    def wrapper(
        self: Any,
        a0: Any = _NO,
        a1: Any = _NO,
        a2: Any = _NO,
        a3: Any = _NO,
        /,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if _dynamo_compiling():  # the graph traces the collective: nothing to record
            return _forward(method, self, (a0, a1, a2, a3, *args), kwargs)
        if group_at == 2:
            group = a2
        elif group_at == 1:
            group = a1
        elif group_at == 0:
            group = a0
        elif group_at == 3:
            group = a3
        else:
            group = _NO
        if group is _NO:
            group = kwargs.get("group") if kwargs else None
        ledger = self.ledger
        log = ledger.world if group is None else ledger.log_of(group)
        if log is None:  # not a member, or not a group: the collective says so itself
            return _forward(method, self, (a0, a1, a2, a3, *args), kwargs)
        frame = _getframe(1)  # the caller: the facade, or whoever called the model
        code = frame.f_code
        inside = _seen(code.co_filename)
        if inside:  # the facade: its caller is the user's code, most often
            back = frame.f_back
            if back is not None:
                frame = back
                code = frame.f_code
                if _seen(code.co_filename) is not False:
                    frame = outside(frame)
                    code = frame.f_code
        elif inside is None:  # a file not seen yet
            frame = outside(frame)
            code = frame.f_code
        log.seq = seq = log.seq + 1
        x = a0 if payload else None
        if x is _NO:
            x = kwargs.get(x_name) if kwargs else None
        if x.__class__ is _Tensor:
            entry: Entry = (seq, op, x.dtype, x.shape, code, frame.f_lasti)
        else:
            entry = (seq, op, x.__class__, None, code, frame.f_lasti)
        log.ring[seq % log.capacity] = entry
        try:
            if args or kwargs:
                result = _forward(method, self, (a0, a1, a2, a3, *args), kwargs)
            elif a1 is _NO:
                result = method(self) if a0 is _NO else method(self, a0)
            elif a2 is _NO:
                result = method(self, a0, a1)
            elif a3 is _NO:
                result = method(self, a0, a1, a2)
            else:
                result = method(self, a0, a1, a2, a3)
        except BaseException:
            log.passed = log.seq
            log.raised[seq % log.capacity] = seq
            raise
        log.passed = log.seq
        return result

    return wrapper


class Recording(NamedTuple):
    """How a method is recorded: `recorded`'s arguments."""

    op: str
    x_at: int
    group_at: int


def recorded(op: str, x_at: int = 0, group_at: int = -1) -> Callable[[_Method], _Method]:
    """Decorate a model's public collective so that ``self.ledger`` records each call.

    Args:
        op: the name recorded (``"all_reduce"``).
        x_at: the position of the payload argument after ``self`` (-1: none, a barrier).
        group_at: the position of ``group`` after ``self`` (-1: keyword only).

    The undecorated method stays reachable as ``__wrapped__`` (the bench compares both), and
    how it is recorded as ``recording`` (a `Recording`). Under ``torch.compile`` (Dynamo
    tracing) nothing is recorded.
    """
    if x_at >= _SLOTS or group_at >= _SLOTS or x_at not in (-1, 0):
        raise ValueError(
            f"recorded({op!r}, x_at={x_at}, group_at={group_at}): the payload comes first "
            f"(x_at=0) or not at all (-1), and group within the first {_SLOTS} positions."
        )

    def decorate(method: _Method) -> _Method:
        wrapper = _wrapper(method, op, x_at == 0, _payload_name(method, x_at), group_at)
        wrapper.recording = Recording(op, x_at, group_at)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
