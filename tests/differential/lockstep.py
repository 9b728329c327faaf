"""Running drawn cases on every rank of a live world in lockstep.

Every rank draws the same cases (hypothesis, derandomized: its seed is a hash of the test
function, so every process draws alike) and checks that it did over a FileStore. To explore
other cases, set ``DISTBRIDGE_DIFFERENTIAL_SEED`` to an integer: every process (workers
inherit it) then draws from that one seed instead, still alike; a failure names the seed. Each case
holds every rank's input, so each rank computes its own expected answer locally. After each
case every rank waits over the store until all finished it: a case that hangs fails the job
with its label instead of desynchronizing the next one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

import distbridge as idist

__all__ = ["SEED_VARIABLE", "digest", "draw_examples", "progress", "run_in_lockstep", "seed_note"]

#: an integer here makes every process draw the cases from it (default: derandomized)
SEED_VARIABLE = "DISTBRIDGE_DIFFERENTIAL_SEED"


def seed_note() -> str:
    """How the cases were drawn, for a failure message."""
    chosen = os.environ.get(SEED_VARIABLE)
    return f"{SEED_VARIABLE}={chosen}" if chosen else "derandomized (no seed set)"


C = TypeVar("C")


def draw_examples(strategy: st.SearchStrategy[C], count: int) -> list[C]:
    """``count`` examples of ``strategy``, the same list in every process that imported the
    same modules (hypothesis is derandomized and nothing else decides what it draws)."""
    drawn: list[C] = []

    chosen = os.environ.get(SEED_VARIABLE)

    @settings(
        max_examples=count,
        derandomize=not chosen,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(example: C) -> None:
        drawn.append(example)

    (seed(int(chosen))(collect) if chosen else collect)()
    return drawn


def digest(cases: list[Any]) -> str:
    """A digest of the reprs of ``cases``: equal when two processes drew the same."""
    return hashlib.sha256("\n".join(map(repr, cases)).encode()).hexdigest()


def run_in_lockstep(
    cases: list[C],
    run_one: Callable[[C], str],
    store_path: str,
    case_timeout: float = 30.0,
    label: Callable[[C], str] = repr,
) -> list[str]:
    """Run ``run_one`` on each case on this rank, in step with every other rank.

    ``run_one`` returns "" when the case's result matched its reference, else a description;
    an exception it raises is recorded the same way (a valid input must not raise).

    Returns:
        This rank's descriptions of the cases that did not match, each with its index.
    """
    rank, world = idist.get_rank(), idist.get_world_size()
    store = dist.FileStore(store_path, world)  # type: ignore[attr-defined]
    store.set(f"digest/{rank}", digest(cases))
    digests = {store.get(f"digest/{r}").decode() for r in range(world)}  # get waits for it
    if len(digests) != 1:
        raise RuntimeError(f"the ranks drew different cases (digests {sorted(digests)})")
    found = []
    trail = Path(f"{store_path}.rank{rank}")
    for i, case in enumerate(cases):
        trail.write_text(f"case {i} of {len(cases)}, {label(case)}")
        try:
            problem = run_one(case)
        except Exception as err:  # a valid input raised: a finding like a wrong answer
            problem = f"raised {type(err).__name__}: {err}"
        if problem:
            found.append(f"case {i} on rank {rank}: {label(case)}: {problem}")
        store.set(f"{i}/{rank}", "done")
        try:
            store.wait(
                [f"{i}/{r}" for r in range(world) if r != rank], timedelta(seconds=case_timeout)
            )
        except Exception as err:  # the store's timeout: some rank is stuck in this case
            mine = f" ({problem})" if problem else ""  # e.g. it raised before a collective
            raise TimeoutError(
                f"case {i}, {label(case)}: rank {rank} finished it{mine} but not every rank"
                f" did within {case_timeout} s: a hang"
            ) from err
    return found


def progress(store_path: str) -> str:
    """The case each rank of a `run_in_lockstep` on ``store_path`` began last, one line a
    rank: for a job that died (an engine's abort) without saying where."""
    trails = sorted(Path(store_path).parent.glob(f"{Path(store_path).name}.rank*"))
    lines = [f"{t.suffix[1:]}: began {t.read_text()}" for t in trails]
    return "Where each rank was: " + ("; ".join(lines) or f"no {store_path}.rank* trail")
