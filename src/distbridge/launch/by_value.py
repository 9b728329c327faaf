"""Send a worker function defined in a notebook (or ``python -c``) to the workers, by value.

A worker started with "spawn" or "forkserver" receives its function by pickling, which
sends a function as a reference (``module.name``) that the worker imports again. A function
defined in an interactive ``__main__`` (Jupyter, IPython, ``python -c``) has no module a
worker can import, so `pack` sends it, its arguments and what they refer to by value with
cloudpickle, as ignite users get with "fork", but without forking the caller.

What cannot be sent by value either (a lock, an open file, a socket) raises `PicklingError`
before any worker starts, naming the object and the fix (see `find_culprit`).
"""

from __future__ import annotations

import functools
import os
import reprlib
import sys
from collections.abc import Callable, Iterator, Mapping
from multiprocessing import process
from typing import Any

import cloudpickle

from distbridge.errors import PicklingError

__all__ = ["ByValue", "find_culprit", "main_is_interactive", "pack"]

_REPR = reprlib.Repr()  # repr() shortened for messages
_REPR.maxother = _REPR.maxstring = 160

_MAX_DEPTH = 3  # how deep find_culprit follows functions that use functions

_FIX = (
    "Create locks, open files, connections and the like inside the worker function (pass "
    "what they are made from: a path, an address), or define the function in a .py module "
    "and import it"
)


def main_is_interactive() -> bool:
    """Whether ``__main__`` is a notebook, an IPython shell or ``python -c`` code: no file a
    worker could run again and no module it could import."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return False
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return True
    if path == "<stdin>":
        return False  # check_main_module refuses it for every start method but "fork"
    return not os.path.isfile(os.path.join(getattr(process, "ORIGINAL_DIR", None) or "", path))


class ByValue:
    """``fn(local_rank, *args, **kwargs)`` with all three sent by value (cloudpickle)."""

    def __init__(self, payload: bytes, name: str) -> None:
        self.payload, self.name = payload, name

    def __repr__(self) -> str:
        return f"<{self.name} sent by value>"

    def __call__(self, local_rank: int) -> Any:
        fn, args, kwargs = cloudpickle.loads(self.payload)
        return fn(local_rank, *args, **kwargs)


def pack(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> ByValue:
    """``fn``, ``args`` and ``kwargs`` as one `ByValue` call.

    Raises:
        PicklingError: something they refer to cannot be pickled even by value; the message
            names it (see `find_culprit`) and says what to change.
    """
    try:
        payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs)))
    except Exception as err:
        where, value, problem = find_culprit(fn, args, kwargs) or ("it", fn, err)
        raise PicklingError(
            f"The function {_name(fn)} cannot be sent to the workers: {where} = "
            f"{_REPR.repr(value)} cannot be pickled ({type(problem).__name__}: {problem}). "
            f"{_FIX}."
        ) from err
    return ByValue(payload, _name(fn))


def find_culprit(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[str, Any, Exception] | None:
    """The first part of a worker call that cloudpickle rejects: ``(where, value, error)``,
    where ``where`` reads like "the closure variable 'lock' of train"; None if none does."""
    parts = [
        *((f"args[{i}]", value) for i, value in enumerate(args)),
        *((f"kwargs[{name!r}]", value) for name, value in kwargs.items()),
        *_parts_of(fn, _name(fn)),
    ]
    return _culprit(parts, depth=0)


def _culprit(parts: list[tuple[str, Any]], depth: int) -> tuple[str, Any, Exception] | None:
    for where, value in parts:
        try:
            cloudpickle.dumps(value)
        except Exception as err:
            if depth < _MAX_DEPTH and callable(value) and not isinstance(value, type):
                deeper = _culprit(list(_parts_of(value, where)), depth + 1)
                if deeper is not None:  # a function's closure or global, not the function
                    return deeper
            return where, value, err
    return None


def _parts_of(fn: Any, owner: str) -> Iterator[tuple[str, Any]]:
    """What pickling ``fn`` by value pickles: bound arguments, defaults, closure variables
    and the globals its code names."""
    if isinstance(fn, functools.partial):
        for i, value in enumerate(fn.args):
            yield f"the bound argument {i} of {owner}", value
        for name, value in fn.keywords.items():
            yield f"the bound argument {name!r} of {owner}", value
        yield from _parts_of(fn.func, owner)
        return
    self = getattr(fn, "__self__", None)
    if self is not None and not isinstance(self, type(sys)):
        yield f"the object {owner} is bound to", self
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    for value in fn.__defaults__ or ():
        yield f"a default argument of {owner}", value
    for name, value in (fn.__kwdefaults__ or {}).items():
        yield f"the default of {name!r} of {owner}", value
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            yield f"the closure variable {name!r} of {owner}", cell.cell_contents
        except ValueError:  # an empty cell
            continue
    names = set(_global_names(code))
    namespace = getattr(fn, "__globals__", {})
    for name in sorted(names):
        if name in namespace and not isinstance(namespace[name], type(sys)):
            yield f"the global {name!r} used by {owner}", namespace[name]


def _global_names(code: Any) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            yield from _global_names(const)


def _name(fn: Any) -> str:
    inner = fn
    while isinstance(inner, functools.partial):
        inner = inner.func
    return str(getattr(inner, "__qualname__", None) or _REPR.repr(inner))
