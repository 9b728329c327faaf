"""check_picklable: what cannot reach a "spawn" worker, and the advice given."""

from __future__ import annotations

import functools
import sys
import textwrap
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from distbridge.errors import DistributedError, PicklingError
from distbridge.launch.pickling import check_picklable


def top_level(local_rank: int, value: int = 0) -> int:
    return local_rank + value


class _HoldsLock:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def run(self, local_rank: int) -> None:
        pass


def _main_function(source: str, filename: str) -> Callable[..., Any]:
    """Define ``work`` by running ``source`` as if it were the ``__main__`` script."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["work"]  # type: ignore[no-any-return]


def _fake_main(monkeypatch: pytest.MonkeyPatch, file: str | None) -> None:
    main = types.ModuleType("__main__")
    if file is not None:
        main.__file__ = file
    monkeypatch.setitem(sys.modules, "__main__", main)


def test_top_level_function_and_plain_arguments_pass() -> None:
    check_picklable(top_level, (1, "a", [1.0]), {"value": {"nested": (2, 3)}})
    check_picklable(functools.partial(top_level, value=3), (), {})


def test_picklingerror_is_a_typeerror_and_a_distributederror() -> None:
    assert issubclass(PicklingError, TypeError)
    assert issubclass(PicklingError, DistributedError)


def test_lambda_is_rejected_with_advice() -> None:
    with pytest.raises(PicklingError) as excinfo:
        check_picklable(lambda local_rank: local_rank, (), {})
    message = str(excinfo.value)
    assert message.startswith("The function <function test_lambda_is_rejected_with_advice.")
    assert "is a lambda, which cannot be sent to a worker process started with 'spawn'" in message
    assert "Define it with def at the top level of a module instead." in message


def test_lambda_inside_partial_is_rejected() -> None:
    with pytest.raises(PicklingError, match="is a lambda"):
        check_picklable(functools.partial(lambda rank, x: x, x=1), (), {})


def test_nested_function_is_rejected_with_advice() -> None:
    def nested(local_rank: int) -> int:
        return local_rank

    with pytest.raises(PicklingError) as excinfo:
        check_picklable(nested, (), {})
    message = str(excinfo.value)
    assert f"The function {nested!r} is defined inside another function" in message
    assert "(test_nested_function_is_rejected_with_advice.<locals>.nested)" in message
    assert "Define it with def at the top level of a module" in message


def test_main_function_under_if_name_main_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """\
            import sys

            if __name__ == "__main__":
                def work(local_rank):
                    return local_rank
            """
        )
    )
    work = _main_function(script.read_text(), str(script))
    _fake_main(monkeypatch, str(script))

    with pytest.raises(PicklingError) as excinfo:
        check_picklable(work, (), {})
    message = str(excinfo.value)
    assert f"The function {work!r} is defined in __main__ but not at the top level" in message
    assert "re-imports the main module as __mp_main__ and will not find it" in message
    assert "Define it with def at the top level of the script" in message


def test_main_function_at_top_level_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    script.write_text("def work(local_rank):\n    return local_rank\n")
    work = _main_function(script.read_text(), str(script))
    _fake_main(monkeypatch, str(script))
    monkeypatch.setattr(sys.modules["__main__"], "work", work, raising=False)

    check_picklable(work, (1,), {})


def test_method_of_a_main_class_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "class Trainer:\n    def work(self, local_rank):\n        return local_rank\n"
    )
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    _fake_main(monkeypatch, str(script))
    monkeypatch.setattr(sys.modules["__main__"], "Trainer", namespace["Trainer"], raising=False)

    check_picklable(namespace["Trainer"]().work, (), {})


def test_method_of_a_main_class_under_if_name_main_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        'if __name__ == "__main__":\n'
        "    class Trainer:\n"
        "        def work(self, local_rank):\n"
        "            return local_rank\n"
    )
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    _fake_main(monkeypatch, str(script))
    monkeypatch.setattr(sys.modules["__main__"], "Trainer", namespace["Trainer"], raising=False)

    with pytest.raises(PicklingError, match="is defined in __main__ but not at the top level"):
        check_picklable(namespace["Trainer"]().work, (), {})


def test_main_function_without_source_skips_the_indentation_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work = _main_function("def work(local_rank):\n    return local_rank\n", "<no such file>")
    _fake_main(monkeypatch, "/nonexistent/train.py")
    monkeypatch.setattr(sys.modules["__main__"], "work", work, raising=False)

    check_picklable(work, (), {})


def test_interactive_main_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    work = _main_function("def work(local_rank):\n    return local_rank\n", "<stdin>")
    _fake_main(monkeypatch, None)

    with pytest.raises(PicklingError) as excinfo:
        check_picklable(work, (), {})
    message = str(excinfo.value)
    assert "is defined in an interactive session or notebook (__main__ has no file)" in message
    assert "re-imports the main module as __mp_main__ and will not find it" in message
    assert "Move it into a .py module and import it from there." in message


def test_unpicklable_callable_is_rejected() -> None:
    holder = _HoldsLock()
    with pytest.raises(PicklingError) as excinfo:
        check_picklable(holder.run, (), {})
    message = str(excinfo.value)
    assert message.startswith(f"The function {holder.run!r} cannot be sent to a worker process")
    assert "cannot pickle '_thread.lock' object" in message
    assert isinstance(excinfo.value.__cause__, TypeError)


def test_unpicklable_positional_argument_is_named() -> None:
    lock = threading.Lock()
    with pytest.raises(PicklingError) as excinfo:
        check_picklable(top_level, (1, lock), {})
    message = str(excinfo.value)
    assert message.startswith(f"The argument args[1] = {lock!r} cannot be sent")
    assert "TypeError: cannot pickle '_thread.lock' object" in message
    assert "create locks, open files, connections and the like inside the worker" in message
    assert isinstance(excinfo.value.__cause__, TypeError)


def test_unpicklable_keyword_argument_is_named() -> None:
    with pytest.raises(PicklingError) as excinfo:
        check_picklable(top_level, (), {"value": 1, "callback": lambda: None})
    message = str(excinfo.value)
    assert message.startswith("The argument kwargs['callback'] = <function ")
    assert "<lambda>" in message
    assert excinfo.value.__cause__ is not None
