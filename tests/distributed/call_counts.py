"""Count the calls a module's functions get while a block runs: proof that distbridge used
a backend's own op (``hvd.alltoall``, ``xm.reduce_scatter``) rather than an emulation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["counting"]


@contextmanager
def counting(module: Any, *names: str) -> Iterator[dict[str, int]]:
    """Within the block, ``module.<name>`` still works and is counted; the dict it yields maps
    each name to its calls so far. The real functions are put back afterwards."""
    calls = dict.fromkeys(names, 0)
    real = {name: getattr(module, name) for name in names}

    def counted(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real[name](*args, **kwargs)

        return call

    for name in names:
        setattr(module, name, counted(name))
    try:
        yield calls
    finally:
        for name, function in real.items():
            setattr(module, name, function)
