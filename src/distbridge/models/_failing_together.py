"""FailingTogether: a rank's part in failing together and in the hang verdict.

A model that fails together (native, Horovod) holds one. Made, it only knows where the job's
store is (``store_of()``), so that an adopted context can still read a peer's failure note
and say at ``finalize`` that it leaves. ``start`` (``initialize`` in a world of two or more)
adds the rest: an uncaught exception leaves a note and calls ``teardown`` (cut this rank off
its peers), a watcher learns of a peer's note and calls the model's ``abort_communicator``, and
a reporter publishes the ledger so that a timeout anywhere can name the rank at fault.
``leave`` stops them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from distbridge.model_contract import ModelContract
from distbridge.reliability import fail_together
from distbridge.reliability.fail_together import FailureWatch
from distbridge.reliability.hang.report import Reporter, collect, start_reporter
from distbridge.reliability.hang.verdict import verdict

__all__ = ["FailingTogether"]


class FailingTogether:
    """Fail together with the other ranks of ``model``'s job through the store ``store_of()``
    gives (None: there is none). When a peer fails, ``model.abort_communicator()`` ends this
    rank's part of the communicator; the reports carry ``model._engine_trace``, its engine's
    record of collectives (where it keeps one)."""

    def __init__(self, model: ModelContract, store_of: Callable[[], Any]) -> None:
        self.store_of = store_of
        self._model = model
        self._watch: FailureWatch | None = None
        self._reporter: Reporter | None = None

    def start(self, teardown: Callable[[], object]) -> None:
        """Let an uncaught exception leave a note and call ``teardown()``, watch for a peer's
        note, and publish the ledger."""
        model, store = self._model, self.store_of()
        rank, world_size = model.get_rank(), model.get_world_size()
        fail_together.install_excepthook(rank, world_size, teardown, self.store_of)
        if store is not None:
            # no watcher where the store cannot be cloned (a ``HashStore``)
            with contextlib.suppress(AttributeError, RuntimeError):
                self._watch = FailureWatch(store, rank, model.abort_communicator)
            self._reporter = start_reporter(store, model)

    def leave(self, current: bool) -> None:
        """At ``finalize``: stop watching and reporting; then, if the context is still
        ``current``, tell the peers this rank leaves (they tell "left" from "failed")."""
        fail_together.uninstall_excepthook()
        # torchrun's summary names the rank at fault
        fail_together.record_for_launcher(sys.exc_info()[1])
        if self._watch is not None:
            self._watch.stop()
        if self._reporter is not None:
            self._reporter.stop(publish=current)  # its last ledger, before it leaves
        store = self.store_of()
        if current and store is not None:
            model = self._model
            fail_together.leave(
                model.get_rank(), model.get_world_size(), model.abort_communicator, store
            )

    def known_failure(self) -> tuple[int, str] | None:
        """The failure note the watcher read, if one came."""
        return None if self._watch is None else self._watch.note

    def verdict(self, notes: Mapping[int, str], wait: float) -> str | None:
        """Who is at fault, from every rank's ledger (and engine record) asked through the
        store for up to ``wait`` seconds (``notes``: rank -> why it cannot answer); None
        without a store."""
        store, model = self.store_of(), self._model
        if store is None:
            return None
        world, me = model.get_world_size(), (model.get_rank(), model.ledger)
        reports = collect(store, world, me=me, wait=wait, notes=notes, engine=model._engine_trace)
        return verdict(reports, world).text
