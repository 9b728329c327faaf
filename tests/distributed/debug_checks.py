"""Worker functions for the debug-mode tests: ranks that disagree on purpose.

Each scenario runs in every rank of a 2-rank gloo job started with ``debug=True``;
``run_scenarios`` returns what each rank saw: its `CollectiveMismatch` (text and
attributes), or "no error". The calls that must appear in a report carry a
``# site: <name>`` marker, so the tests find their line numbers here instead of
hard-coding them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.device_mesh import init_device_mesh

import distbridge as idist
from distbridge.errors import CollectiveMismatch

NO_ERROR = "no error"


def _report(err: CollectiveMismatch) -> dict[str, Any]:
    return {
        "type": type(err).__name__,
        "text": str(err),
        "fingerprints": err.fingerprints,
        "call_sites": err.call_sites,
        "missing": list(err.missing_ranks),
    }


def debug_state(local_rank: int) -> bool:
    """Whether this worker's model is in the debug mode."""
    from distbridge import _state

    return bool(_state.current()._debug)


def different_shapes(call: str) -> None:
    """all_reduce / all_gather / broadcast of a tensor of 3 elements on rank 0, 4 on rank 1."""
    collective = getattr(idist, call)
    if idist.get_rank() == 0:
        collective(torch.zeros(3))  # site: shape-0
    else:
        collective(torch.zeros(4))  # site: shape-1


def different_shapes_on_a_mesh() -> None:
    """all_reduce over a one-dimensional DeviceMesh of the world: 3 elements on rank 0, 4 on
    rank 1."""
    mesh = init_device_mesh("cpu", (idist.get_world_size(),))
    if idist.get_rank() == 0:
        idist.all_reduce(torch.zeros(3), group=mesh)  # site: mesh-0
    else:
        idist.all_reduce(torch.zeros(4), group=mesh)  # site: mesh-1


def different_dtypes(call: str) -> None:
    """reduce / reduce_scatter of float32 on rank 0 and float64 on rank 1 (issue 10)."""
    collective = getattr(idist, call)
    if idist.get_rank() == 0:
        collective(torch.ones(2, dtype=torch.float32))  # site: dtype-0
    else:
        collective(torch.ones(2, dtype=torch.float64))  # site: dtype-1


def skipped_collective() -> None:
    """Rank 1 skips the all_reduce and calls the barrier that follows it."""
    if idist.get_rank() == 0:
        idist.all_reduce(torch.ones(2))  # site: skip-0
    idist.barrier()  # site: skip-1


def different_collectives() -> None:
    """Rank 0 all-reduces while rank 1 broadcasts."""
    if idist.get_rank() == 0:
        idist.all_reduce(torch.ones(2))  # site: other-0
    else:
        idist.broadcast(torch.ones(2), src=0)  # site: other-1


def int_and_float() -> None:
    """An int on rank 0 and a float on rank 1: undetected without the debug mode."""
    if idist.get_rank() == 0:
        idist.all_reduce(1)  # site: kind-0
    else:
        idist.all_reduce(1.0)  # site: kind-1


def arrives_late(late_by: float) -> None:
    """Rank 1 calls the all_reduce ``late_by`` seconds late, after rank 0 stopped waiting."""
    if idist.get_rank() == 0:
        idist.all_reduce(torch.ones(2))  # site: late-0
    else:
        time.sleep(late_by)
        idist.all_reduce(torch.ones(2))  # site: late-1


def never_arrives() -> None:
    """Rank 1 never calls the all_reduce: it returns (and its worker leaves the job)."""
    if idist.get_rank() == 0:
        idist.all_reduce(torch.ones(2))  # site: never-0


SCENARIOS: dict[str, Callable[[], None]] = {
    "shape_all_reduce": functools.partial(different_shapes, "all_reduce"),
    "shape_all_gather": functools.partial(different_shapes, "all_gather"),
    "shape_broadcast": functools.partial(different_shapes, "broadcast"),
    "shape_on_a_mesh": different_shapes_on_a_mesh,
    "dtype_reduce": functools.partial(different_dtypes, "reduce"),
    "dtype_reduce_scatter": functools.partial(different_dtypes, "reduce_scatter"),
    "skipped": skipped_collective,
    "all_reduce_vs_broadcast": different_collectives,
    "int_vs_float": int_and_float,
}


def run_scenarios(local_rank: int, names: list[str], late_by: float) -> dict[str, Any]:
    """Run the named scenarios in order, then ``arrives_late`` and ``never_arrives`` (which
    must come last: rank 1 stops there); map each to its report and the seconds it took.

    A mismatch raises on every rank before anything is sent, so the ranks stay in step
    from one scenario to the next; a timed barrier (which the debug mode does not check)
    lines them up before each.
    """
    runs = [(name, SCENARIOS[name]) for name in names]
    runs += [("late", functools.partial(arrives_late, late_by)), ("never", never_arrives)]
    results: dict[str, Any] = {}
    for name, scenario in runs:
        idist.barrier(timeout=120, name=name)
        started = time.monotonic()
        try:
            scenario()
            report: dict[str, Any] | str = NO_ERROR
        except CollectiveMismatch as err:
            report = _report(err)
        results[name] = {"report": report, "seconds": time.monotonic() - started}
    return results


def matching_calls(local_rank: int) -> dict[str, Any]:
    """Matching calls of every collective in the debug mode: same results as without it,
    with legitimately different shapes where a collective allows them."""
    rank, world = idist.get_rank(), idist.get_world_size()
    out: dict[str, Any] = {}
    out["all_reduce"] = idist.all_reduce(torch.full((2,), float(rank + 1))).tolist()
    out["number"] = idist.all_reduce(rank + 1)
    out["all_gather_objects"] = idist.all_gather("x" * (rank + 1))  # lengths differ
    out["gather"] = [t.tolist() for t in idist.gather(torch.arange(rank + 1), dst=0)]
    out["scatter"] = idist.scatter(
        [torch.arange(r + 1) for r in range(world)] if rank == 0 else None, src=0
    ).tolist()
    sent = [torch.full((rank + 1, 2), float(rank)) for _ in range(world)]
    out["all_to_all"] = [t.shape[0] for t in idist.all_to_all(sent)]
    shapes = [[r + 1] for r in range(world)]
    gathered = idist.all_gather_tensors_with_shapes(torch.ones(rank + 1), shapes)
    out["with_shapes"] = [t.numel() for t in gathered]
    out["broadcast"] = idist.broadcast(7 if rank == 0 else None, src=0, safe_mode=True)
    out["object"] = idist.broadcast_object({"rank": rank}, src=0)
    out["sub_group"] = idist.all_reduce(torch.ones(1), group=[0]).item()
    idist.barrier()
    return out
