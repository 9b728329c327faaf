"""The path of ``idist.all_reduce`` is short and asks each question once: the first call of a
kind of tensor checks it and asks its placement once (and its op, group and carrier where
those need more than a look-up), in at most 10 distbridge functions over 5 files; a repeated
call asks none of them and runs at most 6 functions in 3 files (the counter is
``bench/call_path.py``'s)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
import torch

import distbridge as idist

BENCH = Path(__file__).resolve().parents[2] / "bench" / "call_path.py"
QUESTIONS = ("canonical_op", "check_reducible", "resolve", "_placement", "reduction_carrier")


def _call_path() -> ModuleType:
    spec = importlib.util.spec_from_file_location("call_path", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("dtype", "op"),
    [(torch.float32, "SUM"), (torch.int64, "MAX"), (torch.bool, "SUM"), (torch.float64, "AVG")],
)
def test_each_question_is_asked_once(gloo_world_of_one: None, dtype: torch.dtype, op: str) -> None:
    calls_of = _call_path().calls_of
    x = torch.ones(5, dtype=dtype)
    first = Counter(name for _, name in calls_of(lambda: idist.all_reduce(x, op)))
    assert all(first[q] <= 1 for q in QUESTIONS), first
    assert first["check_reducible"] == first["_placement"] == 1, first
    assert first["_do_all_reduce"] == 1
    again = Counter(name for _, name in calls_of(lambda: idist.all_reduce(x, op)))
    assert {q: again[q] for q in QUESTIONS} == dict.fromkeys(QUESTIONS, 0)
    assert again["_do_all_reduce"] == 1
    assert torch.equal(x, torch.ones(5, dtype=dtype))  # a world of one: the input back


#: (distinct functions, files) at most, from the facade to torch.distributed (issue 37)
REPEATED_AT_MOST = (6, 3)
FIRST_AT_MOST = (10, 5)


def test_the_path_stays_short(gloo_world_of_one: None) -> None:
    bench = _call_path()
    x = torch.ones(4)
    first = bench.calls_of(lambda: idist.all_reduce(x))
    repeated = bench.calls_of(lambda: idist.all_reduce(x))
    assert repeated[-1] == ("models/native/model.py", "_do_all_reduce"), repeated
    functions, files = bench.counts(repeated)
    assert functions <= REPEATED_AT_MOST[0] and files <= REPEATED_AT_MOST[1], repeated
    functions, files = bench.counts(first)
    assert functions <= FIRST_AT_MOST[0] and files <= FIRST_AT_MOST[1], first


def test_the_architecture_page_shows_the_path_the_script_prints() -> None:
    bench = _call_path()
    page = (BENCH.parents[1] / "docs" / "architecture.md").read_text()
    printed = subprocess.run(
        [sys.executable, str(BENCH), "-v"], capture_output=True, text=True, timeout=120, check=True
    ).stdout.strip()
    printed = printed[printed.index("first:") :]  # torch 2.9's gloo prints a line of its own
    assert bench.block(printed) in page, (
        "docs/architecture.md's call path is stale: run "
        "`python bench/call_path.py --update docs/architecture.md`"
    )
