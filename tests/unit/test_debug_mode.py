"""The debug mode in one process: fingerprints, call sites, the store exchange (ranks as
threads on one in-memory store), the switches, and a world of one."""

from __future__ import annotations

import pickle
import sys
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch._C._distributed_c10d import HashStore, PrefixStore  # where torch defines them

import distbridge as idist
from distbridge import _state
from distbridge.errors import CollectiveMismatch, PeerFailed
from distbridge.reliability import debug, fail_together
from distbridge.reliability.debug import Fingerprint, describe

pytestmark = pytest.mark.timeout(60)


def _print(call: str, site: str = "here.py:1 in f", **args: Any) -> Fingerprint:
    fields, notes = describe(call, args, lambda op: str(op).upper())
    return Fingerprint(call, fields, notes, (0, 1), site)


# ---- fingerprints -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "a", "b"),
    [
        ("all_reduce", {"x": torch.zeros(3), "op": "sum"}, {"x": torch.zeros(4), "op": "SUM"}),
        ("all_reduce", {"x": 1, "op": "SUM"}, {"x": 1.0, "op": "SUM"}),
        ("all_reduce", {"x": True, "op": "MAX"}, {"x": 1, "op": "MAX"}),
        ("all_reduce", {"x": torch.zeros(2), "op": "SUM"}, {"x": torch.zeros(2), "op": "MAX"}),
        ("all_gather", {"x": torch.zeros(2, 3)}, {"x": torch.zeros(3, 3)}),
        ("all_gather", {"x": "text"}, {"x": 5}),
        ("all_gather", {"x": torch.zeros(2)}, {"x": 5}),
        ("broadcast", {"x": torch.zeros(2), "src": 0, "safe_mode": False},
         {"x": torch.zeros(2), "src": 1, "safe_mode": False}),
        ("reduce", {"x": torch.ones(2), "dst": 0, "op": "SUM"},
         {"x": torch.ones(2, dtype=torch.float64), "dst": 0, "op": "SUM"}),
        ("reduce_scatter", {"x": torch.ones(2), "op": "SUM"},
         {"x": torch.ones(2, dtype=torch.int64), "op": "SUM"}),
        ("gather", {"x": torch.zeros(2), "dst": 0}, {"x": torch.zeros(2).byte(), "dst": 0}),
        ("all_gather_tensors_with_shapes", {"x": torch.zeros(1), "shapes": [[1], [2]]},
         {"x": torch.zeros(2), "shapes": [[1], [3]]}),
        ("all_to_all", {"x": [torch.zeros(1)] * 2}, {"x": [torch.zeros(1)] * 3}),
        ("scatter_object", {"x": [1, 2], "src": 0}, {"x": None, "src": 1}),
        # The caller vouched for one shape everywhere: then the shapes must match.
        ("gather", {"x": torch.zeros(2), "dst": 0, "same_shape": True},
         {"x": torch.zeros(3), "dst": 0, "same_shape": True}),
        ("all_to_all", {"x": [torch.zeros(1)] * 2, "same_shape": True},
         {"x": [torch.zeros(2)] * 2, "same_shape": True}),
        ("all_to_all", {"x": torch.zeros(4)}, {"x": torch.zeros(6)}),  # one tensor: one shape
        ("all_to_all", {"x": torch.zeros(4)}, {"x": [torch.zeros(2)] * 2}),
        ("scatter", {"x": None, "src": 0, "out": torch.zeros(2)},
         {"x": [torch.zeros(2)] * 2, "src": 0, "out": torch.zeros(3)}),
    ],
)  # fmt: skip
def test_fingerprints_that_must_differ(call: str, a: dict[str, Any], b: dict[str, Any]) -> None:
    assert not _print(call, **a).agrees_with(_print(call, **b))


