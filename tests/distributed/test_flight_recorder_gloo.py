"""torch's flight recorder as the native model reads it (``_engine_trace``), on a warm world of
3 gloo ranks: the entries of the collectives a test just ran, against what it ran."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

import distbridge as idist
from tests.distributed import warm

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

SHAPES = [(3,), (2, 4)]
RETIRE_SECONDS = 5.0
ALL = 2000  # torch's whole record (TORCH_FR_BUFFER_SIZE's default): nothing earlier is cut off


def _runs(local_rank: int, shapes: list[tuple[int, ...]]) -> dict[str, Any]:
    from distbridge import _state

    model = _state.current()
    pair = idist.new_group([0, 1])  # made once per world (groups are cached by ranks)
    before = model._engine_trace(ALL)
    for shape in shapes:
        idist.all_reduce(torch.ones(shape))
        idist.broadcast(torch.ones(shape, dtype=torch.int64), src=0)
    if idist.get_rank() in (0, 1):
        idist.all_reduce(torch.ones(5, dtype=torch.float64), group=pair)
    # torch retires an entry a moment after the call returned (another thread): wait for it
    deadline = time.monotonic() + RETIRE_SECONDS
    while True:
        after = model._engine_trace(ALL)
        if all(e["state"] == "ended" for e in after["entries"]) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return {"before": before, "after": after, "two": model._engine_trace(2)}


PAIR_REDUCE = {"op": "gloo:all_reduce", "what": "Double[5]", "group": [0, 1]}


def pair_reduces(trace: dict[str, Any]) -> int:
    """How many entries of ``trace`` are the pair's all-reduce of `_runs`."""
    return sum({k: e[k] for k in PAIR_REDUCE} == PAIR_REDUCE for e in trace["entries"])


def _what(shape: tuple[int, ...], dtype: str) -> str:
    return f"{dtype}[{', '.join(map(str, shape))}]"


def test_the_engine_trace_holds_the_collectives_just_run() -> None:
    results = warm.call(_runs, world_size=3, args=(SHAPES,))
    for rank, result in enumerate(results):
        assert "entries" in result["before"], result
        world_before = [e for e in result["before"]["entries"] if e["group"] is None]
        first = world_before[-1]["seq"] + 1 if world_before else 1
        expected = []
        for shape in SHAPES:
            expected.append({"op": "gloo:all_reduce", "what": _what(shape, "Float")})
            expected.append({"op": "gloo:broadcast", "what": _what(shape, "Long")})
        world = [e for e in result["after"]["entries"] if e["group"] is None][-len(expected) :]
        assert [e["seq"] for e in world] == list(range(first, first + len(expected))), world
        assert [{"op": e["op"], "what": e["what"]} for e in world] == expected
        assert {e["state"] for e in world} == {"ended"}  # gloo: retired, never "completed"
        # Earlier tests on this warm world may have made other groups of ranks [0, 1] (each
        # torch group is reduced to its members): count this test's all-reduce, not the last.
        if rank in (0, 1):
            assert pair_reduces(result["after"]) == pair_reduces(result["before"]) + 1
        else:  # rank 2 is no member: torch gives it no such group
            assert [e for e in result["after"]["entries"] if e["group"] == [0, 1]] == []
        of = [e for e in result["after"]["entries"] if e["group"] is None]
        assert [e for e in result["two"]["entries"] if e["group"] is None] == of[-2:]  # limit
