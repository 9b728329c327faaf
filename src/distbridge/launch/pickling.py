"""Check, before any process starts, that a worker function and its arguments can be sent.

A process started with the "spawn" (or "forkserver") start method receives its function
and arguments by pickling: a function travels as a reference ``module.qualified_name``
that the child imports again, and an argument travels by value. The checks here turn the
confusing errors that would otherwise surface in the child (or as an ``AttributeError``
in the parent) into one message that says what to change.
"""

from __future__ import annotations

import functools
import inspect
import pickle
import reprlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from distbridge.errors import PicklingError

__all__ = ["check_picklable"]

_REPR = reprlib.Repr()  # repr() shortened for messages
_REPR.maxother = _REPR.maxstring = 160

_TOP_LEVEL_ADVICE = "Define it with def at the top level of a module and pass that function."


def check_picklable(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """Raise if ``fn`` or its arguments cannot be sent to a process started with "spawn".

    Args:
        fn: the worker function (a ``functools.partial`` of one is accepted too).
        args: the positional arguments it will be called with.
        kwargs: the keyword arguments it will be called with.

    Raises:
        PicklingError: ``fn`` is a lambda, a nested function, a function the child cannot
            find in ``__main__``, or anything else ``pickle`` rejects; or an argument
            cannot be pickled. The message names the value and what to change.
    """
    _check_function(fn)
    for index, value in enumerate(args):
        _check_value(value, f"args[{index}]")
    for name, value in kwargs.items():
        _check_value(value, f"kwargs[{name!r}]")


def _check_function(fn: Callable[..., Any]) -> None:
    inner = fn
    while isinstance(inner, functools.partial):
        inner = inner.func
    name = getattr(inner, "__name__", "")
    qualname = getattr(inner, "__qualname__", "")
    if name == "<lambda>":
        raise PicklingError(
            f"The function {inner!r} is a lambda, which cannot be sent to a worker process "
            "started with 'spawn'. Define it with def at the top level of a module instead."
        )
    if "<locals>" in qualname:
        raise PicklingError(
            f"The function {inner!r} is defined inside another function ({qualname}), so a "
            f"worker process started with 'spawn' cannot import it. {_TOP_LEVEL_ADVICE}"
        )
    if getattr(inner, "__module__", None) == "__main__":
        _check_main_function(inner)
    try:
        pickle.dumps(fn)
    except Exception as err:
        raise PicklingError(
            f"The function {fn!r} cannot be sent to a worker process started with 'spawn': "
            f"{err}. {_TOP_LEVEL_ADVICE}"
        ) from err


def _check_main_function(fn: Callable[..., Any]) -> None:
    """Reject functions of ``__main__`` that the child's ``__mp_main__`` will not define."""
    reimport = (
        "a worker process started with 'spawn' re-imports the main module as __mp_main__ "
        "and will not find it."
    )
    if not getattr(sys.modules.get("__main__"), "__file__", None):
        raise PicklingError(
            f"The function {fn!r} is defined in an interactive session or notebook (__main__ "
            f"has no file); {reimport} Move it into a .py module and import it from there."
        )
    owner: Any = fn
    if inspect.ismethod(fn):  # a bound method travels as its object, found through its class
        owner = fn.__self__ if inspect.isclass(fn.__self__) else type(fn.__self__)
    if not (inspect.isfunction(owner) or inspect.isclass(owner)) or "." in owner.__qualname__:
        return  # nested in a class: its def is indented anyway; pickle checks the class
    try:
        lines, _ = inspect.getsourcelines(owner)
    except (OSError, TypeError):
        return  # no source to look at: let pickle decide
    if lines and lines[0][:1].isspace():
        raise PicklingError(
            f"The function {fn!r} is defined in __main__ but not at the top level of the file "
            f'(for example under `if __name__ == "__main__":`); {reimport} '
            "Define it with def at the top level of the script, above that block."
        )


def _check_value(value: Any, where: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as err:
        raise PicklingError(
            f"The argument {where} = {_REPR.repr(value)} cannot be sent to a worker process "
            f"started with 'spawn': {type(err).__name__}: {err}. Pass a value that pickle can "
            "serialize (numbers, strings, tensors, containers of these), and create locks, "
            "open files, connections and the like inside the worker function."
        ) from err
