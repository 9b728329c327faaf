"""Debug mode: before each collective, the ranks compare what they are about to run.

Turned on by ``initialize(..., debug=True)``, ``spawn(..., debug=True)`` or the environment
variable ``DISTBRIDGE_DEBUG=1`` (read whenever a model is created, so adopted contexts and
spawned workers follow it). Each member of the group writes its `Fingerprint` to the
coordination store under the group's next sequence number, waits for the other members'
and compares. The store, not the communicator, carries it: a rank on another code path
is reported instead of wedging the backend. A mismatch, or a member that does not arrive
within ``DISTBRIDGE_DEBUG_TIMEOUT`` seconds (default 60), raises `CollectiveMismatch` on
every rank that arrived, with a table of what each rank called and where.

Protocol for sequence number ``n`` of a group, under ``debug/<group>/<n>/``: each member
sets ``<rank>``, waits for the others' keys, then proposes an outcome with one atomic
``compare_set("outcome", "", ...)``: "ok" when every key arrived, else who is missing.
The first proposal wins, so every rank reaches the same verdict even when a late rank
arrives just after another gave up. After an "ok", each member counts itself in ``done``;
the last one deletes the keys, so the store does not grow.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from distbridge.algorithms import codec
from distbridge.algorithms.groups import NOT_A_MEMBER
from distbridge.errors import CollectiveMismatch
from distbridge.reliability.fingerprint import Fingerprint, call_site, describe
from distbridge.reliability.hang.engine_trace import group_text
from distbridge.reliability.hang.ledger import positive_env
from distbridge.reliability.timed_barrier import await_keys, group_tag

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "DEFAULT_TIMEOUT",
    "ENV_VAR",
    "TIMEOUT_ENV_VAR",
    "CollectiveChecker",
    "debug_env",
    "debug_flag",
    "enabled_by_env",
]

ENV_VAR = "DISTBRIDGE_DEBUG"
TIMEOUT_ENV_VAR = "DISTBRIDGE_DEBUG_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")
_OK = "ok"


def enabled_by_env() -> bool:
    """Whether ``DISTBRIDGE_DEBUG`` turns the debug mode on (1, true, yes, on)."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw in _ON:
        return True
    if raw not in _OFF:
        warnings.warn(
            f"{ENV_VAR}={os.environ[ENV_VAR]!r} is neither 1 nor 0; the debug mode stays off.",
            stacklevel=2,
        )
    return False


def debug_flag(value: object) -> bool | None:
    """``debug=`` as given to ``initialize`` or ``spawn``: None (follow the environment) or a
    bool; TypeError otherwise."""
    if value is None or isinstance(value, bool):
        return value
    raise TypeError(f"debug must be True or False, got {value!r}.")


@contextmanager
def debug_env(debug: object) -> Iterator[None]:
    """While inside, ``DISTBRIDGE_DEBUG`` says ``debug`` (None: leave it), so that processes
    started meanwhile (spawn's workers) inherit it; restored afterwards."""
    flag = debug_flag(debug)
    if flag is None:
        yield
        return
    old = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = "1" if flag else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = old


class CollectiveChecker:
    """The debug-mode state of one model: a sequence number per group of ranks."""

    def __init__(self) -> None:
        self._sequence: dict[tuple[int, ...], int] = {}
        self._timeout: float | None = None

    def check(
        self, model: ModelContract, call: str, group: object, args: Mapping[str, Any]
    ) -> None:
        """Compare ``call`` with the other members of ``group``; `CollectiveMismatch` on every
        rank when they differ or one does not arrive. Without peers (a world of one, a
        one-rank group, a rank outside ``group``), or with a ``group`` the collective will
        reject anyway, returns at once."""
        store = model._coordination_store()
        if store is None:
            return
        members = _members(model, group)
        if members is None or len(members) < 2:
            return
        if self._timeout is None:
            self._timeout = positive_env(TIMEOUT_ENV_VAR, DEFAULT_TIMEOUT, float, "seconds")

        def op_name(op: object) -> str:
            try:
                return codec.canonical_op(op, model.reduce_ops, model.name)
            except (TypeError, ValueError):
                return repr(op)

        fields, notes = describe(call, args, op_name)
        mine = Fingerprint(call, fields, notes, members, call_site())
        seq = self._sequence.get(members, 0)
        self._sequence[members] = seq + 1
        whole = len(members) == model.get_world_size()
        where = f"collective #{seq + 1} of {group_text(None if whole else members)}"
        prefix = f"debug/{group_tag(members)}/{seq}/"
        _exchange(store, prefix, model.get_rank(), mine, self._timeout, where)


