"""The collective ledger: each rank's recent facade collectives, always on, for hang verdicts.

Every public collective of a model (``all_reduce``, ``barrier``, ``broadcast_object``, ...)
is recorded when it starts: its sequence number in its group, its name, what it carried
(dtype and shape of a tensor, else the value's type), the group (its global ranks; the
world is ``None``) and the caller's code position (the first frame outside distbridge). The
group's log then says whether the rank has passed it. Only the last ``capacity`` entries of
each group are kept, in a ring of tuples; rendering (file:line, dtype names) waits until
someone reads the ledger (`snapshot`), so recording costs a few hundred nanoseconds.

Sequence numbers count this rank's calls per group, so the n-th collective of a group is
``#n`` on every member: comparing ledgers across ranks shows who is behind and who called
something else (`distbridge.reliability.verdict`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar

import torch

__all__ = [
    "CAPACITY_ENV_VAR",
    "DEFAULT_CAPACITY",
    "CollectiveLedger",
    "GroupLog",
    "recorded",
]

#: entries kept per group, unless ``DISTBRIDGE_LEDGER_SIZE`` says otherwise
DEFAULT_CAPACITY: Final = 64
CAPACITY_ENV_VAR: Final = "DISTBRIDGE_LEDGER_SIZE"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INSIDE: dict[str, bool] = {}  # file name -> whether it is distbridge's own (cached)
_getframe = sys._getframe
# Dynamo cannot trace frames: traced calls go bare. Dynamo folds this to True; eager it is a
# plain `return False` (a third of `is_compiling`'s cost: no TorchScript check)
_dynamo_compiling = torch.compiler.is_dynamo_compiling
_Tensor = torch.Tensor

Members = tuple[int, ...]
#: (seq, op, dtype or type, shape or None, code, instruction offset)
Entry = tuple[int, str, Any, Any, Any, int]
_Method = TypeVar("_Method", bound=Callable[..., Any])


def _capacity() -> int:
    raw = os.environ.get(CAPACITY_ENV_VAR)
    if raw is None:
        return DEFAULT_CAPACITY
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"{CAPACITY_ENV_VAR}={raw!r} must be a positive number of entries per group; "
            f"unset it for the default ({DEFAULT_CAPACITY})."
        )
    return value


class GroupLog:
    """The recent collectives of one group on this rank.

    Attributes:
        members: the group's global ranks, or None for the world.
        seq: how many collectives of the group this rank started (the last one's number).
        passed: the number of the last one that returned or raised; ``seq > passed`` means
            this rank is inside collective ``seq`` now.
        raised: beside ``ring``, the numbers of the kept ones that raised (0 elsewhere).
    """

    __slots__ = ("capacity", "members", "passed", "raised", "ring", "seq")

    def __init__(self, members: Members | None, capacity: int) -> None:
        self.members = members
        self.capacity = capacity
        self.seq = 0
        self.passed = 0
        self.raised = [0] * capacity
        self.ring: list[Entry | None] = [None] * capacity

    def entries(self, limit: int | None = None) -> list[Entry]:
        """The kept entries (the last ``limit`` of them), oldest first."""
        kept = self.capacity if limit is None else min(limit, self.capacity)
        first = max(1, self.seq - kept + 1)
        got = [self.ring[seq % self.capacity] for seq in range(first, self.seq + 1)]
        return [entry for entry in got if entry is not None]


def _line(code: Any, offset: int) -> int:
    """The source line of instruction ``offset`` in ``code``."""
    line = code.co_firstlineno
    for start, end, number in code.co_lines():
        if number is not None and start <= offset < end:
            return int(number)
        if number is not None and start <= offset:
            line = number
    return int(line)


def _short_path(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if relative.startswith(os.pardir) else relative


def _what(kind: Any, shape: Any) -> str:
    """``float32[3, 4]`` for a tensor, the type's name otherwise."""
    if isinstance(kind, torch.dtype):
        return f"{str(kind).removeprefix('torch.')}{list(shape)}"
    return getattr(kind, "__name__", str(kind))


class CollectiveLedger:
    """The ledger of one model: a `GroupLog` per group, the world's at hand.

    Args:
        members_of: the global ranks of a ``group=`` argument that is not None, or None when
            this rank is not a member (or the argument is not a group: the collective then
            raises its own error and nothing is recorded).
        capacity: entries kept per group (default: ``DISTBRIDGE_LEDGER_SIZE`` or 64).
    """

    def __init__(
        self,
        members_of: Callable[[Any], Members | None],
        capacity: int | None = None,
    ) -> None:
        self.capacity = _capacity() if capacity is None else capacity
        self.world = GroupLog(None, self.capacity)
        self._members_of = members_of
        self._logs: dict[Members, GroupLog] = {}
        # id(group object) -> (a weak reference to it, its members)
        self._known: dict[int, tuple[weakref.ref[Any], Members | None]] = {}

    def log_of(self, group: Any) -> GroupLog | None:
        """The log of ``group`` (not None), made on first use; None when this rank is not a
        member or ``group`` is not a group."""
        known = self._known.get(id(group))
        if known is not None and known[0]() is group:
            members = known[1]
        else:
            try:
                members = self._members_of(group)
            except Exception:  # not a group: the collective says so itself
                return None
            if not isinstance(group, list | tuple):  # a list is new (or changed) each call
                # held weakly: a destroyed process group must be freed at once
                with contextlib.suppress(TypeError):  # no weak reference: asked each time
                    self._known[id(group)] = (weakref.ref(group), members)
        if members is None:
            return None
        log = self._logs.get(members)
        if log is None:
            log = self._logs[members] = GroupLog(members, self.capacity)
        return log

    def logs(self) -> list[GroupLog]:
        """Every group's log, the world's first."""
        return [self.world, *self._logs.values()]

    def version(self) -> int:
        """A number that changes whenever a collective starts or ends (to publish changes)."""
        total = 0
        for log in self.logs():
            total += 2 * log.seq + log.passed
        return total

    def snapshot(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every kept entry (the last ``limit`` per group) as plain data (JSON-ready), per
        group oldest first: ``seq``,
        ``op``, ``group`` (ranks, or None for the world), ``what`` (``float32[3]``), ``site``
        (``train.py:13 in step``) and ``state`` ("done", "raised" or "waiting")."""
        records: list[dict[str, Any]] = []
        for log in self.logs():
            for seq, op, kind, shape, code, offset in log.entries(limit):
                if seq > log.passed:
                    state = "waiting"
                elif log.raised[seq % log.capacity] == seq:
                    state = "raised"
                else:
                    state = "done"
                site = f"{_short_path(code.co_filename)}:{_line(code, offset)} in {code.co_name}"
                records.append(
                    {
                        "seq": seq,
                        "op": op,
                        "group": None if log.members is None else list(log.members),
                        "what": _what(kind, shape),
                        "site": site,
                        "state": state,
                    }
                )
        return records


def _outside(frame: Any) -> Any:
    """The first frame outside distbridge from ``frame`` back (``frame`` itself if it is
    outside); the last one reached if all are inside."""
    while True:
        name = frame.f_code.co_filename
        inside = _INSIDE.get(name)
        if inside is None:
            inside = _INSIDE[name] = name.startswith(_PACKAGE)
        back = frame.f_back
        if not inside or back is None:  # outside, or called from distbridge all the way down
            return frame
        frame = back


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


def recorded(op: str, x_at: int = 0, group_at: int = -1) -> Callable[[_Method], _Method]:
    """Decorate a model's public collective so that ``self.ledger`` records each call.

    Args:
        op: the name recorded (``"all_reduce"``).
        x_at: the position of the payload argument after ``self`` (-1: none, a barrier).
        group_at: the position of ``group`` after ``self`` (-1: keyword only).

    The undecorated method stays reachable as ``__wrapped__`` (the bench compares both).
    The wrapper runs on every collective, so its common path is written out in full: up to
    four positional arguments arrive in positional-only slots and are passed on as they
    came (no ``*args`` tuple, no ``**kwargs`` dict to forward), a caller outside distbridge
    costs one ``sys._getframe(1)`` and one dict look-up of its file name (the facade's
    caller is its ``f_back``; deeper callers are found by `_outside`), and the entry is one
    tuple in a preallocated ring (nothing is formatted). Under ``torch.compile`` (Dynamo
    tracing) nothing is recorded.
    """
    if x_at >= _SLOTS or group_at >= _SLOTS or x_at not in (-1, 0):
        raise ValueError(
            f"recorded({op!r}, x_at={x_at}, group_at={group_at}): the payload comes first "
            f"(x_at=0) or not at all (-1), and group within the first {_SLOTS} positions."
        )

    def decorate(method: _Method) -> _Method:
        payload = x_at == 0
        x_name = _payload_name(method, x_at)

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
            inside = _INSIDE.get(code.co_filename)
            if inside:  # the facade: its caller is the user's code, most often
                back = frame.f_back
                if back is not None:
                    frame = back
                    code = frame.f_code
                    if _INSIDE.get(code.co_filename) is not False:
                        frame = _outside(frame)
                        code = frame.f_code
            elif inside is None:  # a file not seen yet
                frame = _outside(frame)
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

        return wrapper  # type: ignore[return-value]

    return decorate
