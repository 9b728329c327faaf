"""Preemption and time limits: every rank stops at the same step, checkpoints once, requeues once.

A signal handler only sets a flag; every ``check_every`` steps the ranks all-reduce it with
MAX, so a signal that reached any one rank stops them all at the same step. There `StopGuard`
writes a complete checkpoint and (on SLURM) requeues the job; `resume` loads the newest one.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import torch

from distbridge._api import get_rank, get_world_size
from distbridge._collectives import all_reduce, barrier
from distbridge._state import current
from distbridge.checkpoint import load_checkpoint, save_checkpoint
from distbridge.environments.base import read_int
from distbridge.environments.slurm import requeue_job_id
from distbridge.objects import all_gather_object, broadcast_object
from distbridge.reliability.hang.signals import unwatch_signals, watch_signals

__all__ = ["StopGuard", "resume"]

DEFAULT_SIGNALS = ("SIGUSR2", "SIGTERM")
#: what torchrun's agent forwards to its workers unless ``--signals-to-handle`` says otherwise
TORCHRUN_FORWARDS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
_COMPLETE = re.compile(r"^step-(\d+)\.pt$")
_NONE, _TIMEOUT, _PREEMPTED = 0, 1, 2  # reasons to stop; the ranks agree on the largest


def _say(text: str) -> None:
    print(f"distbridge: rank {get_rank()}: {text}", file=sys.stderr, flush=True)


class StopGuard:
    """Stop every rank at the same step on a signal or a time budget; checkpoint; requeue.

    ``with StopGuard(run_dir) as stop:`` installs the handlers (restoring the previous ones
    on exit; a previous Python handler is still called after the flag is set). In the loop,
    ``if stop.should_stop(step): stop.checkpoint_and_exit(step, model, optimizer)``, where
    ``step`` counts the steps done.

    Args:
        run_dir: where the checkpoints go (rank 0 writes them; `resume` reads them).
        check_every: the ranks agree every this many steps (one all_reduce of an int).
        signals: names of the signals that request a stop (USR1 is NCCL's: not a default).
        time_budget: seconds after entering; then the ranks stop as if signalled.
        keep: how many complete checkpoints stay in ``run_dir``.
        timeout_signals: the signals that mean "the time limit is near" (SLURM's
            ``--signal=USR2@90``); they and the time budget requeue at most
            ``max_timeout_requeues`` times (SLURM_RESTART_COUNT), any other signal always.
        kill_after: seconds the launcher leaves between SIGTERM and SIGKILL (torchrun and
            SLURM's KillWait: 30); rank 0 says so once when agreements are half that apart.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        check_every: int = 10,
        signals: Sequence[str] = DEFAULT_SIGNALS,
        time_budget: float | None = None,
        keep: int = 2,
        timeout_signals: Sequence[str] = ("SIGUSR2",),
        max_timeout_requeues: int = 3,
        kill_after: float = 30.0,
    ) -> None:
        counts = (("check_every", check_every, 1), ("keep", keep, 1),
                  ("max_timeout_requeues", max_timeout_requeues, 0))  # fmt: skip
        for name, value, least in counts:
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"StopGuard({name}={value!r}): pass an int >= {least}.")
        if time_budget is not None and not _seconds(time_budget):
            raise ValueError(f"StopGuard(time_budget={time_budget!r}): pass seconds > 0 or None.")
        if not _seconds(kill_after):
            raise ValueError(f"StopGuard(kill_after={kill_after!r}): pass seconds > 0.")
        for name, names in (("signals", signals), ("timeout_signals", timeout_signals)):
            if isinstance(names, str):
                raise TypeError(f"StopGuard({name}={names!r}): pass a list of signal names.")
        self.run_dir = Path(run_dir)
        self.check_every, self.keep, self.time_budget = check_every, keep, time_budget
        self.signals = [_signal(name) for name in signals]
        self.timeout_signals = {_signal(name) for name in timeout_signals}
        self.max_timeout_requeues, self.kill_after = max_timeout_requeues, kill_after
        self.received: list[tuple[int, float]] = []  # (signal, time.time()) as they came
        self.stop_step: int | None = None
        self.reason = _NONE
        self._deadline = self._last_check = float("inf")
        self._previous: dict[int, Any] = {}
        self._rewatch = self._warned = False

    def __enter__(self) -> StopGuard:
        self._last_check = time.monotonic()
        self._deadline = self._last_check + (self.time_budget or float("inf"))
        if threading.current_thread() is not threading.main_thread():
            _say("StopGuard outside the main thread: no signal handlers (Python allows none).")
            return self
        # The hang verdict's SIGTERM handler (reliability/hang/signals.py) ends the process: it
        # yields while the guard runs.
        term = signal.SIGTERM
        hang_watch = getattr(signal.getsignal(term), "__module__", None) == watch_signals.__module__
        if term in self.signals and hang_watch:
            unwatch_signals()
            self._previous[term] = signal.signal(term, self._handle)
            watch_signals(current())  # its SIGUSR2 dump again (SIGTERM is taken now)
            self._rewatch = True
        for signum in self.signals:
            if signum not in self._previous:
                self._previous[signum] = signal.signal(signum, self._handle)
        self._warn_if_undeliverable()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in reversed(self._previous.items()):
            signal.signal(signum, previous)
        self._previous.clear()
        if self._rewatch:
            unwatch_signals()
            watch_signals(current())
            self._rewatch = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """Only a flag (no I/O, no collective); then the previous Python handler, if any."""
        self.received.append((signum, time.time()))
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)

    def should_stop(self, step: int) -> bool:
        """Whether every rank stops after ``step``; the same answer on every rank.

        Every rank calls it after each step; at every ``check_every``-th step the ranks agree
        (one all_reduce). Once True, it stays True.

        Note:
            Without a distributed context it checks at every step: one process stops at once.
        """
        if self.stop_step is not None:
            return True
        world = get_world_size()
        if world > 1 and step % self.check_every:
            return False
        now, last, self._last_check = time.monotonic(), self._last_check, time.monotonic()
        if now - last > self.kill_after / 2 and world > 1 and get_rank() == 0 and not self._warned:
            self._warned = True  # once: the agreements are too far apart for a launcher's kill
            _say(f"the ranks agree every {now - last:.1f} s (check_every={self.check_every}), "
                 f"the launcher kills {self.kill_after:g} s after SIGTERM (kill_after): a stop "
                 "may not reach its checkpoint in time. Lower check_every.")  # fmt: skip
        local = _NONE
        if self.received:
            timeout = all(s in self.timeout_signals for s, _ in self.received)
            local = _TIMEOUT if timeout else _PREEMPTED
        elif time.monotonic() >= self._deadline:
            local = _TIMEOUT
        reason = all_reduce(local, op="MAX") if world > 1 else local
        if not reason:
            return False
        self.stop_step, self.reason = step, reason
        for signum, at in self.received:
            _say(f"{signal.Signals(signum).name} arrived at {time.ctime(at)}.")
        why = "a time limit" if reason == _TIMEOUT else "a preemption"
        _say(f"every rank stops after step {step} ({why}).")
        return True

    def checkpoint(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write ``run_dir/step-<step>.pt`` through `save_checkpoint`, complete or not at all.

        The file is written as ``step-<step>.pt.incomplete`` and renamed once every rank has
        finished its part; then only the newest ``keep`` complete checkpoints remain (and no
        incomplete ones). Every rank's torch RNG state rides along. Every rank calls it.

        Note:
            Without a distributed context this process writes and renames the file.
        """
        final = self.run_dir / f"step-{step:09d}.pt"
        temp = final.with_name(final.name + ".incomplete")
        rng = all_gather_object(torch.get_rng_state())
        save_checkpoint(temp, model, optimizer, {**(extra or {}), "step": step, "rng": rng})
        if get_rank() == 0:  # save_checkpoint ended in a barrier: every rank is done
            os.replace(temp, final)
            _prune(self.run_dir, self.keep)
        barrier()
        return final

    def checkpoint_and_exit(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> NoReturn:
        """`checkpoint`, then (on SLURM) requeue the job from rank 0, then end the process
        with exit status 0 (``SystemExit(0)``: ``spawn`` counts it as a clean return)."""
        path = self.checkpoint(step, model, optimizer, extra)
        _say(f"checkpoint of step {step} complete: {path}")
        job = requeue_job_id(os.environ)
        if job is None:
            _say(f"not requeued (not a SLURM job); run the same command to resume from {path}.")
        elif get_rank() == 0:
            self._requeue(job)
        else:
            _say(f"rank 0 requeues SLURM job {job} (or says why not).")
        raise SystemExit(0)

    def _requeue(self, job: str) -> None:
        restarts = read_int(os.environ, "SLURM_RESTART_COUNT") or 0
        if self.reason == _TIMEOUT and restarts >= self.max_timeout_requeues:
            _say(f"not requeued: job {job} was restarted {restarts} times already "
                 f"(max_timeout_requeues={self.max_timeout_requeues}).")  # fmt: skip
            return
        if shutil.which("scontrol") is None:
            _say(f"not requeued: scontrol is not on PATH; requeue job {job} by hand.")
            return
        try:
            done = subprocess.run(
                ["scontrol", "requeue", job], capture_output=True, text=True, timeout=60
            )
            error = done.stderr.strip() if done.returncode else ""
        except subprocess.TimeoutExpired:
            error = "scontrol did not answer in 60 s"
        if error:
            _say(f"requeue of job {job} failed ({error}); is it a batch job submitted with "
                 "--requeue? Resubmit it to resume.")  # fmt: skip
        else:
            _say(f"requeued SLURM job {job} (restart {restarts + 1}).")

    def _warn_if_undeliverable(self) -> None:
        if not os.environ.get("TORCHELASTIC_RUN_ID") or get_rank() != 0:
            return
        forwarded = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE") or TORCHRUN_FORWARDS
        known = forwarded.replace(" ", "").split(",")
        lost = [s.name for s in map(signal.Signals, self.signals) if s.name not in known]
        if lost:
            _say(f"torchrun forwards only {forwarded} to the ranks: {', '.join(lost)} sent to "
                 f"its agent ends the agent, not the ranks' training with a checkpoint. Start "
                 f"torchrun with --signals-to-handle="
                 f"{forwarded},{','.join(lost)}, or signal the ranks' processes.")  # fmt: skip


def resume(
    run_dir: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    rng: bool = True,
) -> dict[str, Any]:
    """Load the newest complete checkpoint of ``run_dir`` into ``model`` (and ``optimizer``).

    Returns its ``extra`` with ``"step"`` (the steps done); ``{"step": 0}`` when there is no
    complete checkpoint (a fresh start, not an error). With ``rng``, each rank gets its torch
    RNG state back when the world size is the one that saved it. Every rank calls it.

    Note:
        Without a distributed context this process reads the file and loads it.
    """
    newest = None
    if get_rank() == 0 and Path(run_dir).is_dir():
        found = _complete(Path(run_dir))
        newest = found[-1].name if found else None
    newest = broadcast_object(newest, src=0) if get_world_size() > 1 else newest
    if newest is None:
        return {"step": 0}
    extra = load_checkpoint(Path(run_dir) / newest, model, optimizer)
    states = extra.pop("rng", None)
    if rng and states is not None and len(states) == get_world_size():
        torch.set_rng_state(states[get_rank()])
    _say(f"resumed from {Path(run_dir) / newest} (step {extra['step']}).")
    return extra


def _prune(run_dir: Path, keep: int) -> None:
    """Keep the newest ``keep`` complete checkpoints; drop the rest and every incomplete file."""
    complete = _complete(run_dir)
    stale = [p for p in run_dir.iterdir() if p.name.endswith((".incomplete", ".partial"))]
    for path in complete[:-keep] + stale:
        path.unlink(missing_ok=True)


def _complete(run_dir: Path) -> list[Path]:
    """The complete checkpoints in ``run_dir``, oldest first: by step number, not by name
    (``step-1000000000.pt`` sorts before ``step-999999999.pt`` as text)."""
    found = [(int(m[1]), p) for p in run_dir.iterdir() if (m := _COMPLETE.match(p.name))]
    return [path for _, path in sorted(found)]


def _seconds(value: object) -> bool:
    """Whether ``value`` is a number of seconds above 0 (inf included, NaN not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _signal(name: str) -> int:
    if not isinstance(name, str):
        raise TypeError(f"StopGuard names signals by str, e.g. 'SIGUSR2', got {name!r}.")
    try:
        return int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        raise ValueError(f"StopGuard: unknown signal {name!r}; use names like 'SIGUSR2'.") from None