@pytest.mark.parametrize(
    ("call", "a", "b"),
    [
        ("all_reduce", {"x": torch.zeros(3), "op": "sum"}, {"x": torch.zeros(3), "op": "SUM"}),
        ("all_gather", {"x": "a"}, {"x": "a much longer string"}),
        ("all_gather", {"x": 1}, {"x": 2.5}),  # numbers gather with their own types
        ("broadcast", {"x": 7, "src": 0, "safe_mode": True},
         {"x": None, "src": 0, "safe_mode": True}),
        ("broadcast", {"x": 7, "src": 0, "safe_mode": False},
         {"x": "placeholder", "src": 0, "safe_mode": False}),
        ("gather", {"x": torch.zeros(2, 5), "dst": 0}, {"x": torch.zeros(3, 1), "dst": 0}),
        ("scatter", {"x": [torch.zeros(1), torch.zeros(2)], "src": 0}, {"x": None, "src": 0}),
        ("all_gather_tensors_with_shapes", {"x": torch.zeros(1), "shapes": [[1], [2]]},
         {"x": torch.zeros(2), "shapes": ((1,), (2,))}),
        ("all_to_all", {"x": [torch.zeros(1), torch.zeros(5)]},
         {"x": [torch.zeros(2, 1), torch.zeros(3)]}),
        ("all_gather_object", {}, {}),
        ("gather", {"x": torch.zeros(2), "dst": 0, "same_shape": True},
         {"x": torch.ones(2), "dst": 0, "same_shape": True}),
        ("scatter", {"x": None, "src": 0, "out": torch.zeros(2)},
         {"x": [torch.ones(2)] * 2, "src": 0, "out": torch.ones(2)}),
    ],
)  # fmt: skip
def test_fingerprints_that_may_differ(call: str, a: dict[str, Any], b: dict[str, Any]) -> None:
    assert _print(call, **a).agrees_with(_print(call, **b))


def test_fingerprint_round_trips_through_json_text() -> None:
    mine = _print("gather", x=torch.zeros(2, 3, dtype=torch.bfloat16), dst=1)
    assert Fingerprint.from_json(mine.to_json()) == mine
    assert mine.text() == "gather(type=tensor, dtype=bfloat16, dst=1, shape=[2, 3])"


def test_describe_never_raises_on_bad_arguments() -> None:
    fields, _ = describe("all_reduce", {"x": object(), "op": 3}, repr)
    assert ("type", "object") in fields
    assert describe("all_gather_tensors_with_shapes", {"x": None, "shapes": 5}, repr)
    assert describe("all_to_all", {"x": "not a list"}, repr)


_T = torch.ones(2)
#: each collective's call, and the arguments the checker must compare (as the collectives
#: named them before the wrapper did it for them)
_COMPARED: list[tuple[str, tuple[Any, ...], dict[str, Any], dict[str, Any]]] = [
    ("all_reduce", (_T,), {"op": "MAX"}, {"x": _T, "op": "MAX"}),
    ("all_gather", (_T,), {}, {"x": _T}),
    ("broadcast", (_T, 0), {"safe_mode": True}, {"x": _T, "src": 0, "safe_mode": True}),
    ("all_gather_tensors_with_shapes", (_T, [[2]]), {}, {"x": _T, "shapes": [[2]]}),
    ("reduce", (_T,), {"dst": 0}, {"x": _T, "dst": 0, "op": "SUM"}),
    ("gather", (_T,), {"same_shape": True}, {"x": _T, "dst": 0, "same_shape": True}),
    ("scatter", ([_T],), {"out": torch.zeros(2)}, {"x": [_T], "src": 0, "out": torch.zeros(2)}),
    ("reduce_scatter", (_T, "SUM"), {}, {"x": _T, "op": "SUM"}),
    ("all_to_all", ([_T],), {}, {"x": [_T], "same_shape": False}),
    ("all_gather_object", ({"a": 1},), {}, {}),
    ("gather_object", ("o",), {"dst": 0}, {"dst": 0}),
    ("broadcast_object", ("o", 0), {}, {"src": 0}),
    ("scatter_object", (["o"],), {}, {"x": ["o"], "src": 0}),
]


@pytest.mark.parametrize(("call", "args", "kwargs", "compared"), _COMPARED)
def test_the_wrapper_compares_every_collective_once(
    monkeypatch: pytest.MonkeyPatch,
    call: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    compared: dict[str, Any],
) -> None:
    seen: list[tuple[str, Any, dict[str, Any]]] = []

    class Recorder:
        def check(self, model: Any, op: str, group: Any, named: dict[str, Any]) -> None:
            seen.append((op, group, named))

    model = _state.current()  # the serial model
    monkeypatch.setattr(model, "_debug", True)
    monkeypatch.setattr(model, "_debug_checker", Recorder())
    getattr(model, call)(*args, **kwargs)
    model.all_reduce(3, group=[0])  # a group given by keyword reaches the checker as given
    assert [(op, group) for op, group, _ in seen] == [(call, None), ("all_reduce", [0])]
    got = describe(call, seen[0][2], repr)
    assert got == describe(call, compared, repr)
    monkeypatch.setattr(model, "_debug", False)
    getattr(model, call)(*args, **kwargs)
    assert len(seen) == 2


