"""rank_zero_only: the live rank once a context exists; before that the rank of a launcher
distbridge recognizes; otherwise vis4d's rule, the first of RANK, LOCAL_RANK, SLURM_PROCID
and JSM_NAMESPACE_RANK that is set, with a clear error when it is not a rank."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

import distbridge as idist

ORDER = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
LAUNCH_PREFIXES = ("OMPI_", "PMI_", "MPI_LOCAL", "MV2_", "HOROVOD_", "JSM_", "SLURM_", "LSB_")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def _launch(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    """Only ``env`` of every launcher variable, read again as after a restart."""
    for key in list(os.environ):
        if key.startswith(LAUNCH_PREFIXES) or key in TORCHRUN_VARS:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with warnings.catch_warnings():  # a malformed launcher environment warns; not the point
        warnings.simplefilter("ignore", RuntimeWarning)
        idist.sync()


def _expected(env: Mapping[str, str]) -> bool | type[Exception]:
    """The rule, written out: the first variable in ORDER that is set and not empty decides;
    rank 0 runs; a value that is not a whole number of 0 or more is a ValueError."""
    for key in ORDER:
        raw = env.get(key)
        if raw is None or raw == "":
            continue
        try:
            rank = int(raw)
        except ValueError:
            return ValueError
        return ValueError if rank < 0 else rank == 0
    return True


@idist.rank_zero_only
def _record(calls: list[str], value: str) -> str:
    calls.append(value)
    return value


def _outcome() -> bool | type[Exception]:
    calls: list[str] = []
    try:
        result = _record(calls, "ran")
    except ValueError:
        return ValueError
    assert (result, calls) in ((None, []), ("ran", ["ran"])), "ran but returned None, or so"
    return result == "ran"


# ---- the property -----------------------------------------------------------------------------

_VALUES = st.one_of(
    st.integers(0, 9).map(str),
    st.integers(0, 10**6).map(str),
    st.sampled_from(["0", "00", "", " ", " 1", "2 ", "+0", "+1", "1_0", "٣", "-0", "-1", "-7"]),
    st.sampled_from(["abc", "1.5", "0x1", "1e3", "none", "0.0", "NaN"]),
    st.text(max_size=3).filter(lambda t: "\x00" not in t),  # environ cannot hold NUL
)
_ENVIRONMENTS = st.fixed_dictionaries(
    {},
    optional={
        **dict.fromkeys(ORDER, _VALUES),
        # With RANK, a complete torchrun environment: the launcher's rank must agree.
        "WORLD_SIZE": st.one_of(st.integers(0, 4).map(str), st.sampled_from(["", "x"])),
    },
)


@given(_ENVIRONMENTS)
def test_the_rule_before_any_context(env: dict[str, str]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _launch(monkeypatch, env)
        assert _outcome() == _expected(env), env


# ---- examples ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "runs"),
    [
        ({}, True),
        ({"RANK": "1"}, False),  # bare: no WORLD_SIZE, no launcher recognized
        ({"LOCAL_RANK": "2"}, False),
        ({"SLURM_PROCID": "1"}, False),
        ({"JSM_NAMESPACE_RANK": "3"}, False),
        ({"RANK": "0", "LOCAL_RANK": "1"}, True),  # the first one set decides
        ({"LOCAL_RANK": "0", "SLURM_PROCID": "5"}, True),
        ({"RANK": "", "LOCAL_RANK": "1"}, False),  # empty counts as unset
        ({"RANK": "0", "LOCAL_RANK": "abc"}, True),  # the ones after it are not read
        ({"RANK": "1", "WORLD_SIZE": "2"}, False),  # torchrun's complete environment
    ],
)
def test_examples_before_any_context(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], runs: bool
) -> None:
    _launch(monkeypatch, env)
    assert _outcome() is runs


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", " "])
def test_a_deciding_variable_that_is_not_a_rank_is_an_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    _launch(monkeypatch, {"LOCAL_RANK": value, "SLURM_PROCID": "0"})
    with pytest.raises(ValueError, match=f"Environment variable LOCAL_RANK={value!r} is not"):
        _record([], "x")


def test_a_recognized_launcher_decides_over_the_bare_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ompi = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    # mpirun inside an sbatch allocation: SLURM_PROCID is its daemon's index, not the rank.
    _launch(monkeypatch, {**ompi, "OMPI_COMM_WORLD_RANK": "0", "SLURM_PROCID": "1"})
    assert _outcome() is True
    _launch(monkeypatch, {**ompi, "OMPI_COMM_WORLD_RANK": "2", "LOCAL_RANK": "0"})
    assert _outcome() is False


def test_once_a_context_exists_the_live_rank_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    _launch(monkeypatch, {})
    idist.initialize("gloo")  # a world of one: rank 0
    try:
        # Undone before finalize(), which restores the variables initialize() set.
        with pytest.MonkeyPatch.context() as inside:
            inside.setenv("RANK", "1")
            inside.setenv("LOCAL_RANK", "junk")
            assert _outcome() is True
    finally:
        idist.finalize()
    monkeypatch.setenv("RANK", "1")
    assert _outcome() is False  # no context any more: the bare RANK=1 decides again


def test_the_wrapper_keeps_the_function() -> None:
    def greet(name: str, *, punctuation: str = "!") -> str:
        """Say hello."""
        return f"hello {name}{punctuation}"

    wrapped = idist.rank_zero_only(greet)
    assert wrapped("you", punctuation="?") == "hello you?"
    assert wrapped.__name__ == "greet" and wrapped.__doc__ == "Say hello."
    assert wrapped.__wrapped__ is greet  # type: ignore[attr-defined]
