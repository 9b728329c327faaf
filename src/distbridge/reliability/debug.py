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

A `Fingerprint` names the collective, the arguments every member must agree on (dtype,
shape, op, src / dst, ...; `describe`), notes that may legitimately differ across ranks (the
shapes of a gather), the group's members and the user's call site: the first frame outside
the distbridge package. Fingerprints travel as JSON text through the store, so nothing
received is evaluated or unpickled.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from distbridge._frames import outside, site
from distbridge.algorithms import codec
from distbridge.errors import CollectiveMismatch
from distbridge.reliability.hang.engine_trace import group_text
from distbridge.reliability.hang.ledger import Members, positive_env
from distbridge.reliability.timed_barrier import await_keys, group_tag

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "DEFAULT_TIMEOUT",
    "ENV_VAR",
    "TIMEOUT_ENV_VAR",
    "CollectiveChecker",
    "Fingerprint",
    "debug_env",
    "debug_flag",
    "describe",
    "enabled_by_env",
]

ENV_VAR = "DISTBRIDGE_DEBUG"
TIMEOUT_ENV_VAR = "DISTBRIDGE_DEBUG_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")
_OK = "ok"
Fields = tuple[tuple[str, str], ...]
_CATEGORIES = {
    codec.KIND_INT: "number",
    codec.KIND_FLOAT: "number",
    codec.KIND_BOOL: "number",
    codec.KIND_STR: "text",
    codec.KIND_PATH: "text",
}


@dataclass(frozen=True)
class Fingerprint:
    """One rank's description of the collective it is about to run: its name ``call``
    (``"all_reduce"``), the (name, value) ``fields`` every member must agree on, the
    ``notes`` shown in a report but allowed to differ, the group's global ranks
    (``members``, sorted) and the ``site`` of the user's call (``file:line in function``)."""

    call: str
    fields: Fields
    notes: Fields
    members: tuple[int, ...]
    site: str

    def agrees_with(self, other: Fingerprint) -> bool:
        """Whether ``other`` is the same collective with the same must-match arguments."""
        return (self.call, self.fields, self.members) == (other.call, other.fields, other.members)

    def text(self) -> str:
        """``all_reduce(type=tensor, dtype=float32, shape=[3], op=SUM)``."""
        args = ", ".join(f"{k}={v}" for k, v in (*self.fields, *self.notes))
        return f"{self.call}({args})"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Fingerprint:
        data = json.loads(text)
        return cls(
            call=str(data["call"]),
            fields=tuple((str(k), str(v)) for k, v in data["fields"]),
            notes=tuple((str(k), str(v)) for k, v in data["notes"]),
            members=tuple(int(r) for r in data["members"]),
            site=str(data["site"]),
        )


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
        world = model.get_world_size()
        members: Members | None = tuple(range(world))
        if group is not None:  # the ledger's key: the global ranks, sorted; None: not a
            log = model.ledger.log_of(group)  # member, or not a group (the collective raises)
            members = None if log is None else log.members
        if members is None or len(members) < 2 or members[0] < 0 or members[-1] >= world:
            return
        if self._timeout is None:
            self._timeout = positive_env(TIMEOUT_ENV_VAR, DEFAULT_TIMEOUT, float, "seconds")

        def op_name(op: object) -> str:
            try:
                return codec.canonical_op(op, model.reduce_ops, model.name)
            except (TypeError, ValueError):
                return repr(op)

        fields, notes = describe(call, args, op_name)
        here = site(outside(sys._getframe()))  # the first frame outside distbridge
        mine = Fingerprint(call, fields, notes, members, here)
        seq = self._sequence.get(members, 0)
        self._sequence[members] = seq + 1
        whole = len(members) == world
        where = f"collective #{seq + 1} of {group_text(None if whole else members)}"
        prefix = f"debug/{group_tag(members)}/{seq}/"
        _exchange(store, prefix, model.get_rank(), mine, self._timeout, where)


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


