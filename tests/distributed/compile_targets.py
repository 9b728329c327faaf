"""Compiled against eager: every tensor collective of the facade under
``torch.compile(fullgraph=True)`` gives the eager answer, bit for bit, on generated cases.

Every rank draws the same cases (``lockstep.draw_examples``) and runs each twice on the same
input, eagerly and compiled; ``fullgraph=True`` makes any graph break an error. The result
and the input afterwards (in-place collectives write into it) must have the same bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

import distbridge as idist
from distbridge.algorithms import byte_view
from tests.differential import lockstep

__all__ = ["CompileCase", "cases", "run_compile_cases"]

FUNCS = ("all_reduce", "all_gather", "broadcast", "reduce", "gather", "scatter",
         "reduce_scatter", "all_to_all", "all_to_all_list")  # fmt: skip
REDUCTIONS = ("all_reduce", "reduce", "reduce_scatter")
INDUCTOR_FUNCS = ("all_reduce", "all_gather", "broadcast")
DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
    "int16": torch.int16, "uint64": torch.uint64, "uint8": torch.uint8, "bool": torch.bool,
    "complex64": torch.complex64,
}  # fmt: skip


@dataclass(frozen=True)
class CompileCase:
    func: str
    dtype: str
    op: str | None
    rows: int  # per group member (dim 0 is rows * group size where it splits)
    cols: int
    zero_d: bool
    group: tuple[int, ...] | None
    root: int
    seed: int
    specials: bool
    backend: str


def _ops(dtype: torch.dtype) -> list[str]:
    if dtype is torch.bool:
        return ["SUM", "MIN", "MAX", "AND", "OR"]
    if dtype.is_complex:
        return ["SUM", "AVG", "PRODUCT"]
    if dtype.is_floating_point:
        return ["SUM", "AVG", "PRODUCT", "MIN", "MAX"]
    return ["SUM", "PRODUCT", "MIN", "MAX", "AND", "OR"]


@st.composite
def cases(draw: st.DrawFn, world: int, func: str, inductor_share: int = 8) -> CompileCase:
    """A case of ``func`` for a world of ``world`` ranks; one in ``inductor_share`` compiles
    with inductor (when a C++ compiler is present; the caller decides), the rest aot_eager."""
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    op = draw(st.sampled_from(_ops(DTYPES[dtype]))) if func in REDUCTIONS else None
    group = None
    if world > 2 and draw(st.booleans()):
        group = tuple(
            sorted(draw(st.sets(st.integers(0, world - 1), min_size=2, max_size=world - 1)))
        )
    members = group or tuple(range(world))
    splits = func in ("reduce_scatter", "all_to_all")
    return CompileCase(
        func=func,
        dtype=dtype,
        op=op,
        rows=draw(st.integers(1, 2)),
        cols=draw(st.integers(1, 3)),
        zero_d=not splits and func != "all_to_all_list" and draw(st.integers(0, 4)) == 0,
        group=group,
        root=draw(st.sampled_from(members)),
        seed=draw(st.integers(0, 2**31 - 1)),
        specials=draw(st.booleans()),
        backend="inductor" if draw(st.integers(1, inductor_share)) == 1 else "aot_eager",
    )


def _values(case: CompileCase, rank: int, shape: tuple[int, ...]) -> torch.Tensor:
    """This rank's input: small values (sums and products stay exact), NaN and -0.0 among
    the floats when ``specials``."""
    dtype = DTYPES[case.dtype]
    gen = torch.Generator().manual_seed(case.seed * 31 + rank)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=gen).to(torch.bool)
    if dtype.is_complex:
        parts = torch.randint(-4, 5, (*shape, 2), generator=gen).to(torch.float32) / 2
        return torch.view_as_complex(parts)
    low = 0 if dtype in (torch.uint8, torch.uint64) else -4
    x = torch.randint(low, 5, shape, generator=gen)
    if dtype.is_floating_point:
        x = x.to(dtype) / 2
        if case.specials and x.numel():
            flat = x.view(-1)
            flat[int(torch.randint(0, flat.numel(), (), generator=gen))] = float("nan")
            flat[0] = -0.0
        return x
    return x.to(dtype)


def _call(
    case: CompileCase, x: torch.Tensor, out: torch.Tensor | None, chunks: list[torch.Tensor]
) -> Any:
    group = list(case.group) if case.group is not None else None
    if case.func == "all_reduce":
        return idist.all_reduce(x, case.op or "SUM", group=group)
    if case.func == "reduce":
        return idist.reduce(x, dst=case.root, op=case.op or "SUM", group=group)
    if case.func == "reduce_scatter":
        return idist.reduce_scatter(x, case.op or "SUM", group=group)
    if case.func == "all_gather":
        return idist.all_gather(x, group=group)
    if case.func == "broadcast":
        return idist.broadcast(x, src=case.root, group=group)
    if case.func == "gather":
        return idist.gather(x, dst=case.root, group=group)
    if case.func == "scatter":
        sent = chunks if idist.get_rank() == case.root else None
        return idist.scatter(sent, src=case.root, group=group, out=out)
    if case.func == "all_to_all":
        return idist.all_to_all(x, group=group)
    return idist.all_to_all(chunks, group=group)


def _bytes(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (
            value.dtype,
            tuple(value.shape),
            bytes(byte_view.as_bytes(value.detach().clone()).numpy()),
        )
    if isinstance(value, (list, tuple)):
        return [_bytes(v) for v in value]
    return value


def _run_one(case: CompileCase) -> str:
    rank = idist.get_rank()
    members = len(case.group) if case.group is not None else idist.get_world_size()
    rows = case.rows * members if case.func in ("reduce_scatter", "all_to_all") else case.rows
    shape = () if case.zero_d else (rows, case.cols)
    x = _values(case, rank, shape)
    outs = [torch.zeros_like(x) if case.func == "scatter" else None for _ in range(2)]
    chunks = [_values(case, 1000 * (rank + 1) + j, shape) for j in range(members)]
    eager_in = x.clone()
    eager = _call(case, eager_in, outs[0], chunks)
    torch._dynamo.reset()
    compiled_in = x.clone()
    compiled_fn = torch.compile(
        lambda t, o, c: _call(case, t, o, c), fullgraph=True, backend=case.backend
    )
    got = compiled_fn(compiled_in, outs[1], chunks)
    problems = []
    if _bytes(got) != _bytes(eager):
        problems.append(f"result {got!r} != eager {eager!r}")
    if _bytes(compiled_in) != _bytes(eager_in):
        problems.append(f"input after {compiled_in!r} != eager's {eager_in!r}")
    if case.func == "scatter" and _bytes(outs[1]) != _bytes(outs[0]):
        problems.append(f"out {outs[1]!r} != eager's {outs[0]!r}")
    return "; ".join(problems)


def run_compile_cases(
    local_rank: int, count: int, store_path: str, inductor: bool
) -> dict[str, Any]:
    """Draw ``count`` cases of each function for this world and run them compiled and eager,
    in lockstep;
    this rank's mismatches and what the cases covered."""
    world = idist.get_world_size()
    drawn = [c for f in FUNCS for c in lockstep.draw_examples(cases(world, f, 10**9), count)]
    if inductor:  # inductor compiles C++ (seconds a case): the first case of three functions
        firsts = {f: next(i for i, c in enumerate(drawn) if c.func == f) for f in INDUCTOR_FUNCS}
        for i in firsts.values():
            drawn[i] = dataclasses.replace(drawn[i], backend="inductor")
    try:
        found = lockstep.run_in_lockstep(drawn, _run_one, store_path, case_timeout=120.0)
    finally:
        torch._dynamo.reset()
    return {
        "found": found,
        "funcs": sorted({c.func for c in drawn}),
        "backends": sorted({c.backend for c in drawn}),
        "groups": sum(c.group is not None for c in drawn),
        "cases": len(drawn),
        "seed": lockstep.seed_note(),
    }
