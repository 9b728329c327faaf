"""What a worker started with "spawn" or "forkserver" can get from the parent: its function
and arguments, and the main script, which it runs again (as ``__mp_main__``) first. Both are
checked before any process starts.

A function travels by reference (``module.qualified_name``) that the worker imports again,
an argument by value: `check_picklable` turns what would fail in the worker into one message
that says what to change. A function defined in an interactive ``__main__`` (Jupyter,
IPython, ``python -c``) has no module to import: `pack` sends it, its arguments and what they
refer to by value with cloudpickle, and `find_culprit` names what cannot be sent even so.
Code fed on standard input has no file to run again, and a script without an
``if __name__ == "__main__":`` guard calls ``spawn`` again in every worker (only the worker
can tell; the parent's `WorkerFailedError` gives the same advice): `check_main_module`.
"""

from __future__ import annotations

import functools
import inspect
import multiprocessing
import os
import pickle
import reprlib
import sys
from collections.abc import Callable, Iterator, Mapping
from multiprocessing import process
from typing import Any

import cloudpickle

from distbridge.errors import DistributedError, PicklingError

__all__ = [
    "REIMPORT_EXIT_CODE",
    "REIMPORT_PROBLEM",
    "SHORT_REPR",
    "ByValue",
    "check_main_module",
    "check_picklable",
    "find_culprit",
    "main_is_interactive",
    "pack",
    "prepare_call",
]

#: Exit code of a worker that called spawn while importing the main script.
REIMPORT_EXIT_CODE = 86

#: The problem and the fix, said by the worker and by the parent's WorkerFailedError.
REIMPORT_PROBLEM = (
    'the main script has no `if __name__ == "__main__":` guard, so each worker started with '
    "'spawn' or 'forkserver' runs the spawn call again when it imports the script: put the "
    "spawn call (and everything that should run once) under that guard, or pass "
    'start_method="fork" where forking is safe'
)


def _main_kind() -> str:
    """How the main script runs: "module" (``python -m``: workers import it by name),
    "interactive" (no file: a notebook, IPython, ``python -c``), "stdin", "missing" (its
    file is not there) or "file"."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return "module"
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return "interactive"
    if path == "<stdin>":
        return "stdin"
    found = os.path.isfile(os.path.join(getattr(process, "ORIGINAL_DIR", None) or "", path))
    return "file" if found else "missing"


def main_is_interactive() -> bool:
    """Whether ``__main__`` has no file a worker could run again and no module it could
    import (a notebook, an IPython shell, ``python -c``): its functions go by value."""
    return _main_kind() == "interactive"


def check_main_module(start_method: str) -> None:
    """Stop a spawn that would fail in every worker because of how the main script runs:
    `DistributedError` when the script was read from standard input (or its file is gone),
    so workers started with "spawn" or "forkserver" cannot run it again.

    In a worker that is importing the main script (it has no ``__main__`` guard), print why
    to stderr and end the process with exit code `REIMPORT_EXIT_CODE` (not SystemExit: a
    "forkserver" child turns every exception into exit code 1)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        print(f"distbridge: spawn was called while this worker was starting: {REIMPORT_PROBLEM}.",
              file=sys.stderr, flush=True)  # fmt: skip
        os._exit(REIMPORT_EXIT_CODE)
    kind = "file" if start_method == "fork" else _main_kind()
    if kind in ("stdin", "missing"):
        main = (
            "was read from standard input, which"
            if kind == "stdin"
            else f"{sys.modules['__main__'].__file__!r} is not a file, so"
        )
        raise DistributedError(
            f"The main script {main} workers started with start_method={start_method!r} cannot "
            "read again to re-import it: save the code to a file and run `python file.py`, or "
            'pass start_method="fork" where forking is safe (no CUDA and no threads started '
            "before spawn)."
        )


SHORT_REPR = reprlib.Repr()  # repr() shortened for messages
SHORT_REPR.maxother = SHORT_REPR.maxstring = 160

