"""A rank of a warm world: join the world once, then run test functions until told to stop.

It runs in its own process group and dies with the thread that started it, as `spawn`'s
workers do. Its stdout and stderr go to a log file the parent reads; SIGUSR1 writes every
thread's Python stack there, SIGUSR2 its hang report to `report_dir` of the world's folder.
A test that raises leaves a failure note and cuts the rank's connections (fail-together),
so peers blocked in a collective raise `PeerFailed` instead of waiting for the timeout.

What the parent and a rank send each other over the rank's pipe: the parent starts the rank
with how it joins the world (`serve`'s arguments), then sends one `Task` per test (made by
`make_task`) and ``None`` to stop. A rank answers ``"ready"``, or the traceback of why it
could not join the world, then one `Outcome` per task.
"""

from __future__ import annotations

import ast
import contextlib
import faulthandler
import importlib
import importlib.util
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, NoReturn

from distbridge import _state
from distbridge._registry import registry
from distbridge.errors import PeerFailed
from distbridge.launch.warm_start import die_with_parent
from distbridge.models.base import ComputationModel
from distbridge.reliability.fail_together import record_failure, summarize
from distbridge.reliability.hang.signals import answer_report_signal, report_dir, report_on_signal

__all__ = ["Outcome", "Task", "exit_now", "make_task", "serve"]

_DETAIL_CHARS = 4000


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


def serve(
    rank: int,
    conn: Connection,
    backend: str | None,
    env: Mapping[str, str],
    log_path: str,
    debug: bool,
) -> None:
    """Entry point of a rank: join the world of ``backend`` (None: serial, no process group)
    with ``env``, answer tasks until ``None`` comes, then leave."""
    answer_report_signal(rank, report_dir(Path(log_path).parent.name))
    _isolate(log_path)
    os.environ.update(env)
    try:
        model = None
        if backend is not None:  # the world's model, made the active one
            model = registry.for_backend(backend).from_backend(backend, debug=debug)
            report_on_signal(model)
            _state.install(model)
    except BaseException:
        conn.send(traceback.format_exc())
        exit_now(1)
    conn.send("ready")
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent is gone
            exit_now(1)
        if task is None:
            break
        outcome = _run(task, rank, model)
        _flush()
        conn.send(outcome)
    if model is not None and model.is_current():
        model.finalize()
    exit_now(0)


def _isolate(log_path: str) -> None:
    os.setpgrp()  # the parent stops this rank together with whatever it started
    die_with_parent()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    for stream in (sys.stdout, sys.stderr):  # each line reaches the log as it is printed
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def _run(task: Task, rank: int, model: ComputationModel | None) -> Outcome:
    env = dict(os.environ)
    kwargs: dict[str, Any] = {}
    try:
        fn = getattr(_load_module(task), task.function)
        kwargs = {key: pickle.loads(value) for key, value in task.kwargs.items()}
        fn(**kwargs)
    except BaseException as exc:
        skipped = _is_skip(exc)
        if not skipped:  # a skip leaves the world up: its peers may finish, or skip too
            _fail_together(model, rank, exc)
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        # A PeerFailed's cause is the backend's "Connection closed by peer": noise here.
        chain = not isinstance(exc, PeerFailed)
        text = "".join(traceback.format_exception(type(exc), exc, tb, chain=chain))
        kept = not skipped or model is None or model.is_current()
        return Outcome(
            rank, task.task_id, False, type(exc).__name__, summarize(exc), text, kept, _detail(exc)
        )
    finally:  # a test must not change the next one's environment
        _undo_patches(kwargs)
        os.environ.clear()
        os.environ.update(env)
    kept = model is None or model.is_current()
    return Outcome(rank, task.task_id, True, world_kept=kept)


def _is_skip(exc: BaseException) -> bool:
    """``pytest.skip()`` was called (a Skipped can only come from an imported pytest)."""
    outcomes = sys.modules.get("_pytest.outcomes")
    return outcomes is not None and isinstance(exc, outcomes.Skipped)


def _detail(exc: BaseException) -> str:
    """The lines of the error's message after its first (at most ``_DETAIL_CHARS``)."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:
        return ""
    return "\n".join(lines[1:])[:_DETAIL_CHARS]


def _undo_patches(kwargs: dict[str, Any]) -> None:
    """Undo what the test did with pytest's ``monkeypatch`` on this rank."""
    for value in kwargs.values():
        if type(value).__module__ == "_pytest.monkeypatch":
            with contextlib.suppress(Exception):
                value.undo()


def _fail_together(model: ComputationModel | None, rank: int, exc: BaseException) -> None:
    """Fail together: leave the failure note and cut this rank's connections."""
    if model is None or model.together is None or not model.is_current():
        return
    world = model.get_world_size()
    if world > 1:
        with contextlib.suppress(Exception):
            record_failure(model.together.store_of(), rank, summarize(exc), world)
            model.abort_communicator()


def _load_module(task: Task) -> ModuleType:
    """The test module, imported once per rank as the parent imported it (same name)."""
    sys.path[:0] = [entry for entry in task.sys_path if entry not in sys.path]
    module = sys.modules.get(task.module)
    known = getattr(module, "__file__", None)
    if isinstance(known, str) and os.path.realpath(known) == os.path.realpath(task.path):
        return sys.modules[task.module]
    parent = task.module.rpartition(".")[0]
    if parent:  # so that relative imports work; a test directory need not be a package
        with contextlib.suppress(ImportError):
            importlib.import_module(parent)
    spec = importlib.util.spec_from_file_location(task.module, task.path)
    if spec is None:
        raise ImportError(f"cannot import {task.module!r} from {task.path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[task.module] = module
    try:
        exec(_compile(Path(task.path)), module.__dict__)
    except BaseException:
        del sys.modules[task.module]
        raise
    return module


def _compile(path: Path) -> CodeType:
    """The module's code, with pytest's assertion rewriting when pytest is there (so a
    failed ``assert a == b`` shows both values, as in the parent)."""
    source = path.read_bytes()
    tree = ast.parse(source, filename=str(path))
    with contextlib.suppress(Exception):  # pytest absent or its internals changed
        from _pytest.assertion.rewrite import rewrite_asserts

        rewrite_asserts(tree, source, str(path), None)
    return compile(tree, str(path), "exec", dont_inherit=True)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def exit_now(code: int) -> NoReturn:
    """Flush stdout and stderr, then end the process at once (``os._exit``: nothing else runs)."""
    _flush()
    os._exit(code)
