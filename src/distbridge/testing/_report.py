"""What a test did on every rank of a warm world, and the failure report that says so.

Where a rank is, in words ("in barrier at test_x.py:12"), comes from its Python stack, in
either format the report holds: a traceback (``traceback`` module, innermost call last) or a
faulthandler dump (every thread, innermost call first). The place named is the innermost
frame of the user's code (the test's file first, then any file outside the standard library,
the installed packages and distbridge), with the function that frame was calling when there
is one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from distbridge.errors import DistributedError
from distbridge.launch._worker_reports import is_library
from distbridge.reliability.hang.engine_trace import ranks_text
from distbridge.testing._worker import Outcome

__all__ = ["Frame", "RanksFailedError", "WorldRun", "frames", "user_frame", "where"]

_PEER_FAILED = "PeerFailed"


class RanksFailedError(DistributedError):
    """A test failed, or ran past its timeout, on one or more ranks of a warm world; the
    message holds every rank's traceback (or Python stack, for ranks that were stopped)."""


@dataclass
class WorldRun:
    """One test on every rank of a warm world.

    Attributes:
        name: the test function's name.
        world: the world, in words ("2 gloo ranks").
        outcomes: what each rank that finished reported, in the order they came.
        stopped: the ranks still running when the test was cut off (timeout or failure).
        timeout: the test's timeout in seconds.
        timed_out: the ranks were stopped at the timeout (not after another rank failed).
        stacks: the Python stack of each stopped rank.
        outputs: what each rank wrote on stdout and stderr during the test.
        replaced: the world was stopped after the test; the next test starts a fresh one.
        path: the file of the test's module (to say where in it each stopped rank is).
        verdict: at a timeout, the hang verdict from every rank's collective ledger ("" when
            none was found).
    """

    name: str
    world: str
    outcomes: list[Outcome]
    stopped: list[int] = field(default_factory=list)
    timeout: float = 0.0
    timed_out: bool = False
    stacks: dict[int, str] = field(default_factory=dict)
    outputs: dict[int, str] = field(default_factory=dict)
    replaced: bool = False
    path: str = ""
    verdict: str = ""

    @property
    def passed(self) -> bool:
        """Every rank returned from the test function."""
        return not self.stopped and all(outcome.passed for outcome in self.outcomes)

    @property
    def skip_reason(self) -> str | None:
        """Why the test is skipped: some ranks called ``pytest.skip`` and none of the others
        failed (they passed, or were stopped while waiting for a skipped rank); else None.

        The reason names the skipped ranks unless every rank skipped for the same reason.
        """
        skipped = [o for o in self.outcomes if o.skipped]
        if self.timed_out or not skipped or not all(o.passed or o.skipped for o in self.outcomes):
            return None
        reasons: dict[str, list[int]] = {}
        for outcome in sorted(skipped, key=lambda o: o.rank):
            reason = outcome.summary.partition(": ")[2] or "no reason given"
            reasons.setdefault(reason, []).append(outcome.rank)
        if len(skipped) == len(self.outcomes) and not self.stopped and len(reasons) == 1:
            return next(iter(reasons))
        text = "; ".join(
            f"skipped on {ranks_text(ranks)} of {self.world}: {reason}"
            for reason, ranks in reasons.items()
        )
        if self.stopped:
            were = "was" if len(self.stopped) == 1 else "were"
            text += (
                f" ({ranks_text(self.stopped)} still ran and {were} stopped, waiting for the "
                "skipped ranks: skip on every rank together with "
                "distbridge.testing.skip_if_any_rank)"
            )
        return text

    @property
    def skip_location(self) -> tuple[str, int] | None:
        """The file and line (1-based) of the first skipped rank's call that skipped, in
        the test's file (None when unknown)."""
        for outcome in sorted(self.outcomes, key=lambda o: o.rank):
            if outcome.skipped:
                found = user_frame(outcome.traceback, self.path)
                if found is not None:
                    return found[0].path, found[0].line
        return None

    def check(self) -> None:
        """Raise `RanksFailedError` with `report` unless every rank passed."""
        if not self.passed:
            raise RanksFailedError(self.report())

    def first_failure(self) -> Outcome | None:
        """The failure that came first, preferring a rank's own error to a peer's
        `PeerFailed`, and either to a skip."""
        failures = [outcome for outcome in self.outcomes if not outcome.passed]
        own = [o for o in failures if o.error_type != _PEER_FAILED and not o.skipped]
        peers = [o for o in failures if o.error_type == _PEER_FAILED]
        return (own or peers or failures)[0] if failures else None

    def report(self) -> str:
        """Every rank's part: tracebacks of the ranks that failed, stacks of those stopped."""
        first = self.first_failure()
        # where each stopped rank is, from its stack: {0: "in barrier at test_x.py:12"}
        places = {rank: where(self.stacks.get(rank, ""), self.path) for rank in self.stopped}
        if self.timed_out or first is None:
            found = ", ".join(f"rank {rank} {at}" for rank, at in sorted(places.items()) if at)
            head = (
                f"{self.name} ran past its timeout of {self.timeout:g} s on {self.world}: "
                f"{ranks_text(self.stopped)} still running{f' ({found})' if found else ''}. "
                "Their Python stacks follow (innermost call first): look there for where they "
                "wait, or raise the timeout (@pytest.mark.distbridge(timeout=...))."
            )
            if self.verdict:
                head += f"\nWhy, from every rank's collective ledger:\n{self.verdict}"
            why = "at the timeout"
        else:
            head = f"{self.name} failed on rank {first.rank} of {self.world}: {first.summary}"
            if first.detail:  # a table or a hint the first line announces
                head += "\n" + first.detail
            why = f"after rank {first.rank} failed"
        did = {o.rank: "passed" if o.passed else o.summary for o in self.outcomes}
        for rank in self.stopped:
            did[rank] = f"still running, stopped {why}{f', {places[rank]}' if places[rank] else ''}"
        lines = [head, "", "What each rank did:"]
        lines += [f"  rank {rank}: {line}" for rank, line in sorted(did.items())]
        for outcome in sorted(self.outcomes, key=lambda o: (o is not first, o.rank)):
            if not outcome.passed:
                body = outcome.traceback.rstrip() or f"(no traceback: {outcome.summary})"
                lines += ["", f"---- rank {outcome.rank}: {outcome.error_type} ----", body]
        for rank in self.stopped:
            stack = self.stacks.get(rank, "").rstrip() or "(it wrote no stack)"
            lines += ["", f"---- rank {rank}: Python stack when stopped ----", stack]
        if self.replaced:
            lines += ["", "The world was stopped; the next test starts a fresh one."]
        return "\n".join(lines)


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+),? in (?P<function>\S+)')


