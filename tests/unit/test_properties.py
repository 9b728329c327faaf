"""Property-based tests: bad inputs to every facade function, on the serial model.

Each function gets hypothesis-drawn arguments (wrong types, bad ops, out-of-range ranks,
None, empty and NaN tensors, huge sizes, unpicklable objects; see ``tests/property_cases``)
and may only raise the documented exceptions: TypeError, ValueError or the
DistributedError family. ``tests/distributed/test_properties_gloo.py`` runs the same cases
on 2 gloo ranks and checks that they fail there the same way.
"""

from __future__ import annotations

import math
import multiprocessing
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge.errors import DistributedError
from tests import property_cases as pc

pytestmark = pytest.mark.timeout(300)

EXAMPLES = 120  # per function: about 1 s each on a busy 2-core machine

_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_ran: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_count() -> Any:
    yield
    print(f"\nserial property cases run: {sum(_ran.values())} ({len(_ran)} properties)")


def _check(outcome: pc.Outcome) -> None:
    assert outcome.documented, (
        f"{outcome.label} raised {outcome.error}: {outcome.message}; only TypeError, "
        "ValueError and DistributedError are documented"
    )
    if outcome.error:
        assert outcome.message.strip(), f"{outcome.label} raised {outcome.error} with no message"


@pytest.mark.parametrize("func", sorted(pc.CASES))
def test_bad_arguments_raise_documented_errors(func: str) -> None:
    @_SETTINGS
    @given(pc.CASES[func])
    def prop(case: pc.Case) -> None:
        _ran[func] = _ran.get(func, 0) + 1
        _check(pc.run_case(case))
        assert idist.model_name() == "serial"  # no case may leave a context behind

    prop()


def test_every_function_that_takes_data_has_a_strategy() -> None:
    taking_data = {
        *idist._collectives.__all__,
        *(name for name in idist.objects.__all__ if name[0].islower()),
        "one_rank_only",
        "one_rank_first",
        "set_local_rank",
    }
    no_arguments = {"shared_random_seed"}
    assert taking_data - no_arguments == set(pc.CASES)
    assert set(pc.CASES) <= set(idist.__all__)


def test_a_case_fails_the_same_way_twice() -> None:
    """Validation is a pure function of the arguments: running a case again changes nothing."""
    cases = pc.draw_cases(150)
    _ran["repeat"] = len(cases)
    first = [pc.run_case(c) for c in cases]
    second = [pc.run_case(c) for c in cases]
    assert [(o.error, pc.normalize(o.message)) for o in first] == [
        (o.error, pc.normalize(o.message)) for o in second
    ]


# ---- initialize and spawn: serial only (in a live world they would start processes) --------

_BACKENDS = st.sampled_from(["glo", "GLOO", "", "serial", "nccl ", None, 3, b"gloo", ["gloo"]])
_INIT_KWARGS = st.sampled_from(
    [
        {"timeout": -1},
        {"timeout": 0},
        {"timeout": math.nan},
        {"timeout": "5"},
        {"bogus": 1},
        {"debug": 1, "bogus": None},
        {"world_size": 0},
        {"world_size": -1},
        {"rank": -1},
    ]
)


@_SETTINGS
@given(backend=st.one_of(_BACKENDS, st.just("gloo")), kwargs=_INIT_KWARGS)
def test_initialize_refuses_bad_arguments(backend: Any, kwargs: dict[str, Any]) -> None:
    _ran["initialize"] = _ran.get("initialize", 0) + 1
    with pytest.raises(pc.DOCUMENTED):
        idist.initialize(backend, **kwargs)
    assert idist.model_name() == "serial"


@pytest.mark.parametrize("kwargs", [{"rank": "a"}, {"init_method": 3}, {"world_size": 0}])
def test_initialize_refuses_wrong_types_with_a_type_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(pc.DOCUMENTED):
        idist.initialize("gloo", **kwargs)


def _top_level(local_rank: int) -> int:
    return local_rank


_NPROC = st.sampled_from([0, -1, 1.5, "2", True, None, math.nan, 2**63])


@_SETTINGS
@given(
    backend=st.one_of(_BACKENDS, st.just("gloo")),
    fn=st.sampled_from([_top_level, lambda r: r]),
    nproc=st.one_of(_NPROC, st.just(1)),
    extra=st.sampled_from([{}, {"bogus": 1}, {"master_port": -1}, {"job_timeout": 0}]),
)
def test_spawn_refuses_bad_arguments_before_starting_workers(
    backend: Any, fn: Any, nproc: Any, extra: dict[str, Any]
) -> None:
    valid = backend == "gloo" and fn is _top_level and nproc == 1 and not extra
    if valid:  # hypothesis found the one valid combination: make it invalid
        extra = {"bogus": 1}
    _ran["spawn"] = _ran.get("spawn", 0) + 1
    before = set(multiprocessing.active_children())  # the session's warm worlds, if any
    with pytest.raises(pc.DOCUMENTED):
        idist.spawn(backend, fn, nproc_per_node=nproc, **extra)
    assert not set(multiprocessing.active_children()) - before


def test_spawn_refuses_a_non_callable_fn_up_front() -> None:
    before = set(multiprocessing.active_children())  # the session's warm worlds, if any
    with pytest.raises(TypeError, match="needs a callable fn"):
        idist.spawn("gloo", 3, nproc_per_node=1)  # type: ignore[arg-type]
    assert not set(multiprocessing.active_children()) - before


# ---- a few fixed cases the strategies reach only rarely ---------------------------------------


def _bad(value: Any) -> Any:
    """``value``, typed Any: these calls pass wrong types on purpose."""
    return value


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda: idist.new_group(range(2**40)), ValueError, "outside this world"),
        (lambda: idist.all_reduce(1, group=range(-(2**40), 0)), ValueError, "outside"),
        (lambda: idist.all_gather(threading.Lock()), TypeError, "cannot be pickled"),
        (lambda: idist.gather(lambda: 0), TypeError, "cannot be pickled"),
        (lambda: idist.all_gather(2**64), ValueError, "does not fit in 64 bits"),
        (lambda: idist.all_reduce_dict(_bad([1])), TypeError, "Expected a dict"),
        (lambda: idist.reduce_dict(_bad({1: 2})), TypeError, "must be a str"),
        (lambda: idist.all_reduce_dict({"a": 2**70}), ValueError, "64 bits"),
        (lambda: idist.reduce(_bad("x")), TypeError, "reduce takes a tensor"),
        (lambda: idist.gather_results(_bad(None)), TypeError, "items must be a list"),
        (lambda: idist.gather_results([1], total=True), ValueError, "total must be"),
    ],
)
def test_fixed_bad_inputs(call: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        call()


def test_documented_errors_are_the_families_the_docs_name() -> None:
    assert issubclass(idist.BarrierTimeout, DistributedError)
    assert (TypeError, ValueError, DistributedError) == pc.DOCUMENTED
