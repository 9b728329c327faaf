"""`call`: ``run_distributed`` on warm worlds, for this suite's multi-process tests that fit.

A warm world (`distbridge.testing.WarmWorld`) starts its ranks once per (world size,
backend, debug) and serves every test of the session, where ``run_distributed`` starts a
fresh job per call (seconds on two cores). `call` runs ``fn(local_rank, *args, **kwargs)``
on every rank like ``run_distributed`` and returns the results in rank order, so a test
moves by changing the call alone and keeps its assertions. Only tests whose functions leave
the world as they found it fit: the ones that check how processes start, fail, die or are
supervised keep their own jobs. ``tests/conftest.py`` closes the worlds at the session end.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import distbridge as idist
from distbridge.testing import WorldPool

__all__ = ["call", "close"]

_pool: WorldPool | None = None


def call(
    fn: Callable[..., Any],
    *,
    world_size: int = 2,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    timeout: float = 120.0,
    debug: bool = False,
) -> list[Any]:
    """``fn(local_rank, *args, **kwargs)`` on every rank of the warm gloo world of
    ``world_size``; the results in rank order. A rank that raises fails the call with every
    rank's traceback (`distbridge.testing.RanksFailedError`), and the world is replaced."""
    global _pool
    if _pool is None:
        _pool = WorldPool()
    with tempfile.TemporaryDirectory(prefix="distbridge-warm-") as folder:
        run = _pool.run(
            _call_and_keep,
            {"fn": fn, "args": args, "kwargs": dict(kwargs or {}), "folder": folder},
            nproc=world_size,
            timeout=timeout,
            debug=debug,
        )
        run.check()
        return [pickle.loads(Path(folder, f"{r}.pickle").read_bytes()) for r in range(world_size)]


def close() -> None:
    """Stop every warm world of the session."""
    global _pool
    if _pool is not None:
        _pool.close()
        _pool = None


def _call_and_keep(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], folder: str
) -> None:
    """What every rank runs: the function, its result kept in ``folder`` for the parent."""
    result = fn(idist.get_local_rank(), *args, **kwargs)
    Path(folder, f"{idist.get_rank()}.pickle").write_bytes(pickle.dumps(result))
