"""Comms telemetry on the serial model: what each call records, the sums, the bandwidth table,
and that leaving the block leaves the model exactly as it was."""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge import _state
from distbridge.models.base import COLLECTIVES
from distbridge.testing import telemetry

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64]  # fmt: skip
REDUCIBLE = [torch.float32, torch.float64, torch.int32, torch.int64]
SHAPES = st.lists(st.integers(0, 5), max_size=3)


pytestmark = pytest.mark.usefixtures("serial_model")


def _line() -> int:
    """The line number of the caller."""
    return sys._getframe(1).f_lineno


def _shadowed(model: Any) -> set[str]:
    return {name for name in COLLECTIVES if name in vars(model)}


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=SHAPES,
    op=st.sampled_from(["all_gather", "broadcast", "all_reduce"]),
)
def test_a_call_records_its_tensors_bytes_and_dtype(
    dtype: torch.dtype, shape: list[int], op: str
) -> None:
    if op == "all_reduce" and dtype not in REDUCIBLE:
        dtype = torch.float32
    x = torch.zeros(shape, dtype=dtype)
    with telemetry.record() as rec:
        getattr(idist, op)(x)
        line = _line() - 1

    (call,) = rec.calls
    assert call.op == op
    assert call.nbytes == x.numel() * x.element_size()
    assert call.dtype == str(dtype).removeprefix("torch.")
    assert (call.group_size, call.rank) == (1, 0)
    assert call.site == f"{__file__}:{line}"
    assert call.seconds >= 0


CALLS: dict[str, Callable[[torch.Tensor], object]] = {
    "all_reduce": lambda t: idist.all_reduce(t),
    "all_gather": lambda t: idist.all_gather(t),
    "broadcast": lambda t: idist.broadcast(t, src=0),
    "reduce": lambda t: idist.reduce(t, dst=0),
    "gather": lambda t: idist.gather(t, dst=0),
    "reduce_scatter": lambda t: idist.reduce_scatter(t),
    "all_to_all": lambda t: idist.all_to_all(t),
    "barrier": lambda t: idist.barrier(),
}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(CALLS)), st.integers(1, 64)), max_size=12))
def test_counts_and_bytes_are_the_calls_made(calls: list[tuple[str, int]]) -> None:
    with telemetry.record() as rec:
        for op, numel in calls:
            CALLS[op](torch.ones(numel))

    expected_bytes: dict[str, int] = collections.Counter()
    for op, numel in calls:
        expected_bytes[op] += 0 if op == "barrier" else 4 * numel
    counts = collections.Counter(op for op, _ in calls)
    summary = rec.summary()
    assert {row.op: row.calls for row in summary} == dict(counts)
    assert {row.op: row.nbytes for row in summary} == {op: expected_bytes[op] for op in counts}
    assert [c.op for c in rec.calls] == [op for op, _ in calls]
    assert len(summary) == len(counts)


def test_numbers_strings_objects_and_lists() -> None:
    with telemetry.record() as rec:
        idist.reduce(3)  # runs all_reduce inside: recorded once, as reduce
        idist.all_gather("héllo")
        idist.all_gather_object({"a": 1})
        idist.barrier()
        idist.scatter([torch.ones(3, dtype=torch.float64)], src=0)
        idist.all_to_all([torch.ones(5, dtype=torch.int16)])
        idist.all_reduce(torch.ones(2), group=[0])

    got = [(c.op, c.nbytes, c.dtype, c.group_size) for c in rec.calls]
    assert got == [
        ("reduce", 8, "int", 1),
        ("all_gather", len("héllo".encode()), "str", 1),
        ("all_gather_object", 0, "object", 1),
        ("barrier", 0, "", 1),
        ("scatter", 24, "float64", 1),
        ("all_to_all", 10, "int16", 1),
        ("all_reduce", 8, "float32", 1),
    ]


def test_leaving_the_block_leaves_the_model_as_it_was() -> None:
    model = _state.current()
    assert _shadowed(model) == set()
    with telemetry.record() as rec:
        assert _shadowed(model) == set(COLLECTIVES)
        idist.all_reduce(torch.ones(1))
    assert _shadowed(model) == set()
    assert vars(model).keys().isdisjoint({"_distbridge_interposed"})
    idist.all_reduce(torch.ones(1))
    assert len(rec.calls) == 1

    with pytest.raises(KeyError), telemetry.record():
        raise KeyError("the block failed")
    assert _shadowed(model) == set()


