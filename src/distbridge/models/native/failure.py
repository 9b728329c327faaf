"""Fail together and say why for torch.distributed: the failure note, the abort, and the
reporter that publishes this rank's ledger (and answers with torch's flight recorder) for the
hang verdict.

``initialize`` in a world of two or more starts them: an uncaught exception leaves a note in
the default group's store and cuts this rank off its peers (gloo's connections, NCCL's
communicator), so their collectives fail now and name this rank (`PeerFailed`); a watcher
learns of a peer's note; the reporter publishes the ledger, so that a timeout anywhere can
name the rank at fault (``hang_verdict``). ``finalize`` stops them and tells the peers this
rank left. A context adopted from outside distbridge starts none of this.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from distbridge.reliability import coordination, fail_together, failure_hook
from distbridge.reliability.failure_watch import FailureWatch, start_watch
from distbridge.reliability.hang.collect import job_verdict
from distbridge.reliability.hang.report import Reporter, record_for_launcher, start_reporter

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract
    from distbridge.models._layout import Layout
    from distbridge.reliability.connections import Connections
    from distbridge.reliability.hang.ledger import CollectiveLedger

__all__ = ["NativeFailTogether"]


class NativeFailTogether:
    """The fail-together and hang-report part of ``NativeModel``."""

    fails_together: ClassVar[bool] = True

    _watch: FailureWatch | None = None  # learns of a peer's failure (initialize only)
    _reporter: Reporter | None = None  # publishes the ledger (initialize only)

    if TYPE_CHECKING:
        _backend: str
        _connections: Connections
        _layout: Layout
        ledger: CollectiveLedger

        def is_current(self) -> bool:
            """Whether this model's process group is the live one."""

        def get_rank(self) -> int:
            """This rank."""

        def _contract(self) -> ModelContract:
            """This model as the code below the models takes it."""

        def get_world_size(self) -> int:
            """The number of ranks."""

        def engine_trace(self, limit: int) -> dict[str, Any] | None:
            """torch's flight recorder, the last ``limit`` entries per group."""

    def _start_failing_together(self) -> None:
        """Let an uncaught exception leave a note and cut this rank off, watch for a peer's
        note, and publish the ledger."""
        rank, world_size = self._layout.rank, self._layout.world_size
        failure_hook.install_excepthook(rank, world_size, self.abort_communicator)
        store = coordination.default_store()
        self._watch = start_watch(store, rank, self.abort_communicator)
        engine = self.engine_trace
        self._reporter = None if store is None else start_reporter(store, self._contract(), engine)

    def _leave_job(self, current: bool) -> None:
        """At ``finalize``: stop watching and reporting; then, if this context is still
        ``current``, tell the peers this rank leaves (they tell "left" from "failed")."""
        failure_hook.uninstall_excepthook()
        record_for_launcher(sys.exc_info()[1])  # torchrun's summary names the rank at fault
        if self._watch is not None:
            self._watch.stop()
        if self._reporter is not None:
            self._reporter.stop(publish=current)  # its last ledger, before it leaves
        if current:
            fail_together.leave(self._layout.rank, self._layout.world_size, self.abort_communicator)

    def abort_communicator(self) -> None:
        """Cut this rank off its peers after a failure, so that their collectives fail now."""
        fail_together.abort_communicator(self._backend, self._connections)

    def known_failure(self) -> tuple[int, str] | None:
        """The failure note this rank's watcher read, if one came."""
        return None if self._watch is None else self._watch.note

    def hang_verdict(self, notes: Mapping[int, str], wait: float) -> str | None:
        """Who is at fault, from every rank's ledger asked through the job's store for up to
        ``wait`` seconds (``notes``: rank -> why it cannot answer); None without a store."""
        store = coordination.default_store()
        if store is None:
            return None
        return job_verdict(store, self._contract(), notes, wait, self.engine_trace)

    def failure_store(self) -> Any | None:
        """The default process group's store, which holds the failure note."""
        return coordination.default_store()