def test_barrier_compares_untimed_calls_only(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any, dict[str, Any]]] = []

    class Recorder:
        def check(self, model: Any, op: str, group: Any, named: dict[str, Any]) -> None:
            seen.append((op, group, named))

    model = _state.current()
    monkeypatch.setattr(model, "_debug", True)
    monkeypatch.setattr(model, "_debug_checker", Recorder())
    model.barrier()
    model.barrier(timeout=5)
    model.barrier([0])
    assert seen == [("barrier", None, {}), ("barrier", [0], {})]


def test_a_call_that_does_not_bind_fails_as_the_method_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _state.current()
    monkeypatch.setattr(model, "_debug", True)
    with pytest.raises(TypeError, match="opp"):
        model.all_reduce(1, opp="SUM")


def test_call_site_is_the_users_line(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Fingerprint, str]] = []

    def exchange(store: Any, prefix: str, rank: int, mine: Fingerprint, *rest: Any) -> None:
        seen.append((mine, rest[-1]))

    monkeypatch.setattr(debug, "_exchange", exchange)
    idist.initialize("gloo", debug=True)  # a world of one, made to look like two
    try:
        model = _state.current()
        monkeypatch.setattr(model, "_coordination_store", HashStore)
        monkeypatch.setattr(model, "get_world_size", lambda: 2)
        line = sys._getframe().f_lineno + 1
        idist.all_reduce(torch.ones(1))
        with idist.one_rank_first():  # a timed barrier: it checks arrivals itself
            idist.barrier()
        idist.all_reduce(torch.ones(1), group=[0])  # a one-rank group: nothing to compare
        idist.barrier(timeout=5)
    finally:
        idist.finalize()
    here = "tests/unit/test_debug_mode.py"
    name = "test_call_site_is_the_users_line"
    assert [(p.call, p.site, where) for p, where in seen] == [
        ("all_reduce", f"{here}:{line} in {name}", "collective #1 of the world"),
        ("barrier", f"{here}:{line + 2} in {name}", "collective #2 of the world"),
    ]


# ---- the exchange: two ranks as threads on one store -----------------------------------------


def _both(
    store: Any, make: Callable[[int], Fingerprint], timeout: float = 5.0, delay: float = 0.0
) -> dict[int, BaseException | None]:
    """Run ``_exchange`` for ranks 0 and 1 at once (rank 1 ``delay`` seconds late)."""
    outcome: dict[int, BaseException | None] = {}

    def rank(r: int) -> None:
        if r == 1:
            time.sleep(delay)
        try:
            debug._exchange(store, "debug/world/0/", r, make(r), timeout, "collective #1")
            outcome[r] = None
        except BaseException as err:
            outcome[r] = err

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return outcome


def test_matching_calls_pass_and_leave_no_keys() -> None:
    store = HashStore()
    store.set("other", "x")
    for seq in range(20):
        prefix = f"debug/world/{seq}/"
        errors: list[BaseException] = []

        def rank(r: int, prefix: str = prefix, errors: list[BaseException] = errors) -> None:
            try:
                debug._exchange(store, prefix, r, _print("barrier"), 5.0, "here")
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
    assert store.num_keys() == 1, "the last member to compare must delete the sequence's keys"


def test_mismatch_raises_on_both_ranks_with_a_table() -> None:
    outcome = _both(
        HashStore(),
        lambda r: _print(
            "all_reduce", f"train.py:{10 + r} in step", x=torch.zeros(3 + r), op="SUM"
        ),
    )
    for err in outcome.values():
        assert isinstance(err, CollectiveMismatch)
        text = str(err)
        assert "disagree at collective #1: they differ in shape" in text
        assert "all_reduce(type=tensor, dtype=float32, shape=[3], op=SUM)  train.py:10 in step" in (
            text
        )
        assert "shape=[4], op=SUM)  train.py:11 in step" in text
        assert err.call_sites == {0: "train.py:10 in step", 1: "train.py:11 in step"}
        assert err.missing_ranks == ()


def test_a_rank_that_never_arrives_is_named() -> None:
    store = PrefixStore("distbridge", HashStore())
    started = time.monotonic()
    with pytest.raises(CollectiveMismatch) as info:
        debug._exchange(store, "debug/world/0/", 0, _print("barrier"), 0.5, "collective #1")
    assert time.monotonic() - started < 5
    assert info.value.missing_ranks == (1,)
    assert "rank 1 did not reach collective #1 within 0.5 s (DISTBRIDGE_DEBUG_TIMEOUT)" in str(
        info.value
    )
    assert "(did not arrive)" in str(info.value)


