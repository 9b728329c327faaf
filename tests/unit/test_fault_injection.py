"""Fault injection on the serial model: each action fires at exactly the chosen call, on the
chosen ranks, and leaving the block removes it. Exit and Kill end real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge import _state
from distbridge.models.base import COLLECTIVES
from distbridge.testing import faults, telemetry

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("serial_model")


def _shadowed() -> set[str]:
    return {name for name in COLLECTIVES if name in vars(_state.current())}


class BoomError(Exception):
    pass


@settings(max_examples=50, deadline=None)
@given(call=st.integers(1, 8), made=st.integers(0, 10))
def test_raise_fires_at_exactly_the_chosen_call(call: int, made: int) -> None:
    failed = []
    with faults.inject(faults.Raise(BoomError("boom")), op="all_reduce", call=call) as fault:
        for i in range(1, made + 1):
            try:
                idist.all_reduce(torch.ones(2))
            except BoomError:
                failed.append(i)
            idist.all_gather(torch.ones(2))  # another collective does not count
    assert failed == ([call] if call <= made else [])
    assert (fault.fired, fault.calls) == (call <= made, made)
    assert _shadowed() == set()


def test_the_error_says_where_it_was_injected() -> None:
    with faults.inject(faults.Raise(BoomError), op="barrier"), pytest.raises(BoomError) as info:
        idist.barrier()
    assert info.value.__notes__ == [  # type: ignore[attr-defined]
        "(distbridge.testing.faults: Raise(error=<class "
        "'tests.unit.test_fault_injection.BoomError'>) at barrier call 1)"
    ]


@pytest.mark.parametrize("rank", [0, [0], (0,), None])
def test_a_fault_for_this_rank_fires(rank: Any) -> None:
    with (
        faults.inject(faults.Raise(BoomError()), op="broadcast", rank=rank) as fault,
        pytest.raises(BoomError),
    ):
        idist.broadcast(1.5)
    assert fault.active and fault.fired


def test_a_rank_outside_the_world_is_refused() -> None:
    with pytest.raises(ValueError, match=r"rank=1 is not a rank of this world of size 1; "):
        faults.inject(faults.Skip(), op="all_reduce", rank=1).__enter__()
    with pytest.raises(TypeError, match="rank must be an int"):
        faults.inject(faults.Skip(), op="all_reduce", rank="0").__enter__()  # type: ignore[arg-type]


def test_skip_returns_the_argument_without_running_the_call() -> None:
    x = torch.ones(3)
    with telemetry.record() as rec:
        with faults.inject(faults.Skip(), op="all_gather", call=2) as fault:
            first = idist.all_gather(x)
            second = idist.all_gather(x)
            third = idist.all_gather(x)
        with faults.inject(faults.Skip(), op="barrier"):
            assert idist.barrier() is None
    assert first is not x and second is x and third is not x  # the serial all_gather copies
    assert fault.fired
    assert [c.op for c in rec.calls] == ["all_gather", "all_gather"]  # the skipped one never ran


@settings(max_examples=30, deadline=None)
@given(
    dtype=st.sampled_from([torch.float64, torch.float16, torch.int32, torch.int64]),
    shape=st.lists(st.integers(0, 4), max_size=3),
)
def test_wrong_dtype_and_shape_reach_the_collective(dtype: torch.dtype, shape: list[int]) -> None:
    x = torch.ones(2, 3)
    with telemetry.record() as rec:
        with faults.inject(faults.WrongDtype(dtype), op="all_gather"):
            got = idist.all_gather(x)
        with faults.inject(faults.WrongShape(tuple(shape)), op="broadcast"):
            sent = idist.broadcast(x, src=0)
        with faults.inject(faults.WrongShape(), op="all_reduce"):
            flat = idist.all_reduce(x)
    assert got.dtype == dtype and rec.calls[0].dtype == str(dtype).removeprefix("torch.")
    assert list(sent.shape) == shape and sent.dtype == x.dtype
    assert flat.shape == (7,) and rec.calls[2].nbytes == 7 * 4
    assert x.dtype == torch.float32 and x.shape == (2, 3)  # the caller's tensor is untouched


def test_transform_changes_every_tensor_of_a_list() -> None:
    with faults.inject(faults.Transform(lambda t: t * 10), op="all_to_all"):
        got = idist.all_to_all([torch.ones(2)])
    assert torch.equal(got[0], torch.full((2,), 10.0))


def test_a_tensor_action_on_a_call_without_a_tensor_is_a_clear_error() -> None:
    with (
        faults.inject(faults.WrongDtype(torch.int64), op="all_reduce"),
        pytest.raises(TypeError, match=r"WrongDtype changes a tensor argument, but this "),
    ):
        idist.all_reduce(3)


def test_sleep_runs_the_call_afterwards() -> None:
    with faults.inject(faults.Sleep(0.01), op="all_reduce") as fault:
        assert idist.all_reduce(4) == 4
    assert fault.fired


def test_a_fault_for_other_ranks_installs_nothing() -> None:
    with faults.inject(faults.Raise(BoomError()), op="all_reduce", rank=[]) as fault:
        assert _shadowed() == set()
        assert idist.all_reduce(2) == 2
    assert not fault.active and not fault.fired


def test_faults_and_telemetry_stack_and_unwind() -> None:
    with telemetry.record() as rec:
        with faults.inject(faults.Raise(BoomError()), op="all_reduce", call=1):
            assert _shadowed() == set(COLLECTIVES)
            with pytest.raises(BoomError):
                idist.all_reduce(torch.ones(1))
        assert _shadowed() == set(COLLECTIVES)
        idist.all_reduce(torch.ones(1))
    assert _shadowed() == set()
    assert [c.op for c in rec.calls] == ["all_reduce"]  # the raising call is not recorded


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"op": "allreduce"}, ValueError, "Did you mean 'all_reduce'?"),
        ({"op": 3}, TypeError, "op must be the name of a collective"),
        ({"op": "barrier", "call": 0}, ValueError, r"call must be an int >= 1 .* got 0"),
        ({"op": "barrier", "call": True}, ValueError, "call must be an int >= 1"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        faults.inject(faults.Skip(), **kwargs).__enter__()
    assert _shadowed() == set()


def test_bad_actions_are_named() -> None:
    with pytest.raises(TypeError, match="action must be a fault action"):
        faults.inject(RuntimeError("x"), op="barrier").__enter__()  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Raise needs an exception, got 'boom'"):
        faults.Raise("boom")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Exit code must be an int from 0 to 255, got 300"):
        faults.Exit(300)
    with pytest.raises(ValueError, match="Sleep needs a finite number of seconds >= 0"):
        faults.Sleep(-1)
    with pytest.raises(ValueError, match="Kill needs a signal number, got 0"):
        faults.Kill(0)
    with pytest.raises(TypeError, match=r"WrongDtype needs a torch\.dtype, got 'int64'"):
        faults.WrongDtype("int64")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"WrongShape needs a shape of ints >= 0, got \(-1,\)"):
        faults.WrongShape((-1,))


_ENDS = """
import torch, distbridge as idist
from distbridge.testing import faults
with faults.inject(faults.{action}, op="all_reduce", call=2):
    for _ in range(3):
        idist.all_reduce(torch.ones(1))
        print("call done", flush=True)
print("not reached")
"""


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("action", "returncode"), [("Exit(3)", 3), ("Kill()", -signal.SIGKILL)])
def test_exit_and_kill_end_the_process_at_the_call(action: str, returncode: int) -> None:
    script = textwrap.dedent(_ENDS.format(action=action))
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == returncode, proc.stderr[-2000:]
    assert proc.stdout == "call done\n"