def test_an_attribute_set_on_the_model_before_is_kept() -> None:
    model = _state.current()
    seen: list[object] = []

    def patched(x: Any, op: str = "SUM", group: Any = None) -> Any:
        seen.append(x)
        return x

    vars(model)["all_reduce"] = patched
    with telemetry.record() as rec:
        idist.all_reduce(5)
    assert seen == [5] and [c.op for c in rec.calls] == ["all_reduce"]
    assert vars(model)["all_reduce"] is patched
    assert _shadowed(model) == {"all_reduce"}


def test_recordings_nest_and_may_leave_in_any_order() -> None:
    model = _state.current()
    outer_cm, inner_cm = telemetry.record(), telemetry.record()
    outer = outer_cm.__enter__()
    inner = inner_cm.__enter__()
    idist.all_reduce(torch.ones(1))
    outer_cm.__exit__(None, None, None)  # the first one leaves first
    idist.all_gather(torch.ones(1))
    inner_cm.__exit__(None, None, None)
    idist.barrier()

    assert [c.op for c in outer.calls] == ["all_reduce"]
    assert [c.op for c in inner.calls] == ["all_reduce", "all_gather"]
    assert _shadowed(model) == set()


def test_a_call_that_raises_is_not_recorded_and_recording_goes_on() -> None:
    with telemetry.record() as rec:
        with pytest.raises(ValueError, match="bad"):
            idist.all_reduce(torch.ones(2), op="bad")
        idist.all_reduce(torch.ones(2))
    assert [c.op for c in rec.calls] == ["all_reduce"]


def test_keep_calls_false_keeps_only_the_sums_and_on_call_sees_each_call() -> None:
    seen: list[telemetry.CallRecord] = []
    with telemetry.record(keep_calls=False, on_call=seen.append) as rec:
        for _ in range(3):
            idist.all_reduce(torch.ones(4))
    assert rec.calls == []
    assert rec.summary()["all_reduce"].calls == 3
    assert [(c.op, c.nbytes) for c in seen] == [("all_reduce", 16)] * 3
    rec.clear()
    assert len(rec.summary()) == 0


def test_profile_labels_each_call_for_the_torch_profiler() -> None:
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof, telemetry.record(profile=True):
        idist.all_reduce(torch.ones(4))
        idist.broadcast(torch.ones(4), src=0)
    names = {event.name for event in prof.events()}
    assert {"distbridge.all_reduce", "distbridge.broadcast"} <= names


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 1, 0.0),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 4, 0.75),
        ("all_to_all", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("reduce", 3, 1.0),
        ("barrier", 4, None),
        ("gather", 4, None),
        ("all_reduce", 0, None),
    ],
)
def test_bus_factor_is_nccl_tests(op: str, n: int, factor: float | None) -> None:
    assert telemetry.bus_factor(op, n) == factor


def test_summary_bandwidths_and_table() -> None:
    with telemetry.record() as rec:
        idist.all_reduce(torch.ones(256))
        idist.all_gather(torch.ones(128))
        idist.barrier()
    summary = rec.summary()
    reduce_row = summary["all_reduce"]
    assert reduce_row.nbytes == 1024
    assert reduce_row.algbw == pytest.approx(1024 / reduce_row.seconds)
    assert reduce_row.busbw == 0.0  # a world of one moves nothing over a bus
    assert summary["all_gather"].algbw == pytest.approx(512 / summary["all_gather"].seconds)
    assert summary["barrier"].busbw is None
    assert "all_reduce" in summary and "scatter" not in summary
    assert [row.seconds for row in summary] == sorted((r.seconds for r in summary), reverse=True)

    table = str(summary).splitlines()
    assert table[0].split() == ["op", "calls", "bytes", "time", "algbw", "GB/s", "busbw", "GB/s"]
    reduce_line = next(line for line in table if line.startswith("all_reduce"))
    assert reduce_line.split()[1:3] == ["1", "1.0"] and "KiB" in reduce_line
    assert next(line for line in table if line.startswith("barrier")).endswith("-")
    with pytest.raises(KeyError, match="No 'scatter' call was recorded"):
        summary["scatter"]


def test_bad_arguments_are_named() -> None:
    with pytest.raises(TypeError, match="profile and keep_calls must be True or False"):
        telemetry.record(profile="yes").__enter__()  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_call must be a function"):
        telemetry.record(on_call=3).__enter__()  # type: ignore[arg-type]
    assert _shadowed(_state.current()) == set()


def test_watch_ddp_takes_a_ddp_module_only() -> None:
    with telemetry.record() as rec, pytest.raises(TypeError, match="DistributedDataParallel"):
        rec.watch_ddp(torch.nn.Linear(2, 2))
