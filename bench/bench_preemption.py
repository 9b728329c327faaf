"""What StopGuard's agreement costs per training step, at check_every = 1, 10 and 100.

A world of two gloo ranks (``spawn``) trains a small DDP model (an MLP 128-256-128, batch
32): forward, backward (DDP's gradient all-reduce), optimizer step. Blocks of steps without
a guard and with ``should_stop(step)`` after every step alternate; each row is a variant's
median step time over the baseline's (``ratio``) and the share of a step the check adds
(``overhead``). The ``noise`` row is the baseline against a second baseline block: ratios
inside its spread are noise. ``check alone`` times one agreement (one all_reduce of an int).
The issue's target is an overhead of at most 2% at the default check_every (10).

Usage (from the repository root)::

    python bench/bench_preemption.py [--steps N] [--repeats R] [--runs K]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from torch import nn

import distbridge as idist

VARIANTS = ("baseline", "noise", "check_every=1", "check_every=10", "check_every=100")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=7, help="timed blocks per variant")
    parser.add_argument("--runs", type=int, default=3, help="whole runs (fresh worlds)")
    options = parser.parse_args()
    runs = []
    for _ in range(options.runs):
        result = idist.spawn("gloo", _measure, args=(options.steps, options.repeats),
                             nproc_per_node=2)  # fmt: skip
        runs.append(result[0])
    base = [statistics.median(r["baseline"]) for r in runs]
    sizes = f"{options.steps} steps x {options.repeats} blocks each"
    print(f"step of the model, 2 gloo ranks: {min(base):.0f}-{max(base):.0f} µs over "
          f"{options.runs} runs ({sizes})")  # fmt: skip
    print(f"{'variant':18s} {'ratio (range over runs)':>26s} {'overhead per step':>18s}")
    for name in VARIANTS[1:]:
        ratios = [statistics.median(r[name]) / statistics.median(r["baseline"]) for r in runs]
        mid = statistics.median(ratios)
        print(f"{name:18s} {mid:9.4f} ({min(ratios):.4f}-{max(ratios):.4f}) "
              f"{(mid - 1) * 100:+16.2f} %")  # fmt: skip
    check = statistics.median(statistics.median(r["check alone"]) for r in runs)
    print(f"{'check alone':18s} {check:9.1f} µs per agreement; per step at check_every=10: "
          f"{check / 10 / statistics.median(base) * 100:.2f} % of a step")  # fmt: skip


def _measure(local_rank: int, steps: int, repeats: int) -> dict[str, list[float]]:
    """Per-step times (µs) of each variant in alternating blocks, and of one agreement."""
    torch.set_num_threads(1)  # two ranks on a small machine: no oversubscription
    torch.manual_seed(0)
    model = idist.auto_model(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 128), torch.randn(32, 128)
    times: dict[str, list[float]] = {name: [] for name in (*VARIANTS, "check alone")}

    def block(check_every: int | None) -> float:
        with idist.StopGuard(tempfile.gettempdir(), check_every=check_every or 1) as stop:
            idist.barrier()
            start = time.perf_counter()
            for step in range(1, steps + 1):
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if check_every is not None and stop.should_stop(step):
                    raise RuntimeError("nothing asked to stop")
            return (time.perf_counter() - start) / steps * 1e6

    block(None)  # warm-up
    for _ in range(repeats):
        for name in VARIANTS:
            every = None if name in ("baseline", "noise") else int(name.split("=")[1])
            times[name].append(block(every))
        with idist.StopGuard(tempfile.gettempdir(), check_every=1) as stop:
            idist.barrier()
            start = time.perf_counter()
            for step in range(1, steps + 1):
                stop.should_stop(step)
            times["check alone"].append((time.perf_counter() - start) / steps * 1e6)
    return times


if __name__ == "__main__":
    main()
