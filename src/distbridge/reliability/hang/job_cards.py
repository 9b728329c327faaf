"""Job cards: where a rank's job can be asked for its hang verdict, found by the rank's pid.

Each rank that runs a hang reporter writes ``<tmp>/distbridge-<uid>/cards/<pid>.json`` with
its rank, the world size and the job store's ``host:port``, so that ``python -m distbridge
why --pid PID`` can ask the job; the pid may also be an ancestor of the ranks (``spawn``'s
parent, torchrun's agent). A card is removed when its process exits normally, and by
``spawn``'s parent when the job ends; one whose process is gone, or whose pid was reused
(the card holds the process's start time), is stale: never read, and removed by the next
job and every ``why``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "JobCard",
    "alive",
    "descends_from",
    "find_card",
    "prune_cards",
    "read_json",
    "remove_cards",
    "user_dir",
    "write_card",
    "write_json",
]

_ANCESTOR_HOPS = 6  # spawn's parent -> warm starter -> worker, torchrun's agent -> worker, ...


@dataclass(frozen=True)
class JobCard:
    """One rank's card: its pid and rank, the job store's ``host:port``."""

    pid: int
    rank: int
    store: str


def user_dir(*parts: str) -> str:
    """``<tmp>/distbridge-<uid>/<parts>``: this user's folder of distbridge's files (its
    cards in ``cards``, which `write_card` makes)."""
    return os.path.join(tempfile.gettempdir(), f"distbridge-{os.getuid()}", *parts)


def alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (another user's counts; a zombie, dead but not yet
    reaped by its parent or init, does not)."""
    if pid <= 0:  # os.kill would signal a process group, or every process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    fields = _stat(pid)
    return fields is None or fields[0] not in ("Z", "X")


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (Linux); None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _started(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot), which tells a reused pid apart."""
    fields = _stat(pid)
    return None if fields is None else fields[19]


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in file ``path``; None when it cannot be read or is not an object."""
    try:
        with open(path, encoding="utf-8") as data:
            loaded = json.load(data)
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def write_json(path: str, data: Mapping[str, Any]) -> None:
    """Write ``data`` to ``path`` as JSON, replaced whole (a reader never sees half a file)."""
    temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(temporary, path)


def _card(pid: int) -> str:
    """The path of the card of process ``pid``."""
    return os.path.join(user_dir("cards"), f"{pid}.json")


def _pids() -> list[int]:
    """The pids that have a card."""
    with contextlib.suppress(OSError):
        stems = [name.removesuffix(".json") for name in os.listdir(user_dir("cards"))]
        return [int(stem) for stem in stems if stem.isdigit()]
    return []


def _stale(pid: int) -> bool:
    """Whether the card of ``pid`` belongs to no live process (gone, or the pid reused)."""
    if not alive(pid):
        return True
    started = (read_json(_card(pid)) or {}).get("started")  # unreadable: left to its writer
    now = _started(pid)
    return started is not None and now is not None and str(started) != now


def prune_cards() -> None:
    """Remove the stale cards (see the module): a job's first step, and every ``why``'s."""
    remove_cards(pid for pid in _pids() if _stale(pid))


def remove_cards(pids: Iterable[int]) -> None:
    """Remove the cards of processes ``pids`` (a job's workers, once they ended)."""
    for pid in pids:
        _remove(_card(pid))


def _store_address(store: Any) -> str | None:
    """``host:port`` of a TCPStore; None for any other store (a FileStore has no address)."""
    host = getattr(store, "host", None)
    port = getattr(store, "port", None)
    if not isinstance(host, str) or not isinstance(port, int):
        return None
    if host in ("", "0.0.0.0", "::"):  # bound to every address: ask through the loopback
        host = "127.0.0.1"
    return f"{host}:{port}"


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def write_card(store: Any, rank: int) -> str | None:
    """Write this process's card for the job whose root store is ``store``; returns its path,
    or None when the store has no address (the verdict is then asked with ``why DIR``)."""
    address = _store_address(store)
    if address is None:
        return None
    try:
        os.makedirs(user_dir("cards"), mode=0o700, exist_ok=True)
        prune_cards()
        path = _card(os.getpid())
        write_json(path, {"rank": rank, "store": address, "started": _started(os.getpid())})
    except OSError:  # a read-only or full temporary folder: no card, nothing else lost
        return None
    atexit.register(_remove, path)
    return path


def _read(pid: int) -> JobCard | None:
    card = read_json(_card(pid)) or {}
    try:
        return JobCard(pid, int(card["rank"]), str(card["store"]))
    except (KeyError, TypeError, ValueError):
        return None


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is below ``ancestor`` (a few generations at most; Linux)."""
    for _ in range(_ANCESTOR_HOPS):
        fields = _stat(pid)
        parent = 0 if fields is None else int(fields[1])
        if parent <= 1:
            return False
        if parent == ancestor:
            return True
        pid = parent
    return False


def find_card(pid: int) -> JobCard:
    """The card of process ``pid``, or of the lowest-ranked live rank below it;
    ProcessLookupError when there is no process ``pid``, FileNotFoundError when neither it
    nor a process below it has a card."""
    if not alive(pid):
        raise ProcessLookupError(f"There is no process {pid}: is the job still running?")
    prune_cards()  # a card left by a process that is gone is never read
    own = _read(pid)
    if own is not None:
        return own
    below = [
        card
        for other in _pids()
        if alive(other) and descends_from(other, pid) and (card := _read(other))
    ]
    if not below:
        raise FileNotFoundError(
            f"Process {pid} has no distbridge job card, nor any process below it (looked in "
            f"{user_dir('cards')}): is it a rank of a job started by distbridge (initialize or "
            "spawn) with more than one rank? Otherwise ask with --store MASTER_ADDR:MASTER_PORT."
        )
    return min(below, key=lambda card: card.rank)
