"""torch's flight recorder, read for the hang report: the engine's own record of collectives.

torch.distributed records every collective a process group runs (on by default for gloo in
torch 2.13, ``TORCH_FR_BUFFER_SIZE`` entries, 2,000 by default; NCCL the same where its
trace buffer is on). `tail` reads it through ``_dump_fr_trace_json`` of
``torch._C._distributed_c10d`` (`torch_dump`) and reduces each group's last entries to plain
data: ``{"seq", "op", "group", "what", "state"}``. Only the JSON dump is read: its pickled
twin (``_dump_fr_trace``) is left alone, as distbridge unpickles nothing it did not ask for,
so a torch without the JSON dump has no record here.

These are private functions of torch: every access is guarded. A missing function or a
format that changed gives ``{"source": ..., "note": why}`` instead of entries, never an
error.

States: torch's own, ``scheduled`` / ``started`` / ``completed``, and ``ended`` for an entry
torch retired without marking it completed. gloo never updates the state (its entries stay
``scheduled`` until retired) and retires a collective that failed (a timeout) as well as one
that returned (torch's ``pg_status`` counts both as completed), so "ended" says only that
the engine is done with it; the verdict tells the two apart by the rank's ledger.
Point-to-point entries (send / recv) are left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SOURCE", "group_names", "reduce_entries", "tail", "tail_of", "torch_dump"]

SOURCE = "torch's flight recorder"
_DUMP = "_dump_fr_trace_json"


def group_names(world: Any) -> dict[str, tuple[int, ...] | None]:
    """torch's name of each live process group -> its global ranks, sorted (None for
    ``world``, the default group). Empty where torch's private table is missing."""
    import torch.distributed as dist

    names = getattr(getattr(dist.distributed_c10d, "_world", None), "pg_names", None)
    if not isinstance(names, Mapping):
        return {}
    found: dict[str, tuple[int, ...] | None] = {}
    for group, name in names.items():
        if group is world:
            found[str(name)] = None
        else:
            try:
                found[str(name)] = tuple(sorted(dist.get_process_group_ranks(group)))
            except (RuntimeError, ValueError):
                continue
    return found


def _what(entry: Mapping[str, Any]) -> str:
    """``"Float[3]"`` from an entry's input dtypes and sizes (several: joined by ``, ``)."""
    dtypes = entry.get("input_dtypes") or []
    sizes = entry.get("input_sizes") or []
    parts = []
    for dtype, size in zip(dtypes, sizes, strict=False):
        parts.append(f"{dtype}[{', '.join(str(int(n)) for n in size)}]")
    return ", ".join(parts)


def reduce_entries(
    entries: list[Any], groups: Mapping[str, tuple[int, ...] | None], limit: int
) -> list[dict[str, Any]]:
    """The last ``limit`` collective entries of each group in ``groups`` (torch's group name ->
    global ranks), in torch's order, as plain data. Entries of a group torch made anew under
    the same name (after ``destroy_process_group``) replace the older ones: a group's
    sequence numbers only grow."""
    per_group: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("is_p2p"):
            continue
        name = str(entry["process_group"][0])
        if name not in groups:
            continue
        members = groups[name]
        state = str(entry.get("state", ""))
        record = {
            "seq": int(entry["collective_seq_id"]),
            "op": str(entry["profiling_name"]),
            "group": None if members is None else list(members),
            "what": _what(entry),
            "state": "ended" if entry.get("retired") and state != "completed" else state,
        }
        kept = per_group.setdefault(name, [])
        if kept and record["seq"] <= kept[-1]["seq"]:
            kept.clear()  # a new group of the same name
        kept.append(record)
    return [record for kept in per_group.values() for record in kept[-limit:]]


def torch_dump() -> Callable[..., bytes] | None:
    """torch's JSON dump of the flight recorder, if this torch has it."""
    try:
        from torch._C import _distributed_c10d as c10d
    except ImportError:
        return None
    dump = getattr(c10d, _DUMP, None)
    return dump if callable(dump) else None


def tail(
    limit: int,
    groups: Callable[[], Mapping[str, tuple[int, ...] | None]],
    dump: Callable[..., bytes] | None,
) -> dict[str, Any]:
    """The flight-recorder tail (see the module) that ``dump`` (`torch_dump`) gives, ``limit``
    entries per group of ``groups()`` (torch's group name -> global ranks)."""
    if dump is None:
        return {"source": SOURCE, "note": f"this torch has no {_DUMP} (its record is not read)."}
    try:
        data = json.loads(dump(includeCollectives=True, onlyActive=False))
        data["version"]  # every dump has one; "entries" only once something was recorded
        entries = data.get("entries", [])
        if not isinstance(entries, list):
            raise TypeError(f"'entries' is a {type(entries).__name__}, not a list")
        return {"source": SOURCE, "entries": reduce_entries(entries, groups(), limit)}
    except Exception as err:  # a private format that changed: the record is absent
        return {"source": SOURCE, "note": f"unreadable ({type(err).__name__}: {err})."}


def tail_of(world: Any, limit: int) -> dict[str, Any]:
    """`tail` of this process's record, the groups named after ``world`` (the default group)."""
    return tail(limit, lambda: group_names(world), torch_dump())