def _members(model: ModelContract, group: object) -> tuple[int, ...] | None:
    """The sorted global ranks of ``group`` when this rank is one; None otherwise or when
    ``group`` is invalid (the collective raises its own error then)."""
    world, rank = model.get_world_size(), model.get_rank()
    if group is None:
        return tuple(range(world))
    try:
        if isinstance(group, (list, tuple, range)):
            if not all(type(r) is int and 0 <= r < world for r in group):
                return None
            members = tuple(sorted(set(group)))
        else:  # a backend group, or a DeviceMesh (whose group resolve gives)
            resolved = model.groups.resolve(group)
            if resolved is NOT_A_MEMBER:
                return None
            members = tuple(sorted(model._group_members(resolved)))
    except (TypeError, ValueError, RuntimeError):
        return None
    return members if rank in members else None


def _exchange(
    store: Any, prefix: str, rank: int, mine: Fingerprint, timeout: float, where: str
) -> None:
    """Publish ``mine``, wait for the other members', agree on an outcome, compare."""
    members = mine.members
    keys = {r: f"{prefix}{r}" for r in members}
    store.set(keys[rank], mine.to_json())
    verdict = _OK
    others = [keys[r] for r in members if r != rank]
    doing = f"in {mine.call} (debug mode: {where})"
    if not await_keys(store, others, time.monotonic() + timeout, rank, doing):
        missing = [r for r in members if not store.check([keys[r]])]
        if missing:
            verdict = json.dumps({"waiter": rank, "missing": missing})
    outcome = store.compare_set(f"{prefix}outcome", "", verdict).decode()
    if outcome != _OK:
        prints = _fetch(store, {r: key for r, key in keys.items() if store.check([key])})
        raise _timeout_error(json.loads(outcome), prints, members, timeout, where)
    prints = _fetch(store, keys)
    if store.add(f"{prefix}done", 1) == len(members):  # the last member to compare cleans up
        for key in (*keys.values(), f"{prefix}outcome", f"{prefix}done"):
            store.delete_key(key)
    if not all(p.agrees_with(mine) for p in prints.values()):
        raise _mismatch_error(prints, where)


def _fetch(store: Any, keys: Mapping[int, str]) -> dict[int, Fingerprint]:
    """The fingerprints under ``keys`` (rank -> key), in one request."""
    raw = store.multi_get(list(keys.values()))
    return {r: Fingerprint.from_json(text) for r, text in zip(keys, raw, strict=True)}


# ---- reports ------------------------------------------------------------------------------


def _table(prints: Mapping[int, Fingerprint], members: tuple[int, ...]) -> str:
    rows = [("rank", "called", "at")]
    for r in members:
        p = prints.get(r)
        rows.append((str(r), p.text(), p.site) if p else (str(r), "(did not arrive)", "?"))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(
        f"  {a.ljust(widths[0])}  {b.ljust(widths[1])}  {c}".rstrip() for a, b, c in rows
    )


def _differences(prints: Mapping[int, Fingerprint]) -> list[str]:
    found = list(prints.values())
    if len({p.call for p in found}) > 1:
        return ["the collective called"]
    names = list(dict.fromkeys(k for p in found for k, _ in p.fields))
    differ = [n for n in names if len({dict(p.fields).get(n) for p in found}) > 1]
    if len({p.members for p in found}) > 1:
        differ.append("group members")
    return differ


def _error(
    message: str, prints: Mapping[int, Fingerprint], missing: tuple[int, ...]
) -> CollectiveMismatch:
    return CollectiveMismatch(
        message,
        fingerprints={r: p.text() for r, p in prints.items()},
        call_sites={r: p.site for r, p in prints.items()},
        missing_ranks=missing,
    )


def _mismatch_error(prints: Mapping[int, Fingerprint], where: str) -> CollectiveMismatch:
    members = tuple(sorted(set().union(*(p.members for p in prints.values()))))
    message = (
        f"Debug mode: the ranks disagree at {where}: they differ in "
        f"{', '.join(_differences(prints))}. What each rank called:\n"
        f"{_table(prints, members)}\n"
        "Every rank must call the same collectives, in the same order, with matching "
        "arguments: make the differing rank take the same code path."
    )
    return _error(message, prints, ())


def _timeout_error(
    outcome: Mapping[str, Any],
    prints: Mapping[int, Fingerprint],
    members: tuple[int, ...],
    timeout: float,
    where: str,
) -> CollectiveMismatch:
    missing = tuple(int(r) for r in outcome["missing"])
    who = f"rank {missing[0]}" if len(missing) == 1 else f"ranks {list(missing)}"
    message = (
        f"Debug mode: {who} did not reach {where} within {timeout:g} s "
        f"({TIMEOUT_ENV_VAR}); rank {outcome['waiter']} stopped waiting. A missing rank "
        "skipped this collective, is still busy elsewhere, or has stopped. What each rank "
        f"called:\n{_table(prints, members)}"
    )
    return _error(message, prints, missing)
