"""torch.compile(fullgraph=True) around the facade's tensor collectives on 2 and 3 real gloo
ranks: no graph break, and the eager answer bit for bit (``compile_targets``), with aot_eager
and, where a C++ compiler is present, inductor for some cases."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from distbridge.testing import run_distributed
from tests.distributed import compile_targets

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

HAS_CXX = shutil.which("c++") is not None or shutil.which("g++") is not None
CASES = {2: 4, 3: 3}  # cases of each function


@pytest.mark.parametrize("world_size", sorted(CASES))
def test_compiled_collectives_give_the_eager_answer(world_size: int, tmp_path: Path) -> None:
    start = time.perf_counter()
    # A job of its own, not a warm world: inductor's generated modules, loaded on some ranks,
    # would change what hypothesis draws there in later lockstep tests (its local constants).
    reports = run_distributed(
        compile_targets.run_compile_cases,
        world_size=world_size,
        args=(CASES[world_size], str(tmp_path / "store"), HAS_CXX),
        timeout=540,
    )
    found = [line for report in reports for line in report["found"]]
    report = reports[0]
    print(
        f"\n{world_size} ranks: {report['cases']} cases ({report['groups']} on subgroups), "
        f"compilers {report['backends']}, in {time.perf_counter() - start:.1f} s"
    )
    assert not found, f"{report['seed']}\n" + "\n".join(found[:20])
    assert report["funcs"] == sorted(compile_targets.FUNCS)
    assert "aot_eager" in report["backends"]
    if HAS_CXX and world_size == 2:
        assert "inductor" in report["backends"]