@dataclass(frozen=True)
class Frame:
    """One call of a stack: the file, the line and the function that line is in."""

    path: str
    line: int
    function: str


def frames(stack: str) -> list[Frame]:
    """The frames of ``stack``, innermost first: the last exception of a traceback, or the
    thread of a faulthandler dump that runs user code (else its current thread)."""
    if "(most recent call first)" in stack:
        threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", stack)
        parsed = [(_parse(thread), thread.lstrip().startswith("Current")) for thread in threads]
        for thread_frames, _ in parsed:
            if any(not is_library(frame.path) for frame in thread_frames):
                return thread_frames
        return next((found for found, current in parsed if current), parsed[0][0])
    last = stack.rpartition("Traceback (most recent call last):")[2]
    return _parse(last)[::-1]


def user_frame(stack: str, test_file: str = "") -> tuple[Frame, Frame | None] | None:
    """The innermost frame in ``test_file`` (else in user code) and the frame it called."""
    found = frames(stack)
    test = os.path.realpath(test_file) if test_file else None
    for wanted in (
        lambda frame: test is not None and os.path.realpath(frame.path) == test,
        lambda frame: not is_library(frame.path),
    ):
        for index, frame in enumerate(found):
            if wanted(frame):
                return frame, (found[index - 1] if index > 0 else None)
    return None


def where(stack: str, test_file: str = "") -> str | None:
    """``"in barrier at test_x.py:12"``: the function the user's innermost frame was calling
    (or that frame's own function, when it is the innermost), and that frame's line."""
    found = user_frame(stack, test_file)
    if found is None:
        return None
    frame, callee = found
    return f"in {(callee or frame).function} at {os.path.basename(frame.path)}:{frame.line}"


def _parse(text: str) -> list[Frame]:
    return [
        Frame(match["path"], int(match["line"]), match["function"])
        for match in map(_FRAME.match, text.splitlines())
        if match is not None
    ]