_TOP_LEVEL_ADVICE = "Define it with def at the top level of a module and pass that function."
_MAX_DEPTH = 3  # how deep find_culprit follows functions that use functions
_FIX = (
    "Create locks, open files, connections and the like inside the worker function (pass "
    "what they are made from: a path, an address), or define the function in a .py module "
    "and import it"
)


def _unwrapped(fn: Any) -> Any:
    """``fn`` without the ``functools.partial`` layers around it."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def prepare_call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], start_method: str
) -> tuple[Callable[..., Any], tuple[Any, ...], Mapping[str, Any]]:
    """``fn``, ``args`` and ``kwargs`` as workers started with ``start_method`` can receive
    them, checked before any process starts (see `check_main_module`): a function of an
    interactive ``__main__`` packed by value (`pack`), any other checked (`check_picklable`)."""
    check_main_module(start_method)  # a worker importing an unguarded script
    if start_method != "fork" and main_is_interactive():
        return pack(fn, args, kwargs), (), {}  # a notebook's function
    if start_method != "fork":
        check_picklable(fn, args, kwargs)
    return fn, args, kwargs


def check_picklable(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """`PicklingError` naming the value and what to change if ``fn`` (or a partial of it) or
    an argument cannot be sent to a process started with "spawn": a lambda, a nested
    function, one the child cannot find in ``__main__``, or anything ``pickle`` rejects."""
    _check_function(fn)
    for where, value in _arguments(args, kwargs):
        try:
            pickle.dumps(value)
        except Exception as err:
            raise PicklingError(
                f"The argument {where} = {SHORT_REPR.repr(value)} cannot be sent to a worker "
                f"process started with 'spawn': {type(err).__name__}: {err}. Pass a value that "
                "pickle can serialize (numbers, strings, tensors, containers of these), and "
                "create locks, open files, connections and the like inside the worker function."
            ) from err


def _arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Each argument of a worker call with its place: ``("args[0]", 1)``, ``("kwargs['lr']",
    0.1)``."""
    return [
        *((f"args[{i}]", value) for i, value in enumerate(args)),
        *((f"kwargs[{name!r}]", value) for name, value in kwargs.items()),
    ]


def _check_function(fn: Callable[..., Any]) -> None:
    inner = _unwrapped(fn)
    qualname = getattr(inner, "__qualname__", "")
    if getattr(inner, "__name__", "") == "<lambda>":
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
    """``fn``, ``args`` and ``kwargs`` as one `ByValue` call; `PicklingError` naming what
    cannot be pickled even by value (see `find_culprit`) and what to change."""
    try:
        payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs)))
    except Exception as err:
        where, value, problem = find_culprit(fn, args, kwargs) or ("it", fn, err)
        raise PicklingError(
            f"The function {_name(fn)} cannot be sent to the workers: {where} = "
            f"{SHORT_REPR.repr(value)} cannot be pickled ({type(problem).__name__}: {problem}). "
            f"{_FIX}."
        ) from err
    return ByValue(payload, _name(fn))


def find_culprit(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[str, Any, Exception] | None:
    """The first part of a worker call that cloudpickle rejects: ``(where, value, error)``,
    where ``where`` reads like "the closure variable 'lock' of train"; None if none does."""
    return _culprit([*_arguments(args, kwargs), *_parts_of(fn, _name(fn))], depth=0)


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
    namespace = getattr(fn, "__globals__", {})
    for name in sorted(set(_global_names(code))):
        if name in namespace and not isinstance(namespace[name], type(sys)):
            yield f"the global {name!r} used by {owner}", namespace[name]


def _global_names(code: Any) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            yield from _global_names(const)


def _name(fn: Any) -> str:
    inner = _unwrapped(fn)
    return str(getattr(inner, "__qualname__", None) or SHORT_REPR.repr(inner))
