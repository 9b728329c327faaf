"""What the pytest process and a warm world's ranks send each other over their pipes.

The parent sends a `Setup` (as a process argument), then one `Task` per test and ``None`` to
stop. A rank answers ``("ready", pid)`` or ``("failed", traceback)`` once it joined the
world, then one `Outcome` per task.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Outcome", "Setup", "Task", "make_task"]


@dataclass(frozen=True)
class Setup:
    """How a rank joins its world: ``backend`` None runs serially (no process group)."""

    backend: str | None
    world_size: int
    env: Mapping[str, str]
    log_path: str
    debug: bool = False


@dataclass(frozen=True)
class Task:
    """One test: call ``module.function(**kwargs)`` on every rank.

    ``path`` is the module's file (imported from there when the name alone does not find
    it); ``kwargs`` holds each argument pickled on its own (unpickled on the rank, where a
    failure is the test's); ``sys_path`` is the parent's import path at the time, so the
    test's own imports resolve as in the parent.
    """

    task_id: int
    module: str
    path: str
    function: str
    kwargs: Mapping[str, bytes]
    sys_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """How one rank ran one task. ``summary`` is the error's first line, ``detail`` the rest
    of its message (a table, a hint). ``world_kept`` is False when the test left the world
    unusable (it finalized the process group), so the world must be replaced."""

    rank: int
    task_id: int
    passed: bool
    error_type: str = ""
    summary: str = ""
    traceback: str = ""
    world_kept: bool = True
    detail: str = ""

    @property
    def skipped(self) -> bool:
        """The test called ``pytest.skip`` on this rank."""
        return self.error_type == "Skipped"


def make_task(task_id: int, fn: Callable[..., Any], kwargs: Mapping[str, Any] | None) -> Task:
    """A `Task` that calls ``fn(**kwargs)``; TypeError when the ranks could not find ``fn``
    (not a top-level function of a module file) or receive an argument (it does not pickle)."""
    name = getattr(fn, "__qualname__", None)
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    path = None if module is None else getattr(module, "__file__", None)
    if module is None or path is None or not isinstance(name, str) or "." in name:
        raise TypeError(
            f"A warm world runs top-level functions of a module file, got {fn!r}: define it "
            "at the top level of a module (not in a class, another function or __main__ "
            "typed on stdin) so that every rank can import it."
        )
    payload: dict[str, bytes] = {}
    for key, value in (kwargs or {}).items():
        try:
            payload[key] = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:
            raise TypeError(  # one message: the pickle error's own traceback is noise here
                f"{name}'s argument {key!r} = {value!r:.80} cannot be sent to the ranks: it "
                f"does not pickle ({type(err).__name__}: {err}). Only values that pickle "
                "(tmp_path, numbers, strings, parameters) can be passed: make the rest inside "
                "the test."
            ) from None
    return Task(task_id, module.__name__, str(path), name, payload, tuple(sys.path))
