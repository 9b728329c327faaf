"""``spawn`` for PyTorch/XLA: torch_xla's ``xmp.spawn``, supervised, returning every result.

The parent never imports torch_xla. It starts one launcher process under distbridge's
supervisor (so ``job_timeout``, Ctrl-C, and "no process outlives the call" work as for the
native backends), and the launcher calls ``torch_xla.distributed.xla_multiprocessing.spawn``:
with ``nproc_per_node=1`` the replica runs in the launcher itself, otherwise torch_xla starts
one process per device, all in the launcher's process group.

``xmp.spawn`` returns nothing, so each replica reports to a file of its own in a folder the
parent owns: ``(rank, report)``, with the report a spawn worker sends. A replica that raises
while it has siblings in other processes stops the whole process group at once, so nobody
waits in a collective for it.

SIGUSR2 makes a replica write its hang report and go on. The parent passes it on to the
launcher: the replica itself with ``nproc_per_node=1``; otherwise the launcher passes it on
to the replicas, which leave their pids in the parent's folder for that.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map_only

from distbridge.errors import WorkerFailedError
from distbridge.launch._joinable import Activate, JoinedCall, MakeModel
from distbridge.launch._signals import leave_pid, passing_on, pids_left
from distbridge.launch._worker_reports import (
    Report,
    dump_report,
    load_report,
    raised_error,
    run_reported,
)
from distbridge.launch.pickling import prepare_call
from distbridge.launch.supervisor import check_spawn_options, positive_int, run_workers
from distbridge.launch.warm_start import die_with_parent
from distbridge.reliability.hang.signals import answer_report_signal, report_dir

__all__ = ["spawn_xla"]


def _on_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, moved to the CPU if it is an XLA tensor: the parent has no XLA runtime."""
    return tensor.cpu() if tensor.device.type == "xla" else tensor


@dataclass(frozen=True)
class _Replica(JoinedCall):
    """What runs in every XLA replica: check the host, join, call ``fn``, report."""

    nproc: int
    folder: str
    start_method: str
    reports: str  # the parent's report folder
    launcher_pid: int = 0

    def launch(self, index: int) -> None:
        """The one supervised process: hand the replicas to ``xmp.spawn``."""
        import torch_xla.distributed.xla_multiprocessing as xmp

        replica = replace(self, launcher_pid=os.getpid())
        if self.nproc == 1:  # xmp.spawn takes 1 or "every device"; 1 runs here
            xmp.spawn(replica, nprocs=1, start_method=self.start_method)
            return
        answer_report_signal(-1, self.reports)  # no report of its own: the replicas'
        with passing_on(lambda: pids_left(self.folder), self.reports):
            xmp.spawn(replica, nprocs=None, start_method=self.start_method)

    def __call__(self, ordinal: int) -> None:
        import torch_xla.runtime as xr

        in_pool = os.getpid() != self.launcher_pid  # torch_xla started a process per device
        answer_report_signal(ordinal, self.reports)
        if in_pool:
            leave_pid(self.folder, ordinal)  # the launcher passes SIGUSR2 on
            die_with_parent()
        report = run_reported(functools.partial(self._checked_run, xr.local_device_count()))
        path = Path(self.folder, f"{xr.local_ordinal()}-{ordinal}.pkl")  # local and global rank
        path.with_suffix(".partial").write_bytes(dump_report(report))
        os.replace(path.with_suffix(".partial"), path)  # the parent never reads half a report
        if in_pool and report[0] == "error":  # siblings in other processes may wait for us
            os.killpg(os.getpgrp(), signal.SIGTERM)

    def _checked_run(self, devices: int) -> Any:
        if devices != self.nproc:
            raise ValueError(
                f"spawn got nproc_per_node={self.nproc}, but this host has {devices} XLA "
                f"device(s) and xmp.spawn runs one replica per device; pass "
                f"nproc_per_node={devices}, or limit the devices (TPU_VISIBLE_CHIPS, "
                "CPU_NUM_DEVICES, ...)."
            )
        return tree_map_only(torch.Tensor, _on_cpu, self.run())


def spawn_xla(
    make_model: MakeModel,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs_dict: Mapping[str, Any],
    nproc_per_node: int,
    *,
    backend: str = "xla-tpu",
    activate: Activate = contextlib.nullcontext,
    start_method: str = "spawn",
    job_timeout: float | None = None,
    join: bool = True,
    nnodes: int = 1,
    node_rank: int = 0,
) -> list[Any]:
    """Run ``fn(local_rank, *args, **kwargs_dict)`` in every XLA replica of this host; return
    their results in local-rank order (XLA tensors in them come back on the CPU).

    Each replica joins as ``make_model(backend)`` and runs ``fn`` inside ``activate(model)``
    (see `distbridge.launch._joinable`)."""
    positive_int("nproc_per_node", nproc_per_node)
    if (nnodes, node_rank) != (1, 0):
        raise ValueError(
            f"spawn got nnodes={nnodes!r}, node_rank={node_rank!r}, but XLA takes the hosts from "
            "its runtime: run the same spawn on every host and drop nnodes and node_rank."
        )
    check_spawn_options(start_method, join)
    fn, args, kwargs_dict = prepare_call(fn, args, kwargs_dict, start_method)
    with tempfile.TemporaryDirectory(prefix="distbridge-xla-", ignore_cleanup_errors=True) as out:
        replica = _Replica(
            make_model, activate, backend, fn, tuple(args), dict(kwargs_dict), nproc_per_node,
            out, start_method, report_dir(os.getpid()),
        )  # fmt: skip
        failed = None
        try:
            run_workers(replica.launch, 1, start_method=start_method, job_timeout=job_timeout)
        except WorkerFailedError as err:
            failed = err
        return _results(out, nproc_per_node, failed)


def _results(folder: str, nproc: int, failed: WorkerFailedError | None) -> list[Any]:
    """The replicas' results by local rank; raise the error of the first replica that failed,
    else ``failed`` (the launcher's)."""
    reports: dict[int, tuple[int, Report]] = {}  # local rank: (rank, report)
    for path in sorted(Path(folder).glob("*.pkl"), key=lambda path: path.stat().st_mtime_ns):
        local, rank = map(int, path.stem.split("-"))
        reports[local] = (rank, load_report(path.read_bytes()))
    for local, (rank, report) in reports.items():  # in the order they were written
        if report[0] == "error":
            raise raised_error(rank, local, report)
    if failed is not None:
        raise failed
    missing = [local for local in range(nproc) if local not in reports]
    if missing:
        raise WorkerFailedError(
            f"XLA replicas with local ranks {missing} ended without reporting a result, though "
            "xmp.spawn returned; a replica ran os._exit(0) or torch_xla ran fewer replicas.",
            rank=missing[0],
            local_rank=missing[0],
            exitcode=0,
        )
    return [reports[local][1][1] for local in range(nproc)]  # each (rank, ("ok", value))