# ---- what must match, per collective ------------------------------------------------------


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _kind(value: object) -> str:
    """``tensor``, ``int``, ``float``, ``bool``, ``str``, ``Path`` or ``object``."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    return codec.KIND_NAMES.get(codec.kind_of(value), type(value).__name__)


def _tensor_fields(value: object, *, shape: bool) -> list[tuple[str, str]]:
    """type=<kind>, and for a tensor its dtype and (when ``shape``) its shape."""
    fields = [("type", _kind(value))]
    if isinstance(value, torch.Tensor):
        fields.append(("dtype", _dtype(value)))
        if shape:
            fields.append(("shape", str(list(value.shape))))
    return fields


def _gathered(value: object) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A gathered value: tensors agree on dtype (shapes, number of dims included, may
    differ); other values on their category (numbers, text, objects), since a gather mixes
    ints and floats but not kinds."""
    if isinstance(value, torch.Tensor):
        return _tensor_fields(value, shape=False), [("shape", str(list(value.shape)))]
    category = _CATEGORIES.get(codec.kind_of(value), "object")
    return [("type", category)], [("value", _kind(value))]


def _shapes(shapes: object) -> str:
    try:
        return str([[int(d) for d in s] for s in shapes])  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return repr(shapes)


def _tensors(tensors: object) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A list of tensors sent to every rank: count and dtypes agree, shapes may differ."""
    if not isinstance(tensors, (list, tuple)):
        return [("tensors", type(tensors).__name__)], []
    dtypes = sorted({_dtype(t) if isinstance(t, torch.Tensor) else _kind(t) for t in tensors})
    shapes = [list(t.shape) if isinstance(t, torch.Tensor) else _kind(t) for t in tensors]
    return [("count", str(len(tensors))), ("dtype", "/".join(dtypes))], [("shapes", str(shapes))]


def describe(
    call: str, args: Mapping[str, Any], op_name: Callable[[object], str]
) -> tuple[Fields, Fields]:
    """The must-match fields and the notes of ``call`` with ``args``; never raises on bad
    arguments (the collective itself reports those), so every rank can compare."""
    fields: list[tuple[str, str]] = []
    notes: list[tuple[str, str]] = []
    x = args.get("x")
    tensor = isinstance(x, torch.Tensor)
    vouched = args.get("same_shape") is True  # the caller vouched for one shape everywhere
    if call in ("all_reduce", "reduce", "reduce_scatter"):
        fields = [*_tensor_fields(x, shape=True), ("op", op_name(args["op"]))]
    elif call == "all_gather":  # tensors: one shape everywhere; other values: any size
        fields, notes = (_tensor_fields(x, shape=True), []) if tensor else _gathered(x)
    elif call == "broadcast":
        if tensor and not args["safe_mode"]:
            fields = _tensor_fields(x, shape=True)
        else:  # only the source's value matters: the others may pass placeholders
            fields, notes = [("type", "not a tensor, or safe_mode")], [("value", _kind(x))]
    elif call == "gather":
        fields, notes = (_tensor_fields(x, shape=True), []) if vouched else _gathered(x)
    elif call == "all_gather_tensors_with_shapes":
        fields = [*_tensor_fields(x, shape=False), ("shapes", _shapes(args["shapes"]))]
    elif call == "all_to_all" and tensor:  # one tensor: one shape everywhere
        fields = _tensor_fields(x, shape=True)
    elif call == "all_to_all":
        fields, notes = _tensors(x)
        if vouched:
            fields, notes = [*fields, *notes], []
    elif call in ("scatter", "scatter_object") and "x" in args:
        notes = [("sent", f"{len(x)} values")] if isinstance(x, list) else []
        if args.get("out") is not None:  # every rank receives into a tensor of one shape
            fields = _tensor_fields(args["out"], shape=True)
    for root in ("src", "dst"):
        if root in args:
            fields.append((root, repr(args[root])))
    return tuple(fields), tuple(notes)


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
