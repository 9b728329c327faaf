"""Peak RSS growth of one call, for bench_objects.py's memory rows (Linux ``/proc``).

``peak_growth(call)`` runs ``call`` once and returns how much this process's resident set
grew at its peak: ``VmHWM`` after the call minus ``VmRSS`` before it, with the peak reset
just before the call (``/proc/self/clear_refs``), or ``ru_maxrss`` where that cannot be
written. bench_objects.py runs it in fresh forked workers; see bench/README.md.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench_core import MIB, _size

# Peak RSS growth during one call / (payload x world size), highest allowed (distbridge rows).
TARGET_MEMORY = 1.2

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"


@dataclass(frozen=True)
class MemoryRow:
    """Peak RSS growth of every rank during one call, in a fresh process."""

    name: str  # e.g. "all_gather_object"
    library: str  # "distbridge" or "torch"
    world: int
    payload: int  # bytes of each object (pickled in band)
    growth: tuple[int, ...]  # bytes, per rank
    method: str  # "VmHWM" (peak reset before the call) or "ru_maxrss"

    @property
    def worst(self) -> int:
        return max(self.growth)

    @property
    def ratio(self) -> float:
        return self.worst / (self.payload * self.world)

    @property
    def target(self) -> float | None:
        return TARGET_MEMORY if self.library == "distbridge" else None

    @property
    def passed(self) -> bool:
        return self.target is None or self.ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "worst": self.worst, "ratio": self.ratio, "target": self.target}


def _status_kib(field: str) -> int:
    with open(_STATUS, encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in {_STATUS}")


def _reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0)."""
    try:
        with open(_CLEAR_REFS, "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def peak_growth(call: Callable[[], Any]) -> tuple[int, str]:
    """Bytes this process's RSS grew at its peak during ``call()`` (its result is dropped
    before returning), and how the peak was read."""
    if _reset_peak():
        before = _status_kib("VmRSS")
        result = call()
        peak = _status_kib("VmHWM")
        method = "VmHWM"
    else:  # ru_maxrss cannot be reset: a fresh process whose peak so far is the baseline
        before = max(_status_kib("VmRSS"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        result = call()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        method = "ru_maxrss"
    del result
    return (peak - before) * 1024, method


def memory_lines(rows: Sequence[MemoryRow]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The memory table's header and lines."""
    header = ("name", "library", "world", "payload", "growth per rank", "ratio", "target", "result")
    lines = [
        (
            row.name,
            row.library,
            str(row.world),
            _size(row.payload),
            " ".join(f"{g / MIB:.0f}" for g in row.growth) + " MiB",
            f"{row.ratio:.2f}",
            "-" if row.target is None else f"<= {row.target:g}",
            "-" if row.target is None else ("pass" if row.passed else "FAIL"),
        )
        for row in rows
    ]
    return header, lines
