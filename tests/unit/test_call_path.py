"""The path of ``idist.all_reduce`` asks each question once: the first call of a kind of
tensor checks it, resolves its group and asks its placement once; a repeated call asks none
of them (the counter is ``bench/call_path.py``'s)."""

from __future__ import annotations

import importlib.util
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

import distbridge as idist
from tests.ports import free_port

BENCH = Path(__file__).resolve().parents[2] / "bench" / "call_path.py"
QUESTIONS = ("canonical_op", "check_reducible", "resolve", "_placement", "reduction_carrier")


def _call_path() -> ModuleType:
    spec = importlib.util.spec_from_file_location("call_path", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def gloo_world_of_one() -> Iterator[None]:
    idist.initialize("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        idist.finalize()


@pytest.mark.parametrize(
    ("dtype", "op"),
    [(torch.float32, "SUM"), (torch.int64, "MAX"), (torch.bool, "SUM"), (torch.float64, "AVG")],
)
def test_each_question_is_asked_once(gloo_world_of_one: None, dtype: torch.dtype, op: str) -> None:
    calls_of = _call_path().calls_of
    x = torch.ones(5, dtype=dtype)
    first = Counter(name for _, name in calls_of(lambda: idist.all_reduce(x, op)))
    assert {q: first[q] for q in QUESTIONS} == dict.fromkeys(QUESTIONS, 1)
    assert first["_do_all_reduce"] == 1
    again = Counter(name for _, name in calls_of(lambda: idist.all_reduce(x, op)))
    assert {q: again[q] for q in QUESTIONS} == dict.fromkeys(QUESTIONS, 0)
    assert again["_do_all_reduce"] == 1
    assert torch.equal(x, torch.ones(5, dtype=dtype))  # a world of one: the input back
