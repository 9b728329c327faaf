"""The excepthook of fail together: an uncaught exception on a rank leaves its failure note.

While a context made by ``initialize`` lives, ``sys.excepthook`` is a `_FailureHook`: it
writes this rank's failure note to the job's store (`fail_together.record_failure`), lets
the previous hook show the traceback, then tears the communicator down, so that the peers'
collectives fail at once (see `distbridge.reliability.fail_together`). ``finalize`` puts the
previous hook back. Without a context nothing is installed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from distbridge.reliability.fail_together import (
    Teardown,
    default_store_or_none,
    record_failure,
    summarize,
)
from distbridge.reliability.hang.report import record_for_launcher

__all__ = ["install_excepthook", "uninstall_excepthook"]

_Hook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]


@dataclass(frozen=True)
class _FailureHook:
    """``sys.excepthook`` while a native context lives: note the failure, chain on (the
    traceback is shown), then tear the communicator down."""

    rank: int
    world_size: int
    previous: _Hook
    teardown: Teardown | None
    store_of: Callable[[], Any]

    def __call__(
        self, kind: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> Any:
        record_for_launcher(exc)  # torchrun's summary names the rank at fault
        with contextlib.suppress(Exception):  # no process group any more: nobody to tell
            store = self.store_of()
            if store is not None:
                record_failure(store, self.rank, summarize(exc), self.world_size)
        try:
            return self.previous(kind, exc, tb)
        finally:
            if self.teardown is not None:
                with contextlib.suppress(Exception):
                    self.teardown()


def install_excepthook(
    rank: int,
    world_size: int = 0,
    teardown: Teardown | None = None,
    store_of: Callable[[], Any] = default_store_or_none,
) -> None:
    """Make an uncaught exception on this rank leave a failure note for its peers, then call
    ``teardown()`` (abort the communicator, so that peers blocked in a collective fail now
    even if this process lingers). ``store_of()`` gives the store for the note (default:
    the default process group's)."""
    uninstall_excepthook()
    sys.excepthook = _FailureHook(rank, world_size, sys.excepthook, teardown, store_of)


def uninstall_excepthook() -> None:
    """Restore the excepthook `install_excepthook` replaced, if it is still in place."""
    hook = sys.excepthook
    if isinstance(hook, _FailureHook):
        sys.excepthook = hook.previous