def test_a_late_rank_fails_too_instead_of_entering_the_collective() -> None:
    outcome = _both(HashStore(), lambda r: _print("barrier", f"t.py:{r} in f"), 0.3, delay=1.0)
    late = outcome[1]
    assert isinstance(outcome[0], CollectiveMismatch) and isinstance(late, CollectiveMismatch)
    assert late.missing_ranks == (1,) == outcome[0].missing_ranks
    assert "rank 0 stopped waiting" in str(late) and "t.py:1 in f" in str(late)


# ---- switches and a world of one ---------------------------------------------------------------


@pytest.mark.parametrize(("raw", "on"), [("1", True), ("true", True), ("0", False), ("", False)])
def test_environment_variable(monkeypatch: pytest.MonkeyPatch, raw: str, on: bool) -> None:
    monkeypatch.setenv(debug.ENV_VAR, raw)
    assert debug.enabled_by_env() is on
    _state.reset()
    assert _state.current()._debug is on  # read whenever a model is created


def test_unrecognized_environment_value_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(debug.ENV_VAR, "maybe")
    with pytest.warns(UserWarning, match="DISTBRIDGE_DEBUG='maybe' is neither 1 nor 0"):
        assert not debug.enabled_by_env()


def test_bad_timeout_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(debug.TIMEOUT_ENV_VAR, "soon")
    model = SimpleNamespace(
        _coordination_store=HashStore, get_world_size=lambda: 2, get_rank=lambda: 0
    )  # read at the first check with peers
    with pytest.raises(ValueError, match="DISTBRIDGE_DEBUG_TIMEOUT='soon' must be a positive"):
        debug.CollectiveChecker().check(model, "barrier", None, {})  # type: ignore[arg-type]


def test_debug_env_sets_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(debug.ENV_VAR, raising=False)
    with debug.debug_env(True):
        assert debug.enabled_by_env()
    assert not debug.enabled_by_env()
    with pytest.raises(TypeError, match="debug must be True or False, got 'yes'"):
        debug.debug_flag("yes")


def test_initialize_debug_in_a_world_of_one() -> None:
    idist.initialize("gloo", debug=True)
    try:
        assert _state.current()._debug
        assert idist.all_reduce(3.5) == 3.5  # no peers: nothing to compare
        assert idist.all_gather(torch.ones(2)).tolist() == [1.0, 1.0]
        idist.barrier()
    finally:
        idist.finalize()


def test_initialize_rejects_a_bad_debug_flag() -> None:
    with pytest.raises(TypeError, match="debug must be True or False, got 1"):
        idist.initialize("gloo", debug=1)
    assert idist.model_name() == "serial"


def test_spawn_rejects_a_bad_debug_flag() -> None:
    with pytest.raises(TypeError, match="debug must be True or False, got 'on'"):
        idist.spawn("gloo", print, nproc_per_node=1, debug="on")


def test_collective_mismatch_survives_pickling() -> None:
    err = CollectiveMismatch(
        "text", fingerprints={0: "barrier()"}, call_sites={0: "a.py:1 in f"}, missing_ranks=(1,)
    )
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, CollectiveMismatch) and str(back) == "text"
    assert (back.fingerprints, back.call_sites, back.missing_ranks) == (
        {0: "barrier()"},
        {0: "a.py:1 in f"},
        (1,),
    )


@pytest.mark.timeout(20)  # the debug timeout below is 60 s: waiting it out fails the test
def test_a_failure_note_ends_the_wait_with_peer_failed() -> None:
    store = PrefixStore("distbridge", HashStore())
    fail_together.record_failure(store, 1, "ValueError: bad batch")
    with pytest.raises(PeerFailed) as info:
        debug._exchange(store, "debug/world/0/", 0, _print("barrier"), 60.0, "collective #1")
    assert info.value.rank == 1 and info.value.summary == "ValueError: bad batch"
    assert "Rank 0 stopped in barrier (debug mode: collective #1) because of it" in str(info.value)


def test_a_failure_note_left_after_everyone_arrived_changes_nothing() -> None:
    store = HashStore()
    fail_together.record_failure(store, 1, "ValueError: bad batch")
    outcome = _both(store, lambda r: _print("barrier"), 5.0)
    assert outcome == {0: None, 1: None}
