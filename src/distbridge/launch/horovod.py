"""``spawn`` for Horovod: ``horovod.run`` starts the workers (Gloo controller), one job.

``horovod.run`` already fails fast: when a worker exits non-zero it stops the others and
raises a ``RuntimeError`` naming the first one. It keeps the worker's traceback in that
worker's stderr only, so each worker here writes one marked line there when it fails, and
the parent, which has every worker's stderr in a temporary folder, turns it into a
`WorkerFailedError` with the rank and the traceback. A ``job_timeout`` is kept by each worker
itself (``faulthandler`` prints its stacks and exits), so a hang on any machine ends too.
SIGUSR2 makes a worker write its hang report and go on; sent to the parent during
``horovod.run``, it is passed on to this machine's workers, which leave their pids in that
temporary folder (``.pid-rank<r>``) for it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cloudpickle

from distbridge.errors import PicklingError, WorkerFailedError
from distbridge.launch._joinable import Activate, JoinedCall, MakeModel
from distbridge.launch._signals import handlers_kept, leave_pid, passing_on, pids_left
from distbridge.launch._worker_reports import (
    STOPPED,
    death,
    error_report,
    one_line,
    raised_error,
)
from distbridge.launch.supervisor import check_seconds, positive_int, timeout_error
from distbridge.reliability.hang.signals import answer_report_signal, report_dir

__all__ = ["spawn_horovod"]

_MARK = "[distbridge-worker-error]"
_FIRST = re.compile(r"Process name: (\S+)\s+Exit code: (-?\d+)")
_PEER_ERRORS = ("HorovodInternalError", "PeerFailed")  # raised because another rank failed


@dataclass(frozen=True)
class _HorovodWorker(JoinedCall):
    """What each worker runs: join the job, call ``fn``, leave the job; report a failure."""

    job_timeout: float | None
    reports: str = ""  # the parent's report folder
    pids: str = ""  # where a worker on the parent's machine leaves its pid

    def __call__(self) -> Any:
        rank = int(os.environ.get("HOROVOD_RANK", "0"))
        answer_report_signal(rank, self.reports)
        leave_pid(self.pids, rank)  # for the parent, which passes SIGUSR2 on
        if self.job_timeout is not None:  # a C thread: fires even inside a blocked collective
            faulthandler.dump_traceback_later(self.job_timeout, exit=True)
        try:
            return self.run()
        except BaseException as exc:  # reported before leaving the job: the others fail later
            record = {"rank": rank, "report": error_report(exc), "time": time.time()}
            print(_MARK + json.dumps(record), file=sys.stderr, flush=True)
            raise
        finally:
            faulthandler.cancel_dump_traceback_later()


def _host_names(hosts: str | Sequence[str] | None, nproc: int) -> list[str]:
    """The machines of the job, each given exactly ``nproc`` slots."""
    if hosts is None:
        return ["localhost"]
    items = hosts.split(",") if isinstance(hosts, str) else list(hosts)
    names = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"hosts must be 'host1,host2' or 'host1:N,host2:N', got {hosts!r}.")
        name, _, slots = item.strip().partition(":")
        if slots and slots != str(nproc):
            raise ValueError(
                f"hosts gives {slots!r} slots to {name!r} but nproc_per_node={nproc}: give "
                f"every host nproc_per_node slots ('{name}:{nproc}') or none ('{name}')."
            )
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"hosts names a machine twice: {hosts!r}.")
    return names


def spawn_horovod(
    make_model: MakeModel,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs_dict: Mapping[str, Any],
    nproc_per_node: int,
    *,
    activate: Activate = contextlib.nullcontext,
    hosts: str | Sequence[str] | None = None,
    nnodes: int | None = None,
    node_rank: int | None = None,
    job_timeout: float | None = None,
    start_timeout: int | None = None,
    verbose: bool = False,
) -> list[Any]:
    """Run ``fn(local_rank, *args, **kwargs_dict)`` in ``nproc_per_node`` workers on each
    machine of ``hosts`` (default: this one) and return every worker's result, in rank order.

    Each worker joins as ``make_model("horovod")`` and runs ``fn`` inside ``activate(model)``
    (see `distbridge.launch._joinable`)."""
    nproc = positive_int("nproc_per_node", nproc_per_node)
    names = _host_names(hosts, nproc)
    if nnodes is not None and nnodes != len(names):
        raise ValueError(
            f"nnodes={nnodes!r} but hosts names {len(names)} machine(s); with Horovod, list the "
            "machines in hosts='host1,host2' and leave nnodes out."
        )
    if node_rank not in (None, 0):
        raise ValueError(
            f"node_rank={node_rank!r}: horovod.run starts every machine from this one, so "
            "node_rank must be 0 or left out; list the machines in hosts= instead."
        )
    check_seconds("job_timeout", job_timeout, none=True)
    import horovod

    reports = report_dir(os.getpid())
    worker = _HorovodWorker(
        make_model, activate, "horovod", fn, tuple(args), dict(kwargs_dict), job_timeout, reports
    )
    try:
        cloudpickle.dumps(worker)  # horovod.run's own serializer
    except Exception as err:
        raise PicklingError(
            f"spawn('horovod') cannot send {fn!r} or its arguments to the workers: "
            f"{type(err).__name__}: {err}. Pass picklable values."
        ) from err
    num_proc = nproc * len(names)
    started = time.monotonic()
    # horovod.run replaces the SIGINT and SIGTERM handlers for good: they come back after it
    kept = handlers_kept(signal.SIGINT, signal.SIGTERM)
    with tempfile.TemporaryDirectory(prefix="distbridge-hvd-") as out, kept:
        try:
            with passing_on(lambda: pids_left(out), reports):
                results: list[Any] = horovod.run(
                    replace(worker, pids=out),
                    num_proc=num_proc,
                    hosts=",".join(f"{name}:{nproc}" for name in names),
                    use_gloo=True,
                    start_timeout=start_timeout,
                    output_filename=out,
                    verbose=verbose or None,
                    disable_cache=True,
                )
        except RuntimeError as err:
            elapsed = time.monotonic() - started
            raise _failure(err, Path(out), nproc, elapsed, job_timeout) from None
    return results


def _failure(
    err: RuntimeError, out: Path, nproc: int, elapsed: float, job_timeout: float | None
) -> Exception:
    """The error to raise for horovod.run's ``err``, from the workers' stderr in ``out``."""
    records = []
    for stderr in out.glob("rank.*/stderr"):
        for line in stderr.read_text(errors="replace").splitlines():
            if _MARK in line:
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line.split(_MARK, 1)[1]))
    if records:
        # A rank that raised first, and not because a peer failed or left, is the cause.
        first = min(records, key=lambda r: (r["report"][2] in _PEER_ERRORS, r["time"]))
        rank = int(first["rank"])
        others = [r for r in records if r is not first]
        reports = {int(r["rank"]): one_line(*r["report"][2:]) for r in others}
        return raised_error(rank, rank % nproc, tuple(first["report"]), reports)
    if job_timeout is not None and elapsed >= job_timeout:
        return timeout_error(job_timeout, "every worker was stopped")
    found = _FIRST.search(str(err))
    if found is None:  # horovod.run could not read a result: a worker exited 0 without one
        return WorkerFailedError(
            f"A worker {death(0)}; horovod.run said: {err}. {STOPPED}",
            rank=-1,
            local_rank=-1,
            exitcode=0,
        )
    rank, code = int(found.group(1)) if found.group(1).isdigit() else -1, int(found.group(2))
    # horovod.run starts each worker in a shell, which exits with 128 + N after signal N
    signum = code - 128 if 128 < code < 128 + 65 else 0
    return WorkerFailedError(
        f"Worker rank {rank} (local rank {rank % nproc}) {death(-signum or code)}. {STOPPED}",
        rank=rank,
        local_rank=rank % nproc,
        exitcode=code,
    )
