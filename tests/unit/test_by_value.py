"""pickling.pack: a notebook's worker function, its arguments and what they use travel by value;
what cannot travel is named, with the fix, before any worker starts."""

from __future__ import annotations

import functools
import pickle
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distbridge.errors import DistributedError, PicklingError
from distbridge.launch.pickling import find_culprit, main_is_interactive, pack, prepare_call

_NOTEBOOK_CELL = """\
import math

SCALE = 3

def helper(x):
    return math.floor(x * SCALE)

def work(local_rank, values, *, offset=0):
    return [helper(v) + offset + local_rank for v in values]
"""


def _notebook_function(name: str = "work") -> Any:
    """A function defined as a notebook cell defines it: in a module that cannot be imported."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(_NOTEBOOK_CELL, "<ipython-input-1>", "exec"), namespace)
    return namespace[name]


def _fake_main(monkeypatch: pytest.MonkeyPatch, **attributes: Any) -> None:
    main = types.ModuleType("__main__")
    for name, value in attributes.items():
        setattr(main, name, value)
    monkeypatch.setitem(sys.modules, "__main__", main)


_numbers = st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), max_size=8)


@given(values=_numbers, offset=st.integers(-5, 5), local_rank=st.integers(0, 7))
def test_a_packed_call_returns_what_the_direct_call_returns(
    values: list[float], offset: int, local_rank: int
) -> None:
    work = _notebook_function()
    packed = pack(work, (values,), {"offset": offset})

    received = pickle.loads(pickle.dumps(packed))  # as a worker receives it

    assert received(local_rank) == work(local_rank, values, offset=offset)


def test_a_notebook_function_is_sent_with_the_globals_it_uses() -> None:
    work = _notebook_function()
    received = pickle.loads(pickle.dumps(pack(work, ([1.5],), {})))
    work.__globals__["SCALE"] = 100  # a later change in the notebook does not reach a sent job

    assert received(0) == [4]


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({}, True),  # Jupyter, IPython, python -c: no file
        # no such file: every worker would run it again (multiprocessing does, whatever is
        # sent by value), so check_main_module refuses it instead
        ({"__file__": "<ipython-input-3>"}, False),
        ({"__file__": __file__}, False),  # a script: workers run it again
        ({"__file__": "<stdin>"}, False),  # stdin: refused by check_main_module instead
        ({"__spec__": object()}, False),  # python -m module: workers import it
    ],
)
def test_main_is_interactive(
    monkeypatch: pytest.MonkeyPatch, attributes: dict[str, Any], expected: bool
) -> None:
    _fake_main(monkeypatch, **attributes)
    assert main_is_interactive() is expected


def test_a_main_whose_file_is_not_there_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_main(monkeypatch, __file__="<ipython-input-3>")
    with pytest.raises(DistributedError, match="The main script '<ipython-input-3>' is not a file"):
        prepare_call(_notebook_function(), (), {}, "spawn")


def test_a_lambda_closing_over_a_lock_is_named() -> None:
    def make() -> Any:
        lock = threading.Lock()
        return lambda local_rank: lock.locked()

    with pytest.raises(PicklingError) as excinfo:
        pack(make(), (), {})
    message = str(excinfo.value)
    assert message.startswith(
        "The function test_a_lambda_closing_over_a_lock_is_named.<locals>.make.<locals>."
        "<lambda> cannot be sent to the workers: the closure variable 'lock' of "
    )
    assert "_thread.lock" in message and "TypeError: cannot pickle '_thread.lock' object" in message
    assert "Create locks, open files, connections and the like inside the worker function" in (
        message
    )


def test_an_open_file_used_by_a_helper_is_named(tmp_path: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(
        "def log(text):\n    LOG.write(text)\n\ndef work(local_rank):\n    log('hi')\n",
        namespace,
    )
    with (tmp_path / "log.txt").open("w") as log:
        namespace["LOG"] = log
        with pytest.raises(PicklingError) as excinfo:
            pack(namespace["work"], (), {})
    message = str(excinfo.value)
    assert "the global 'LOG' used by the global 'log' used by work = <_io.TextIOWrapper" in message


def test_a_bad_argument_is_named_by_its_place() -> None:
    lock = threading.Lock()
    work = _notebook_function()
    assert find_culprit(work, ([1.0],), {"guard": lock})[:2] == ("kwargs['guard']", lock)  # type: ignore[index]
    with pytest.raises(PicklingError, match=r"cannot be sent to the workers: args\[1\] = "):
        pack(work, ([1.0], lock), {})


def test_a_bound_argument_of_a_partial_is_named() -> None:
    lock = threading.Lock()
    work = functools.partial(_notebook_function(), guard=lock)
    found = find_culprit(work, (), {})
    assert found is not None
    assert found[:2] == ("the bound argument 'guard' of work", lock)
