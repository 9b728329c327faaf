"""distbridge's pytest plugin: ``@pytest.mark.distbridge(nproc=4, backend="gloo")`` runs a
test on every rank of a warm world (``distbridge.testing.warm_world``).

Loaded through the ``pytest11`` entry point wherever distbridge is installed. It is a
top-level module that imports nothing but pytest (importing the package would import torch):
the warm worlds are imported and started by the first marked test, stopped at session end.
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Generator

    from distbridge.testing.warm_world import WorldPool

__all__ = [
    "pytest_configure",
    "pytest_pyfunc_call",
    "pytest_runtest_makereport",
    "pytest_unconfigure",
]

MARKER = "distbridge"
_POOL: pytest.StashKey[WorldPool] = pytest.StashKey()
_SKIP_AT: pytest.StashKey[tuple[str, int] | None] = pytest.StashKey()  # where a rank skipped


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(nproc=2, backend='gloo', timeout=60, debug=False): run the test on every "
        "rank of a warm world (distbridge_pytest, docs/testing.md)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a marked test on every rank of its world; leave other tests to pytest."""
    options = _options(pyfuncitem)
    if options is None:
        return None
    if pyfuncitem.cls is not None:
        pytest.fail(
            f"@pytest.mark.{MARKER} runs module-level test functions; {pyfuncitem.name} is a "
            "method: move it out of its class.",
            pytrace=False,
        )
    pool = pyfuncitem.config.stash.get(_POOL, None)
    if pool is None:
        from distbridge.testing.warm_world import WorldPool

        pool = pyfuncitem.config.stash[_POOL] = WorldPool()
    names = inspect.signature(pyfuncitem.obj).parameters
    kwargs = {name: _for_ranks(pyfuncitem, name) for name in names}
    live = pyfuncitem.config.getoption("capture", None) == "no"  # pytest -s
    try:
        result = pool.run(pyfuncitem.obj, kwargs, on_output=_show if live else None, **options)
    except (TypeError, ValueError) as err:  # a bad option or an argument that does not pickle
        # from None: one message, not the TypeError's as well
        raise pytest.fail.Exception(f"@pytest.mark.{MARKER}: {err}", pytrace=False) from None
    if not live:  # with -s the output was shown as it came
        for rank, text in sorted(result.outputs.items()):
            if text:
                pyfuncitem.add_report_section("call", f"output of rank {rank}", text)
    skip = result.skip_reason
    if skip is not None:
        pyfuncitem.stash[_SKIP_AT] = result.skip_location
        pytest.skip(skip)
    if not result.passed:
        pytest.fail(result.report(), pytrace=False)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Place a skip on the ranks at its line in the test's file, not in this plugin."""
    report = yield
    location = item.stash.get(_SKIP_AT, None)
    if location is not None and report.skipped and isinstance(report.longrepr, tuple):
        report.longrepr = (location[0], location[1], report.longrepr[2])
    return report


def _options(item: pytest.Function) -> dict[str, Any] | None:
    """The marker's options for this test, None when it is not marked. Several markers
    combine, the nearest option winning: a ``pytest.param(..., marks=...)`` marker over the
    function's, the function's over its module's (``pytestmark``)."""
    params = getattr(getattr(item, "callspec", None), "marks", [])
    own = [mark for mark in params if mark.name == MARKER]
    marks = [mark for mark in item.iter_markers(MARKER) if mark not in own]
    options: dict[str, Any] = {}
    for mark in [*reversed(marks), *own]:
        if mark.args:
            pytest.fail(
                f"@pytest.mark.{MARKER} takes keyword options only (nproc=, backend=, "
                f"timeout=, debug=), got positional {mark.args!r}.",
                pytrace=False,
            )
        options.update(mark.kwargs)
    return options if marks or own else None


def _for_ranks(item: pytest.Function, name: str) -> Any:
    """The fixture value ``name`` as the ranks get it (a fresh ``monkeypatch`` each, whose
    changes each rank undoes after the test); refuses what cannot work on a rank."""
    value = item.funcargs[name]
    if isinstance(value, pytest.MonkeyPatch):
        return pytest.MonkeyPatch()
    if isinstance(value, pytest.CaptureFixture):
        pytest.fail(
            f"@pytest.mark.{MARKER}: {item.name} takes {name!r}, which captures this pytest "
            "process's output, not the ranks'. What a rank prints is shown under 'Captured "
            "output of rank N' (and live with -s): to check it in the test, capture it on the "
            "rank with contextlib.redirect_stdout(io.StringIO()).",
            pytrace=False,
        )
    return value


def _show(rank: int, line: str) -> None:
    """Write a rank's line to the terminal as it comes (pytest -s), tagged with the rank."""
    sys.stdout.write(f"[rank {rank}] {line}\n")
    sys.stdout.flush()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the session's warm worlds."""
    pool: Any = config.stash.get(_POOL, None)
    if pool is not None:
        pool.close()
        del config.stash[_POOL]
