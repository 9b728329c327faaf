"""Worker functions for tests/distributed/test_testing_toolkit_gloo.py (workers import them):
comms telemetry and fault injection on real gloo ranks.

The calls that a test looks for carry a ``# site: <name>`` marker, so the test finds their
line numbers here instead of hard-coding them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

import distbridge as idist
from distbridge.errors import CollectiveMismatch
from distbridge.testing import faults, telemetry

FAULTY_RANK = 1
NO_ERROR = "no error"


def _telemetry() -> dict[str, Any]:
    """A few collectives under `telemetry.record`; what this rank recorded."""
    with telemetry.record() as rec:
        idist.all_reduce(torch.ones(10))  # site: first
        idist.all_reduce(torch.ones(5, dtype=torch.float64))
        idist.all_reduce(torch.ones(2), group=[0, 1])  # ranks 0 and 1; others get it back
        idist.all_gather(torch.ones(3, dtype=torch.int32))
        idist.broadcast(torch.zeros(4), src=0)
        idist.reduce_scatter(torch.ones(6 * idist.get_world_size()))
        idist.all_reduce(3)
        idist.barrier()
    summary = rec.summary()
    return {
        "calls": [(c.op, c.group_size, c.nbytes, c.dtype, c.rank) for c in rec.calls],
        "first_site": rec.calls[0].site,
        "rows": {row.op: dataclasses.asdict(row) for row in summary},
        "table": str(summary),
    }


def _mismatch(action: faults.Action) -> dict[str, Any] | str:
    """all_reduce, all_reduce, barrier, with ``action`` at rank 1's 2nd all_reduce; this
    rank's `CollectiveMismatch` (the debug mode is on), or "no error"."""
    t = torch.ones(4)
    block = faults.inject(action, op="all_reduce", call=2, rank=FAULTY_RANK)
    try:
        with block as fault:
            idist.all_reduce(t)
            idist.all_reduce(t)
            idist.barrier()
    except CollectiveMismatch as error:
        return {"text": str(error), "fingerprints": error.fingerprints, "fired": fault.fired}
    return NO_ERROR


def scenarios(local_rank: int) -> dict[str, Any]:
    """Telemetry, then a skipped and a wrong-dtype collective (run with ``debug=True``)."""
    return {
        "rank": idist.get_rank(),
        "telemetry": _telemetry(),
        "skip": _mismatch(faults.Skip()),
        "dtype": _mismatch(faults.WrongDtype(torch.float64)),
        "after": idist.all_reduce(1),  # the job goes on after the mismatches
    }


def fail_at_second_all_reduce(local_rank: int, action: faults.Action) -> None:
    """Three all_reduces; rank 1 does ``action`` at its 2nd."""
    with faults.inject(action, op="all_reduce", call=2, rank=FAULTY_RANK):
        for _ in range(3):
            idist.all_reduce(torch.ones(4))


def ddp_gradients(local_rank: int) -> dict[str, Any]:
    """Two DDP steps with `Recording.watch_ddp`; the recorded bucket all-reduces, the bytes
    of the gradients and the averaged gradient of every rank."""
    torch.manual_seed(0)
    model = idist.auto_model(torch.nn.Linear(8, 3))
    with telemetry.record() as rec:
        rec.watch_ddp(model)
        for _ in range(2):
            model.zero_grad()
            model(torch.full((4, 8), float(idist.get_rank() + 1))).sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return {
        "calls": [(c.op, c.group_size, c.nbytes, c.dtype, c.site) for c in rec.calls],
        "grad_bytes": sum(g.numel() * g.element_size() for g in grads),
        "grads": [g.tolist() for g in grads],
    }
