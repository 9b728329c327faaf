"""Small texts a newcomer meets first: one full stop after a value, grammar, suggestions
whatever the case, the way from ``broadcast`` to ``broadcast_object``, check's own usage."""

from __future__ import annotations

import signal
from types import SimpleNamespace
from typing import Any

import pytest

import distbridge as idist
from distbridge.__main__ import main
from distbridge._registry import registry
from distbridge.errors import BackendUnavailableError, suggest
from distbridge.launch._worker_reports import Worker, failure, sentence


def _worker(rank: int, report: Any = None, exitcode: int | None = None) -> Worker:
    process: Any = SimpleNamespace(pid=100 + rank, exitcode=exitcode)
    return Worker(rank, rank, process, conn=None, report=report)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("got [1.0, 2.0].", "got [1.0, 2.0]."), ("late", "late."), ("why?", "why?"), ("", ".")],
)
def test_sentence_ends_with_one_full_stop(text: str, expected: str) -> None:
    assert sentence(text) == expected


def test_a_worker_error_that_ends_with_a_full_stop_gets_no_second_one() -> None:
    message = "broadcast takes a tensor, a number, a str or a Path, got list: [1.0, 2.0]."
    first = _worker(1, ("error", "Traceback\n", "TypeError", message))
    other = _worker(0, ("ok", None))
    text = str(failure([first], [other, first]))
    assert "got list: [1.0, 2.0]. The other workers were stopped." in text
    assert "].." not in text
    late = str(failure([_worker(1, ("error", "tb", "ValueError", "late"))], [other]))
    assert "raised ValueError: late. The other workers were stopped." in late
    killed = str(failure([_worker(1, exitcode=-signal.SIGKILL)], [other]))
    assert "was killed by signal SIGKILL. The other workers were stopped." in killed


@pytest.mark.parametrize(
    ("kwargs", "start"),
    [
        ({"master_port": 29500}, "master_port applies only when Parallel spawns the workers"),
        ({"nnodes": 2, "node_rank": 1}, "nnodes, node_rank apply only when Parallel spawns"),
    ],
)
def test_parallel_spawn_only_arguments_read_as_english(kwargs: dict[str, Any], start: str) -> None:
    with pytest.raises(ValueError, match="^" + start):
        idist.Parallel(backend="gloo", **kwargs)


@pytest.mark.parametrize(("name", "meant"), [("NCCL", "nccl"), ("Gloo", "gloo"), ("GLO", "gloo")])
def test_a_backend_name_in_other_case_gets_a_suggestion(name: str, meant: str) -> None:
    with pytest.raises(BackendUnavailableError, match=rf"Did you mean '{meant}'\?$"):
        registry.for_backend(name)


def test_suggest_ignores_case_and_returns_the_choice_as_spelt() -> None:
    assert suggest("NCCL", ["nccl", "gloo"]) == " Did you mean 'nccl'?"
    assert suggest("sum", ["SUM", "MAX"]) == " Did you mean 'SUM'?"
    assert suggest("zzzz", ["nccl", "gloo"]) == ""


@pytest.mark.parametrize("value", [{"lr": 0.1}, [1.0, 2.0], {1, 2}])
def test_broadcast_of_an_object_points_to_broadcast_object(value: object) -> None:
    with pytest.raises(TypeError) as excinfo:
        idist.broadcast(value, src=0)  # type: ignore[call-overload]
    message = str(excinfo.value)
    assert message.startswith(f"Unhandled input type {type(value).__name__}: broadcast takes")
    assert f"got {value!r}." in message
    assert message.endswith("with broadcast_object(obj, src=...).")


def test_a_bad_check_argument_shows_checks_own_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", "--nproc", "0"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m distbridge check [-h] [--backend BACKEND]")
    assert err.rstrip().endswith(
        "python -m distbridge check: error: --nproc must be at least 1, got 0"
    )
