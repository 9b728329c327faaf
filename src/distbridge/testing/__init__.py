"""Helpers for testing code that uses distbridge, in your own test suite.

- `run_distributed`: run a function once on fresh ranks (one job per call);
- `WarmWorld` / `WorldPool`: ranks that start once and run many test functions; the pytest
  plugin (the module ``distbridge_pytest``, ``@pytest.mark.distbridge``) runs tests on them;
- `telemetry.record`: what each collective of a block moved, how long it took, from where;
- `faults.inject`: make a rank raise, exit, die, sleep, skip a collective or send a wrong
  shape or dtype at its n-th call of a collective;
- `skip_if_any_rank`: skip a test on every rank when some ranks cannot run it;
- `reset_state`: forget distbridge's state between tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from distbridge import _api, _state
from distbridge._collectives import all_gather
from distbridge._registry import registry
from distbridge.reliability.hang.engine_trace import ranks_text
from distbridge.testing import faults, telemetry
from distbridge.testing.warm_world import RanksFailedError, WarmWorld, WorldPool, WorldRun

__all__ = [
    "RanksFailedError",
    "WarmWorld",
    "WorldPool",
    "WorldRun",
    "faults",
    "reset_state",
    "run_distributed",
    "skip_if_any_rank",
    "telemetry",
]


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


def skip_if_any_rank(condition: bool, reason: str) -> None:
    """Skip the test on every rank (``pytest.skip``) when ``condition`` is true on any rank.

    Every rank must call it (it is a collective: the ranks exchange their conditions), so
    they all skip together and the warm world stays up. The reason says which ranks asked:
    ``"no GPU (ranks 1, 3 of 4)"``. In a world of one rank (or without a distributed
    context) it is ``pytest.skip(reason)`` when ``condition`` is true.
    """
    if not isinstance(condition, bool):
        raise TypeError(
            f"condition must be True or False, got {condition!r}: pass bool(...) of it."
        )
    if not isinstance(reason, str) or not reason:
        raise TypeError(f"reason must be a non-empty str, got {reason!r}: say why it skips.")
    import pytest  # only the tests that call it need pytest

    asked = all_gather(reason if condition else "")
    by_reason: dict[str, list[int]] = {}
    for rank, why in enumerate(asked):
        if why:
            by_reason.setdefault(why, []).append(rank)
    if len(asked) == 1 and condition:  # one rank: nothing to say about ranks
        pytest.skip(reason)
    if by_reason:
        pytest.skip(
            "; ".join(
                f"{why} ({ranks_text(ranks)} of {len(asked)})" for why, ranks in by_reason.items()
            )
        )
