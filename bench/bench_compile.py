"""A compiled step with a facade all_reduce inside against the same step with torch's
functional all_reduce, on 2 gloo ranks: the ratio of their times in one run.

Each side is ``torch.compile(step, fullgraph=True)`` of: a matmul and tanh on a batch, a
(width x width) product standing in for a gradient, its all-reduce over the world (SUM, then
divided by the world size), and a scale. The sides alternate block by block after a
barrier; each block's time is the slowest rank's. The noise row times two separately
compiled copies of the raw step against each other. It also prints the operators of the
graph Dynamo traced for each side: where they are the same, so is the compiled code.

Usage (from the repository root)::

    python bench/bench_compile.py [--runs 5] [--iters 200] [--width 256] [--backend aot_eager]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import distbridge as idist


def _steps(world: int) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    def facade(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ w)
        grad = h.T @ h
        return idist.all_reduce(grad, "SUM") / world * 0.5

    def raw(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ w)
        grad = h.T @ h
        return funcol.all_reduce(grad, "sum", dist.group.WORLD) / world * 0.5

    def raw_again(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ w)
        grad = h.T @ h
        return funcol.all_reduce(grad, "sum", dist.group.WORLD) / world * 0.5

    return {"facade": facade, "raw": raw, "raw_again": raw_again}


def _block(fn: Callable[..., torch.Tensor], x: torch.Tensor, w: torch.Tensor, iters: int) -> float:
    """Seconds for ``iters`` calls on the slowest rank."""
    idist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        out = fn(x, w)
    float(out[0, 0])  # the last result is ready
    took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    return float(idist.all_reduce(took, "MAX").item())


def _graph_ops(fn: Callable[..., torch.Tensor], x: torch.Tensor, w: torch.Tensor) -> list[str]:
    """The operators of the graph Dynamo traces for ``fn`` (in order)."""
    ops: list[str] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        ops.extend(
            str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method")
        )
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True, backend=capture)(x, w)
    torch._dynamo.reset()
    return ops


def _measure(local_rank: int, runs: int, iters: int, width: int, backend: str) -> dict[str, Any]:
    world = idist.get_world_size()
    torch.manual_seed(idist.get_rank())
    x, w = torch.randn(64, width), torch.randn(width, width) / width**0.5
    steps = _steps(world)
    graphs = {k: _graph_ops(steps[k], x, w) for k in ("facade", "raw")}
    compiled = {
        k: torch.compile(f, fullgraph=True, backend=backend) for k, f in _steps(world).items()
    }
    for fn in compiled.values():  # compile and warm up
        for _ in range(3):
            fn(x, w)
    assert torch.equal(compiled["facade"](x, w), compiled["raw"](x, w))
    rows: dict[str, list[float]] = {"facade / raw": [], "raw / raw (noise)": []}
    for _ in range(runs):
        raw = _block(compiled["raw"], x, w, iters)
        facade = _block(compiled["facade"], x, w, iters)
        again = _block(compiled["raw_again"], x, w, iters)
        rows["facade / raw"].append(facade / raw)
        rows["raw / raw (noise)"].append(again / raw)
        rows.setdefault("raw step (us)", []).append(raw / iters * 1e6)
    torch._dynamo.reset()
    return {"graphs": graphs, **rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--backend", default="aot_eager", help="aot_eager or inductor")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows = idist.spawn(
        "gloo",
        _measure,
        args=(args.runs, args.iters, args.width, args.backend),
        nproc_per_node=2,
    )[0]
    graphs = rows.pop("graphs")
    print(f"compiled step ({args.backend}), 2 gloo ranks, width {args.width}, {args.runs} runs")
    for side, ops in graphs.items():
        print(f"  graph of {side:6s} {len(ops)} ops: {', '.join(ops)}")
    for name, values in rows.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"  {name:20s} median {statistics.median(values):.3f}  [{shown}]")
    if args.json:
        with open(args.json, "w") as f:
            record = {"backend": args.backend, "width": args.width, "rows": rows, "graphs": graphs}
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
