"""Fail together for Horovod: the coordination store from the start, the failure note,
Horovod's own coordinated shutdown as the abort, and the reporter that publishes this rank's
ledger for the hang verdict (``hang_verdict``: a timed barrier's timeout names the rank at
fault).

``initialize("horovod")`` (and ``spawn``'s Horovod workers) make the coordination store at
once, with one broadcast every rank makes at the same point, so that a rank that fails later
has somewhere to leave its note. A failing rank (uncaught exception: the excepthook; an
exception propagating through ``finalize``) writes the note, then shuts Horovod down:
Horovod's engine agrees on a shutdown in its next cycle, so the collectives the other ranks
are blocked in, and every one they start later, fail with "Horovod has been shut down" even
while the failing process lingers. `fail_together.peer_failure` turns that error into
`PeerFailed` naming the failed rank (from the copy of the note the failure watcher keeps, so
it works even after rank 0, the store's host, has gone).

A context made by ``hvd.init()`` outside distbridge and adopted has no store from the start:
it keeps Horovod's own behaviour (its error names no rank).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from distbridge.reliability import fail_together, failure_hook
from distbridge.reliability.failure_watch import FailureWatch, start_watch
from distbridge.reliability.hang.collect import job_verdict
from distbridge.reliability.hang.report import Reporter, record_for_launcher, start_reporter

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract
    from distbridge.reliability.hang.ledger import CollectiveLedger

__all__ = ["HorovodFailTogether"]


class HorovodFailTogether:
    """The fail-together part of ``HorovodModel``: what `fail_together.peer_failure` asks."""

    fails_together: ClassVar[bool] = True

    _watch: FailureWatch | None = None
    _reporter: Reporter | None = None  # publishes the ledger for the hang verdict
    _fails_together = False  # set by `_start_failing_together`

    if TYPE_CHECKING:
        _hvd: Any
        _store: Any
        ledger: CollectiveLedger

        def is_current(self) -> bool:
            """Whether Horovod is still initialized for this model."""

        def get_rank(self) -> int:
            """This rank."""

        def _contract(self) -> ModelContract:
            """This model as the code below the models takes it."""

        def get_world_size(self) -> int:
            """The number of ranks."""

        def _coordination_store(self) -> Any | None:
            """The store rank 0 hosts (made by every rank at the same point)."""

    def _start_failing_together(self) -> None:
        """Make the store now (one broadcast: every rank calls this at the same point), let an
        uncaught exception leave a note and shut Horovod down, and watch for a peer's note."""
        rank, world_size = self.get_rank(), self.get_world_size()
        if world_size <= 1:
            return
        store = self._coordination_store()
        self._fails_together = True
        failure_hook.install_excepthook(rank, world_size, self._hvd.shutdown, self.failure_store)
        self._watch = start_watch(store, rank, lambda: None)  # keeps the note; nothing to cut
        self._reporter = start_reporter(store, self._contract())

    def _leave_job(self, current: bool) -> None:
        """At ``finalize``: stop watching; then, if this context is still ``current``, tell
        the peers this rank leaves (a failure note while an exception propagates), before
        Horovod shuts down."""
        failure_hook.uninstall_excepthook()
        record_for_launcher(sys.exc_info()[1])  # torchrun's summary names the rank at fault
        if self._watch is not None:
            self._watch.stop()
        if self._reporter is not None:
            self._reporter.stop(publish=current)  # its last ledger, before it leaves
        if current and self._fails_together:
            fail_together.leave(self.get_rank(), self.get_world_size(), store=self._store)

    def abort_communicator(self) -> None:
        """Nothing to do: by the time a peer's failure shows here, Horovod's shutdown (which
        every rank's engine agrees on) has already stopped this rank's engine. Shutting it
        down here too would make ``hvd.is_initialized()`` false, and the facade would fall
        back to the serial model for this rank's later calls."""

    def known_failure(self) -> tuple[int, str] | None:
        """The failure note this rank's watcher read, if one came."""
        return None if self._watch is None else self._watch.note

    def hang_verdict(self, notes: Mapping[int, str], wait: float) -> str | None:
        """Who is at fault, from every rank's ledger asked through the coordination store for
        up to ``wait`` seconds (``notes``: rank -> why it cannot answer); None for an adopted
        context, which has no store from the start. Horovod cannot interrupt a stuck
        collective: the verdict comes where something else ends the wait (a timed barrier,
        Horovod's own stall shutdown, a signal, ``python -m distbridge why``)."""
        if not self._fails_together:
            return None
        return job_verdict(self._store, self._contract(), notes, wait)

    def failure_store(self) -> Any | None:
        """The coordination store, where this context fails together (``initialize`` in a
        world of two or more); None for an adopted context, whose ranks leave no notes."""
        return self._store if self._fails_together else None
