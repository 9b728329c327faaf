"""Comms telemetry: what each collective call of this process moved, how long it took, and
where it was called (``with telemetry.record() as rec: ...``, then ``print(rec.summary())``).

While a `record` block runs, each public collective of the active model is shadowed by a
wrapper that times the call (``testing/_interpose.py``); outside a block nothing is on the
path. Telemetry is per process: each rank records its own calls. It follows the model active
when the block starts (a context created inside the block is not seen); one thread at a time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from distbridge import _state
from distbridge._frames import outside
from distbridge.models import ComputationModel
from distbridge.testing._interpose import Call, Layer, installed

__all__ = ["CallRecord", "OpSummary", "Recording", "Summary", "bus_factor", "record"]

# nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md), by group size n.
_BUS_FACTORS: Final[dict[str, Callable[[int], float]]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "ddp_all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def bus_factor(op: str, group_size: int) -> float | None:
    """nccl-tests' factor from algorithm to bus bandwidth for ``op`` in a group of
    ``group_size`` ranks; None where nccl-tests defines none (barrier, gather, objects...)."""
    factor = _BUS_FACTORS.get(op)
    return None if factor is None or group_size < 1 else factor(group_size)


def _payload(value: Any) -> tuple[int, str]:
    """(bytes, dtype) of a collective's data argument, as `record` counts them (a number
    travels as int64 / float64; an object's pickled size is only known inside the call;
    barrier has no argument: dtype "")."""
    if isinstance(value, torch.Tensor):
        value = [value]
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        nbytes = sum(t.numel() * t.element_size() for t in value if isinstance(t, torch.Tensor))
        return nbytes, str(value[0].dtype).removeprefix("torch.")
    if isinstance(value, (bool, int, float)):
        return 8, type(value).__name__
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")), "str"
    return 0, "" if value is None else "object"


class CallRecord(NamedTuple):
    """One collective call of this rank.

    Attributes:
        op: the collective, e.g. ``"all_reduce"``.
        group_size: ranks in its group (the world for ``group=None``).
        nbytes: bytes of its input on this rank (see `record` for numbers and objects).
        dtype: the input's dtype (``"float32"``), or its Python type for a non-tensor.
        seconds: wall time of the call, distbridge's own work included.
        site: ``file:line`` of the call in the user's code (the first frame outside distbridge).
        rank: the global rank that made it.
    """

    op: str
    group_size: int
    nbytes: int
    dtype: str
    seconds: float
    site: str
    rank: int


@dataclass(frozen=True, slots=True)
class OpSummary:
    """The calls of one collective, summed. Bandwidths are in bytes per second, as nccl-tests
    defines them: ``algbw = S / seconds``, where S is the input size (all_gather: the output
    size, group size x input), and ``busbw = algbw x factor`` (see `bus_factor`); busbw is
    None for collectives without a factor."""

    op: str
    calls: int
    nbytes: int
    seconds: float
    algbw: float
    busbw: float | None


def _rate(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _human_seconds(s: float) -> str:
    if s < 999.5e-6:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e3:.3g} ms" if s < 999.5e-3 else f"{s:.3g} s"


@dataclass(frozen=True)
class Summary:
    """One `OpSummary` per collective called, most time first: iterate over it, pick one
    with ``summary["all_reduce"]``; ``str(summary)`` is a table (bandwidths in GB/s, 1e9
    bytes per second)."""

    rows: tuple[OpSummary, ...]

    def __iter__(self) -> Iterator[OpSummary]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, op: object) -> bool:
        return any(row.op == op for row in self.rows)

    def __getitem__(self, op: str) -> OpSummary:
        for row in self.rows:
            if row.op == op:
                return row
        raise KeyError(f"No {op!r} call was recorded; recorded: {[r.op for r in self.rows]}.")

    def __str__(self) -> str:
        header = ("op", "calls", "bytes", "time", "algbw GB/s", "busbw GB/s")
        cells = [header] + [
            (r.op, str(r.calls), _human_bytes(r.nbytes), _human_seconds(r.seconds),
             f"{r.algbw / 1e9:.3f}", "-" if r.busbw is None else f"{r.busbw / 1e9:.3f}")
            for r in self.rows
        ]  # fmt: skip
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        pads = [str.ljust] + [str.rjust] * (len(header) - 1)
        return "\n".join(
            "  ".join(pad(c, w) for pad, c, w in zip(pads, row, widths, strict=True))
            for row in cells
        )


class Recording(Layer):
    """What a `record` block saw on this rank: `calls` and `summary()`."""

    def __init__(
        self,
        model: ComputationModel,
        profile: bool,
        keep_calls: bool,
        on_call: Callable[[CallRecord], None] | None,
    ) -> None:
        self.rank = model.get_rank()
        self._model = model
        self._world_size = model.get_world_size()
        self._profile = profile
        self._keep = keep_calls
        self._on_call = on_call
        self._calls: list[CallRecord] = []
        # op -> [calls, bytes, seconds, nccl-tests' S, S x bus factor (None: no factor)]
        self._totals: dict[str, list[Any]] = {}

    @property
    def calls(self) -> list[CallRecord]:
        """Every recorded call in order (empty with ``keep_calls=False``); a copy."""
        return list(self._calls)

    def summary(self) -> Summary:
        """Per collective: calls, bytes, seconds, algorithm and bus bandwidth."""
        rows = [
            OpSummary(op, calls, nbytes, t, _rate(size, t), None if bus is None else _rate(bus, t))
            for op, (calls, nbytes, t, size, bus) in self._totals.items()
        ]
        return Summary(tuple(sorted(rows, key=lambda r: -r.seconds)))

    def clear(self) -> None:
        """Forget every call recorded so far."""
        self._calls.clear()
        self._totals.clear()

    def intercept(self, call: Call) -> Any:
        """Time the call and record it (not when it raises)."""
        start = time.perf_counter()
        label = f"distbridge.{call.op}"
        with torch.profiler.record_function(label) if self._profile else nullcontext():
            result = call.run()
        seconds = time.perf_counter() - start
        size = self._world_size if call.group is None else self._group_size(call.group)
        nbytes, dtype = _payload(call.data)
        site = ""
        if self._keep or self._on_call is not None:  # the first frame outside distbridge
            frame = outside(sys._getframe())
            site = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        self._add(call.op, size, nbytes, dtype, seconds, site)
        return result

    def _add(self, op: str, size: int, nbytes: int, dtype: str, seconds: float, site: str) -> None:
        moved = nbytes * size if op == "all_gather" else nbytes  # nccl-tests' S
        factor = bus_factor(op, size)
        totals = self._totals.setdefault(op, [0, 0, 0.0, 0.0, 0.0])
        totals[:4] = totals[0] + 1, totals[1] + nbytes, totals[2] + seconds, totals[3] + moved
        totals[4] = None if factor is None or totals[4] is None else totals[4] + moved * factor
        if self._keep or self._on_call is not None:
            entry = CallRecord(op, size, nbytes, dtype, seconds, site, self.rank)
            if self._keep:
                self._calls.append(entry)
            if self._on_call is not None:
                self._on_call(entry)

    def watch_ddp(self, model: torch.nn.Module) -> None:
        """Also record the gradient all-reduces of ``model``, a DistributedDataParallel
        module (they go to torch.distributed directly, not through the facade): one call
        ``ddp_all_reduce`` per gradient bucket, its bytes and the time from the bucket's
        launch to its completion, site ``"DDP backward"``.

        It registers a DDP communication hook that does what DDP does by default (average
        the bucket over the world); DDP takes one hook per module, before its first
        backward, and keeps it after the block.
        """
        if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
            raise TypeError(
                f"watch_ddp takes a DistributedDataParallel module (what idist.auto_model "
                f"returns with more than one rank), got {type(model).__name__}."
            )
        # DDP reads the hook's annotations (none, or GradBucket itself): a lambda has none
        model.register_comm_hook(None, lambda state, bucket: self._ddp_hook(state, bucket))

    def _ddp_hook(self, state: Any, bucket: Any) -> Any:
        nbytes, dtype = _payload(bucket.buffer())
        start = time.perf_counter()

        def done(future: Any) -> Any:
            seconds = time.perf_counter() - start
            self._add("ddp_all_reduce", self._world_size, nbytes, dtype, seconds, "DDP backward")
            return future.value()

        return default_hooks.allreduce_hook(state, bucket).then(done)

    def _group_size(self, group: Any) -> int:
        if isinstance(group, (list, tuple, range)):
            return len(group)
        try:
            return int(self._model._group_size(group))
        except Exception:  # not a group of this model: the call itself said so
            return 0

    def __repr__(self) -> str:
        return f"Recording(rank={self.rank}, calls={sum(t[0] for t in self._totals.values())})"


@contextmanager
def record(
    *,
    profile: bool = False,
    keep_calls: bool = True,
    on_call: Callable[[CallRecord], None] | None = None,
) -> Iterator[Recording]:
    """Record every collective call this process makes in the block, through the facade
    (``idist.all_reduce``, ``idist.all_gather_object``, ...), in the `Recording` it yields;
    read it in or after the block. A call that raises is not recorded. Bytes are the
    input's: a tensor's ``numel() * element_size()``, the sum over a list of tensors, 8 for a
    Python number, a str's UTF-8 bytes, 0 for other objects.

    ``profile`` also labels each call ``distbridge.<op>`` for ``torch.profiler``.
    ``keep_calls`` keeps one `CallRecord` per call in ``calls``; False keeps only the sums
    that ``summary()`` needs (memory that does not grow with the calls). ``on_call`` is
    called with each `CallRecord` right after its call returns.

    Example:
        >>> with record() as rec:
        ...     idist.all_reduce(torch.ones(4))
        >>> rec.summary()["all_reduce"].nbytes
        16
    """
    if not isinstance(profile, bool) or not isinstance(keep_calls, bool):
        raise TypeError(
            f"profile and keep_calls must be True or False, got {profile!r} and {keep_calls!r}."
        )
    if on_call is not None and not callable(on_call):
        raise TypeError(f"on_call must be a function of one CallRecord, got {on_call!r}.")
    model = _state.current()
    recording = Recording(model, profile, keep_calls, on_call)
    with installed(recording, model):
        yield recording
