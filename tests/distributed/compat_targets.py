"""Per-rank bodies for ``test_compat_gloo.py``: ignite's barrier options, and
``distbridge.compat.detectron2`` against the facade's own objects and exact local answers,
on real gloo ranks."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge.compat import detectron2 as comm

__all__ = ["barrier_options", "compare_with_facade", "property_cases"]

#: picklable values of the kinds detectron2 gathers: metrics, names, nested results
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


def compare_with_facade(local_rank: int) -> dict[str, Any]:
    """What comm answers next to the facade's answer to the same question."""
    rank = comm.get_rank()
    comm.create_local_process_group(comm.get_local_size())
    comm.create_local_process_group(comm.get_local_size())  # again: cached, no error
    local = comm.get_local_process_group()
    comm.synchronize()
    return {
        "sizes": (comm.get_world_size(), comm.get_rank(), comm.get_local_rank()),
        "facade_sizes": (idist.get_world_size(), idist.get_rank(), idist.get_local_rank()),
        "local_size": comm.get_local_size(),
        "main": comm.is_main_process(),
        "all_gather": comm.all_gather({"rank": rank}),
        "facade_all_gather": idist.all_gather_object({"rank": rank}),
        "gather": comm.gather(rank * 10, dst=1),
        "reduce": comm.reduce_dict({"b": torch.tensor(2.0 * rank), "a": torch.tensor(1.0)}),
        "seed": comm.shared_random_seed(),
        "local_is_cached": local is comm._LOCAL_PROCESS_GROUP,
        "local_members": idist.all_reduce(1, group=local),
    }


def property_cases(local_rank: int, count: int) -> list[str]:
    """Draw ``count`` values (derandomized: the same on every rank); each rank sends
    ``(rank, value)``. Failures are collected, never raised, so every rank runs every case."""
    rank, world = comm.get_rank(), comm.get_world_size()
    failures: list[str] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(value=VALUES, number=st.integers(-(2**20), 2**20))
    def case(value: Any, number: int) -> None:
        mine = (rank, value)
        expected = [(r, value) for r in range(world)]
        if comm.all_gather(mine) != expected:
            failures.append(f"all_gather {mine!r}")
        got = comm.gather(mine, dst=0)
        if got != (expected if rank == 0 else []):
            failures.append(f"gather {mine!r}: {got!r}")
        reduced = comm.reduce_dict({"n": torch.tensor(float(number + rank), dtype=torch.float64)})
        if rank == 0:
            mean = sum(number + r for r in range(world)) / world
            if reduced["n"].item() != mean:
                failures.append(f"reduce_dict {number}: {reduced['n'].item()} != {mean}")

    case()
    return failures


def barrier_options(local_rank: int) -> list[Any]:
    """ignite >= 0.5.1's barrier calls, torch.distributed's options positionally and by name."""
    out: list[Any] = [idist.barrier(None, False), idist.barrier(group=None, async_op=False)]
    work = idist.barrier(async_op=True)
    out.append((work.wait(), work.is_completed()))
    out.append(idist.barrier([0, 1], False, None))
    out.append(idist.barrier(group=[1], async_op=True).wait())  # rank 0 is not a member
    return out
