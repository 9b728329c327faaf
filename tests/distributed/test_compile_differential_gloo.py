"""Compiled against eager on the eager differential's generated cases, on 2 and 3 real gloo
ranks: every tensor collective of the facade inside ``torch.compile(fullgraph=True)`` gives
the eager answer (``compile_differential_targets``).

Backends: ``aot_eager`` runs every case; ``inductor`` (which compiles C++) runs three cases
of every function where torch finds a C++ compiler, and the test prints which ran.
``DISTBRIDGE_DIFFERENTIAL_SEED=<int>`` draws other cases (``tests/differential/lockstep.py``).
Tolerance: bit for bit, except a reduced float or complex NaN, which equals any NaN (its
sign and payload are the arithmetic's; -0.0 still differs from 0.0).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from typing import Any

import pytest

from distbridge.testing import run_distributed
from tests.differential import lockstep
from tests.differential import tensor_cases as tc
from tests.distributed import compile_differential_targets as targets

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

PER_FUNC = 12  # cases drawn per function (split between its variants) before leaving out


def _cxx_compiler() -> str | None:
    """The C++ compiler inductor would use (torch's own search), or None."""
    from torch._inductor import cpp_builder

    try:
        found = cpp_builder.get_cpp_compiler()
    except Exception:  # torch's search raises when it finds none
        return None
    return found if shutil.which(found) else None


CXX = _cxx_compiler()
#: cases of each function that also compile with inductor (C++: seconds each), if it can
INDUCTOR_PER_FUNC = 3 if CXX else 0


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"{n}-ranks")
def reports(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    world = request.param
    store = tmp_path_factory.mktemp(f"compile-{world}") / "store"
    start = time.perf_counter()
    # A job of its own, not a warm world: what inductor generates is loaded as modules, which
    # hypothesis reads for constants to draw from (its "local constants"), and ranks that
    # loaded different ones would then draw different cases in every later lockstep test.
    got = run_distributed(
        targets.run_compiled_differential,
        world_size=world,
        args=(str(store), PER_FUNC, INDUCTOR_PER_FUNC),
        timeout=540,
    )
    first = got[0]
    print(
        f"\n{world} ranks: cases {first['cases']} of {first['drawn']} drawn, left out "
        f"{first['left_out']}; C++ compiler {CXX!r}; compiled calls "
        f"{ {k: round(v, 1) for k, v in first['seconds'].items()} } s; "
        f"in {time.perf_counter() - start:.1f} s"
    )
    return got


def test_compiled_gives_the_eager_answer(reports: list[dict[str, Any]]) -> None:
    found = [line for report in reports for line in report["found"]]
    shown = "\n".join(found[:30])
    assert not found, f"{len(found)} differences ({lockstep.seed_note()}):\n{shown}"


def test_every_function_op_and_backend_ran(reports: list[dict[str, Any]]) -> None:
    seen: Counter[str] = Counter()
    for report in reports:
        seen.update(report["tags"])
    wanted = {f"func:{f}" for f in targets.FUNCS}
    wanted |= {f"op:all_reduce:{op}" for op in tc.OPS}
    wanted |= {"variant:gather:same_shape", "variant:scatter:out", "variant:broadcast:plain"}
    wanted |= {f"variant:all_to_all:{v}" for v in ("same_shape", "chunks", "single")}
    wanted |= {"backend:aot_eager", "non-member", "twice", "empty", "0-d"}
    wanted |= {f"layout:{layout}" for layout in tc.LAYOUTS}
    wanted |= {f"group-form:{form}" for form in ("list", "tuple", "new_group")}
    wanted |= {f"backend:inductor:{f}" for f in targets.FUNCS if CXX}
    missing = wanted - set(seen)
    assert not missing, f"no case exercised {sorted(missing)}"
    ran = sorted(reports[0]["cases"])
    print(f"\ncompile backends that ran: {ran} (C++ compiler: {CXX!r})")
    assert ran == (["aot_eager", "inductor"] if CXX else ["aot_eager"])


def test_only_the_stated_cases_were_left_out(reports: list[dict[str, Any]]) -> None:
    report = reports[0]
    assert set(report["left_out"]) <= set(targets.LEFT_OUT)
    kept = report["cases"]["aot_eager"]
    assert kept + sum(report["left_out"].values()) == report["drawn"]
    assert kept >= len(targets.FUNCS) * PER_FUNC // 2
    assert report["graphs"]["aot_eager"] >= kept // 2  # non-members may trace no graph
