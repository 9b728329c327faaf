"""FailingTogether: a rank's part in failing together and in the hang verdict.

A model that fails together (native, Horovod) holds one. Made, it only knows where the job's
store is (``store_of()``), so that an adopted context can still read a peer's failure note
and say at ``finalize`` that it leaves. ``start`` (``initialize`` in a world of two or more)
adds the rest: an uncaught exception leaves a note and calls ``teardown`` (cut this rank off
its peers), a watcher learns of a peer's note and calls ``cut_off``, and a reporter publishes
the ledger so that a timeout anywhere can name the rank at fault. ``leave`` stops them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from distbridge.model_contract import ModelContract
from distbridge.reliability import fail_together, failure_hook
from distbridge.reliability.failure_watch import FailureWatch, start_watch
from distbridge.reliability.hang.collect import job_verdict
from distbridge.reliability.hang.engine_trace import EngineTrace
from distbridge.reliability.hang.report import Reporter, record_for_launcher, start_reporter

__all__ = ["FailingTogether"]


class FailingTogether:
    """Fail together with the other ranks of ``model``'s job through the store ``store_of()``
    gives (None: there is none). ``cut_off`` ends this rank's part of the communicator when a
    peer fails (None: nothing to cut); ``engine`` is the model's ``_engine_trace``, where its
    engine keeps a record of collectives."""

    def __init__(
        self,
        model: ModelContract,
        store_of: Callable[[], Any],
        cut_off: Callable[[], None] | None = None,
        engine: EngineTrace | None = None,
    ) -> None:
        self.store_of = store_of
        self._model = model
        self._cut_off = cut_off
        self._engine = engine
        self._watch: FailureWatch | None = None
        self._reporter: Reporter | None = None

    def start(self, teardown: Callable[[], object]) -> None:
        """Let an uncaught exception leave a note and call ``teardown()``, watch for a peer's
        note, and publish the ledger."""
        model, store = self._model, self.store_of()
        rank, world_size = model.get_rank(), model.get_world_size()
        failure_hook.install_excepthook(rank, world_size, teardown, self.store_of)
        self._watch = start_watch(store, rank, self._cut_off or _nothing)
        if store is not None:
            self._reporter = start_reporter(store, model, self._engine)

    def leave(self, current: bool) -> None:
        """At ``finalize``: stop watching and reporting; then, if the context is still
        ``current``, tell the peers this rank leaves (they tell "left" from "failed")."""
        failure_hook.uninstall_excepthook()
        record_for_launcher(sys.exc_info()[1])  # torchrun's summary names the rank at fault
        if self._watch is not None:
            self._watch.stop()
        if self._reporter is not None:
            self._reporter.stop(publish=current)  # its last ledger, before it leaves
        store = self.store_of()
        if current and store is not None:
            model = self._model
            fail_together.leave(model.get_rank(), model.get_world_size(), self._cut_off, store)

    def known_failure(self) -> tuple[int, str] | None:
        """The failure note the watcher read, if one came."""
        return None if self._watch is None else self._watch.note

    def verdict(self, notes: Mapping[int, str], wait: float) -> str | None:
        """Who is at fault, from every rank's ledger asked through the store for up to
        ``wait`` seconds (``notes``: rank -> why it cannot answer); None without a store."""
        store = self.store_of()
        if store is None:
            return None
        return job_verdict(store, self._model, notes, wait, self._engine)


def _nothing() -> None:
    """What a peer's failure note asks of a rank with nothing to cut off."""
