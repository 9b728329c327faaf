"""distbridge's pytest plugin: ``@pytest.mark.distbridge(nproc=4, backend="gloo")`` runs a
test on every rank of a warm world (``distbridge.testing.warm_world``).

Registered through the ``pytest11`` entry point, so it loads in every pytest session where
distbridge is installed; it only registers the marker until a marked test runs. It is a
top-level module, outside the ``distbridge`` package, because importing anything inside the
package imports the facade and torch. This module imports nothing but pytest:
the warm worlds (`distbridge.testing.warm_world`) are imported, and started, by the first
marked test, and stopped when the session ends.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from distbridge.testing.warm_world import WorldPool

__all__ = ["pytest_configure", "pytest_pyfunc_call", "pytest_unconfigure"]

MARKER = "distbridge"
_POOL: pytest.StashKey[WorldPool] = pytest.StashKey()


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
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    if marker.args:
        pytest.fail(
            f"@pytest.mark.{MARKER} takes keyword options only (nproc=, backend=, timeout=, "
            f"debug=), got positional {marker.args!r}.",
            pytrace=False,
        )
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
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    try:
        result = pool.run(pyfuncitem.obj, kwargs, **marker.kwargs)
    except (TypeError, ValueError) as err:  # a bad option or an argument that does not pickle
        pytest.fail(f"@pytest.mark.{MARKER}: {err}", pytrace=False)
    for rank, text in sorted(result.outputs.items()):
        if text:
            pyfuncitem.add_report_section("call", f"output of rank {rank}", text)
    skip = result.skip_reason
    if skip is not None:
        pytest.skip(skip)
    if not result.passed:
        pytest.fail(result.report(), pytrace=False)
    return True


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the session's warm worlds."""
    pool: Any = config.stash.get(_POOL, None)
    if pool is not None:
        pool.close()
        del config.stash[_POOL]
