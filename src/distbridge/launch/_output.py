"""Workers' output through the parent: whole lines, a rank tag, a rank filter.

Raw, every worker writes to the parent's stdout and stderr file descriptors itself, and the
kernel interleaves the writes: two ranks whose streams are block-buffered (a file, a pipe, a
CI log) cut each other's lines at every buffer boundary. Relayed, each worker's stdout and
stderr are pipes that a thread of the parent reads; it writes each complete line at once to
the parent's ``sys.stdout`` or ``sys.stderr``, optionally after a ``[rank N]: `` tag, and
drops the lines of ranks the filter leaves out.

What `plan_output` relays by default (``tag_output=None``, no ``output_ranks``): a stream of
the parent that is not a terminal, when more than one worker runs here; the bytes stay the
same, only their order is line by line. A terminal stays raw: a pipe would tell the workers
they have no terminal, which turns off their colours and freezes their progress bars.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["OutputPlan", "OutputRelay", "plan_output", "redirect_output", "split_lines"]

#: A line longer than this is written in pieces of this size (each a line of its own).
MAX_LINE_BYTES = 1 << 20
_STREAMS = (1, 2)  # the file descriptors of stdout and stderr
_CLOSE_SECONDS = 2.0  # how long the relay waits for EOF after the workers ended


@dataclass(frozen=True)
class OutputPlan:
    """Which streams go through the parent, and what it does with their lines."""

    tag: bool = False  # start each line with "[rank N]: "
    ranks: frozenset[int] | None = None  # the ranks whose lines are shown; None: all
    streams: tuple[int, ...] = ()  # 1 (stdout), 2 (stderr): the relayed ones


def plan_output(
    tag_output: object, output_ranks: object, nproc: int, world_size: int
) -> OutputPlan | None:
    """The plan for ``spawn``'s ``tag_output`` and ``output_ranks``; None: raw output."""
    if tag_output is not None and not isinstance(tag_output, bool):
        raise ValueError(
            f"tag_output must be True, False or None (the default: whole lines where the output "
            f"is not a terminal), got {tag_output!r}."
        )
    ranks = None if output_ranks is None else _ranks(output_ranks, world_size)
    if tag_output or ranks is not None:
        return OutputPlan(bool(tag_output), ranks, _STREAMS)
    if tag_output is False or nproc == 1:
        return None
    streams = tuple(fd for fd in _STREAMS if not os.isatty(fd))  # a closed one: False
    return OutputPlan(streams=streams) if streams else None


def _ranks(value: object, world_size: int) -> frozenset[int]:
    items = list(value) if isinstance(value, Iterable) and not isinstance(value, str) else None
    if items is None or any(isinstance(r, bool) or not isinstance(r, int) for r in items):
        raise ValueError(
            f"output_ranks must be a list of ranks (ints), e.g. [0], got {value!r}; pass None to "
            "show every rank's output."
        )
    bad = sorted(r for r in items if not 0 <= r < world_size)
    if bad:
        raise ValueError(
            f"output_ranks={value!r} names rank {bad[0]}, but the job's ranks run from 0 to "
            f"{world_size - 1}; name ranks of the job."
        )
    return frozenset(items)


def split_lines(pending: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (each ending with b"\\n") of ``pending + data``, and the rest; a line
    longer than `MAX_LINE_BYTES` comes in pieces of that size."""
    *complete, rest = (pending + data).split(b"\n")
    size = MAX_LINE_BYTES  # each line in pieces of at most this (an empty line: one piece)
    lines = [
        line[i : i + size] + b"\n" for line in complete for i in range(0, len(line) or 1, size)
    ]
    whole = len(rest) - len(rest) % size  # the unfinished line's full pieces go out now
    lines += [rest[i : i + size] + b"\n" for i in range(0, whole, size)]
    return lines, rest[whole:]


def redirect_output(streams: dict[int, Connection]) -> None:
    """In a worker: point its stdout and stderr file descriptors at the relay's pipes.

    ``sys.stdout`` keeps the buffering it chose at start-up (line by line on a terminal).
    A ``sys.stdout`` or ``sys.stderr`` that does not write to its file descriptor (a
    notebook kernel's stream, which a "fork" worker inherits and which sends its text to
    the kernel by another way) is replaced by a line-buffered stream on the descriptor."""
    for fd, conn in streams.items():
        name = "stdout" if fd == 1 else "stderr"
        stream = getattr(sys, name)
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os.dup2(conn.fileno(), fd)
        conn.close()
        try:
            writes_to_fd = stream.fileno() == fd
        except (AttributeError, OSError, ValueError):
            writes_to_fd = False
        if not writes_to_fd:
            setattr(sys, name, open(fd, "w", buffering=1, closefd=False))  # noqa: SIM115


@dataclass
class _Source:
    """One worker stream being read: where its lines go and the unfinished one."""

    rank: int
    fd: int
    conn: Connection
    pending: bytes = b""


class OutputRelay:
    """The parent's side: pipes for each worker, and a thread that writes their lines."""

    def __init__(self, plan: OutputPlan) -> None:
        self.plan = plan
        self._sources: list[_Source] = []
        self._thread: threading.Thread | None = None
        self._stop_read, self._stop_write = os.pipe()

    def pipes(self, rank: int, new_pipe: Any) -> dict[int, Connection]:
        """The write ends to give worker ``rank`` (see `redirect_output`), by descriptor;
        ``new_pipe`` is the start method's ``Pipe``. Close them in the parent once it
        started."""
        ends = {}
        for fd in self.plan.streams:
            receiver, sender = new_pipe(duplex=False)
            self._sources.append(_Source(rank, fd, receiver))
            ends[fd] = sender
        return ends

    def start(self) -> None:
        """Start reading (after the workers started: no thread may run while they fork)."""
        if self._sources and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="distbridge-output", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """After the workers ended: read what is left (for at most a few seconds, in case
        a process they left behind holds a pipe), write the unfinished lines, close."""
        self.start()  # not started if a worker failed to start
        if self._thread is not None:
            self._thread.join(_CLOSE_SECONDS)
            os.write(self._stop_write, b"\0")
            self._thread.join()
        for source in self._sources:
            if source.pending:
                self._write(source, [source.pending + b"\n"])
            source.conn.close()
        os.close(self._stop_read)
        os.close(self._stop_write)

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._stop_read, selectors.EVENT_READ)
            for source in self._sources:
                selector.register(source.conn.fileno(), selectors.EVENT_READ, source)
            open_sources = len(self._sources)
            while open_sources:
                for key, _ in selector.select():
                    if key.data is None:  # close() gave up waiting
                        return
                    source = key.data
                    try:
                        data = os.read(source.conn.fileno(), 1 << 16)
                    except OSError:
                        data = b""
                    if data:
                        lines, source.pending = split_lines(source.pending, data)
                        self._write(source, lines)
                    else:
                        selector.unregister(source.conn.fileno())
                        open_sources -= 1

    def _write(self, source: _Source, lines: list[bytes]) -> None:
        if not lines or (self.plan.ranks is not None and source.rank not in self.plan.ranks):
            return
        prefix = f"[rank{source.rank}]: ".encode() if self.plan.tag else b""
        data = b"".join(prefix + line for line in lines)
        stream = sys.stdout if source.fd == 1 else sys.stderr
        if stream is None:
            return
        with contextlib.suppress(OSError, ValueError):
            binary = getattr(stream, "buffer", None)
            stream.flush()  # the parent's own text first
            if binary is not None:
                binary.write(data)
                binary.flush()
            else:
                stream.write(data.decode(errors="replace"))
                stream.flush()
