"""Helpers for testing code that uses distbridge, in your own test suite."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from distbridge import _api, _state
from distbridge._registry import registry

__all__ = ["reset_state", "run_distributed"]


def run_distributed(
    fn: Callable[..., Any],
    *,
    backend: str = "gloo",
    world_size: int = 2,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    timeout: float = 120.0,
    **spawn_kwargs: Any,
) -> list[Any]:
    """Run ``fn(local_rank, *args, **kwargs)`` on ``world_size`` local ranks and return their
    results in rank order; a hang becomes a ``SpawnTimeoutError`` after ``timeout`` seconds.

    ``fn`` must be a top-level function of an importable module (workers import it).
    """
    return _api.spawn(
        backend,
        fn,
        args=args,
        kwargs_dict=kwargs,
        nproc_per_node=world_size,
        job_timeout=timeout,
        **spawn_kwargs,
    )


def reset_state() -> None:
    """Finalize any active context and forget distbridge's state (local-rank hint, plug-ins)."""
    model = _state.current()
    if model.backend() is not None:
        model.finalize()
    _state.reset()
    registry._reset_plugins()
