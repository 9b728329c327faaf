"""The per-rank body of the compiled-against-eager differential test
(``test_compile_differential_gloo.py``).

The cases are the eager differential's own (``tests/differential/tensor_cases.draw_cases``),
built and passed as it passes them (``differential_tensor_targets``: every layout, groups as
lists, tuples and ``new_group``, roots, non-members, second calls). Each case runs twice on
fresh copies of the same input: eagerly, then inside
``torch.compile(fn, fullgraph=True, dynamic=False, backend=...)`` (any graph break is an
error). The compiled call must give what the eager one gives: the result, which of the
passed tensors it is (in-place results), and every byte of the buffers the inputs live in,
guard bytes around them included. Cases the traceable path does not take by design are left
out when drawn, each for a reason (`LEFT_OUT`) that the report counts.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo

import distbridge as idist
from tests.differential import lockstep
from tests.differential import tensor_cases as tc
from tests.differential import tensor_inputs as ti
from tests.differential import tensor_reference as ref
from tests.distributed import differential_tensor_targets as eager_targets

__all__ = ["FUNCS", "LEFT_OUT", "left_out_because", "run_compiled_differential"]

#: The tensor collectives a compiled region traces (``distbridge.algorithms.traceable``).
FUNCS = ("all_reduce", "reduce", "reduce_scatter", "all_gather", "broadcast", "gather",
         "scatter", "all_to_all")  # fmt: skip

#: reason: why the cases it names never reach the traceable path (what they run instead)
LEFT_OUT = {
    "number": "Python values (numbers, str, Path) take the value path: a header and "
    "bytes exchanged on the host, which a compiled region does not trace",
    "all_gather_tensors_with_shapes": "not one of the collectives issue 28 makes traceable: "
    "it reads every rank's check flag on the host so that all ranks raise together, a sync "
    "a compiled region cannot trace",
    "safe_mode": "broadcast(safe_mode=True) takes the value path (a header first), which a "
    "compiled region does not trace",
    "uneven": "gather, scatter and all_to_all of a list with shapes that differ from rank to "
    "rank: a compiled region cannot exchange shapes, so it takes every chunk to have this "
    "rank's shape (the variants same_shape, chunks and single are drawn instead)",
    "no_out": "scatter without out=: a compiled region cannot learn the shape from the "
    "source, so it needs out= on every rank (the variant out is drawn instead)",
}


def left_out_because(case: tc.Case) -> str | None:
    """The key of `LEFT_OUT` that keeps ``case`` out of the compiled run, or None."""
    if isinstance(case, tc.NumberCase):
        return "number"
    if case.func == "all_gather_tensors_with_shapes":
        return "all_gather_tensors_with_shapes"
    if case.variant in ("safe_none", "safe_tensor"):
        return "safe_mode"
    if case.func == "scatter" and case.variant == "plain":
        return "no_out"
    if case.func in ("gather", "all_to_all") and case.variant == "plain":
        return "uneven"
    return None


def _exact(case: tc.TensorCase) -> bool:
    """Whether the results must match bit for bit: everything but a reduced float or complex
    value, whose NaN may carry any sign and payload (IEEE 754 leaves them to the
    arithmetic, and the compiled path reduces in other steps: reduce_scatter as an
    all-reduce, AVG as a SUM and a division; seen: a bfloat16 AVG under inductor gave a NaN
    of another sign); there any NaN equals any NaN, and -0.0 still differs from 0.0."""
    dtype = tc.DTYPES[case.dtype]
    return case.func not in tc.REDUCTIONS or not (dtype.is_floating_point or dtype.is_complex)


class _Graphs:
    """A torch.compile backend that records the FX graphs Dynamo hands it, then compiles them
    with the backend named ``name`` ("aot_eager", "inductor")."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.codes: list[str] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.codes.append(gm.code)
        compile_with = torch._dynamo.lookup_backend(self.name)
        return compile_with(gm, example_inputs)


def _identities(result: Any, passed: list[Any]) -> list[int | None]:
    """For ``result`` (a tensor or a list of them), which of ``passed`` each is, if any."""
    items = result if isinstance(result, list) else [result]
    return [next((i for i, p in enumerate(passed) if item is p), None) for item in items]


def _around(built: ti.Built, written: bool) -> torch.Tensor:
    """The bytes of ``built``'s buffer, one row per element, leaving out its tensor's own
    elements where the call writes its result (``written``): those are compared as the
    result."""
    rows = ref.element_bytes(built.base.detach().cpu())
    keep = torch.ones(built.base.numel(), dtype=torch.bool)
    if written:
        t = built.tensor
        keep.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(False)
    return rows[keep]


def _attempt(
    case: tc.TensorCase, inputs: list[list[torch.Tensor]], group: Any, fn: Callable[..., Any]
) -> tuple[Any, list[Any], list[ti.Built]]:
    """One call of ``fn`` (the facade call, eager or compiled) on fresh copies of this rank's
    inputs, as the eager differential passes them: the result, the tensors passed, their
    buffers."""
    first, passed, built = eager_targets._arguments(case, idist.get_rank(), inputs, None)
    return fn(first, passed, group), passed, built


def _compare(
    case: tc.TensorCase,
    eager: tuple[Any, list[Any], list[ti.Built]],
    compiled: tuple[Any, list[Any], list[ti.Built]],
) -> str:
    """'' when the compiled call did what the eager one did, else the first difference."""
    (want, want_passed, want_built), (got, got_passed, got_built) = eager, compiled
    found = ref.difference(got, want, _exact(case))
    if found:
        return f"{found}; eager gave {ref.describe(want)}"
    if _identities(got, got_passed) != _identities(want, want_passed):
        return (
            f"result is passed tensors {_identities(got, got_passed)} where eager's is "
            f"{_identities(want, want_passed)} (None: a new tensor)"
        )
    in_place = {i for i in _identities(want, want_passed) if i is not None}
    for i, (w, g) in enumerate(zip(want_built, got_built, strict=True)):
        written = any(want_passed[j] is w.tensor for j in in_place)
        if not torch.equal(_around(g, written), _around(w, written)):
            return f"the buffer of input {i} holds other bytes than after the eager call"
    return ""


def _run_one(
    case: tc.TensorCase, backend: str, counts: Counter[str], timings: dict[str, float]
) -> str:
    """Run ``case`` eagerly and compiled with ``backend`` on this rank; '' when they agree."""
    rank, world = idist.get_rank(), idist.get_world_size()
    group = eager_targets.group_argument(case)  # new_group runs on every rank, outside the region
    inputs = ti.build_inputs(case, world)

    def call(first: Any, passed: list[Any], group: Any) -> Any:
        return eager_targets._call(case, first, passed, group)

    torch._dynamo.reset()  # every case compiles afresh: no cache limit, no dynamic shapes
    graphs = _Graphs(backend)
    compiled = torch.compile(call, fullgraph=True, dynamic=False, backend=graphs)
    problems = []
    for attempt in range(2 if case.repeat else 1):
        eager = _attempt(case, inputs, group, call)
        start = time.perf_counter()
        got = _attempt(case, inputs, group, compiled)
        timings[backend] = timings.get(backend, 0.0) + time.perf_counter() - start
        found = _compare(case, eager, got)
        if found:
            problems.append(f"{backend}, call {attempt + 1}: {found}")
    member = rank in case.members(world)
    if member and not any("_c10d_functional" in code for code in graphs.codes):
        problems.append(f"{backend}: no functional collective in the graphs {graphs.codes!r}")
    counts[f"graphs:{backend}"] += len(graphs.codes)
    return "; ".join(problems)


def run_compiled_differential(
    local_rank: int, store_path: str, per_func: int, inductor_per_func: int
) -> dict[str, Any]:
    """Draw the eager differential's cases for this world (``per_func`` per function, split
    between its variants), leave out those the traceable path does not take, and run the
    rest eagerly and compiled with aot_eager in lockstep with the other ranks; of each
    function, ``inductor_per_func`` cases (spread over its cases: other dtypes and variants)
    also compile with inductor.

    Returns:
        This rank's report: ``found`` (the cases whose compiled answer differed, or whose
        compilation failed), ``cases`` (per backend), ``left_out`` (cases per `LEFT_OUT`
        reason), ``tags`` (functions, ops, dtypes, variants, ... exercised), ``seconds``
        (per backend: the compiled calls, compilation included).
    """
    del local_rank
    world = idist.get_world_size()
    drawn = tc.draw_cases(world, per_func, full=False)
    left_out = Counter(r for r in map(left_out_because, drawn) if r is not None)
    cases = [c for c in drawn if isinstance(c, tc.TensorCase) and left_out_because(c) is None]
    runs = [(c, "aot_eager") for c in cases]
    for func in FUNCS if inductor_per_func else ():
        mine = [c for c in cases if c.func == func]
        step = max(1, len(mine) // inductor_per_func)
        runs += [(c, "inductor") for c in mine[::step][:inductor_per_func]]
    counts: Counter[str] = Counter()
    timings: dict[str, float] = {}
    tags: Counter[str] = Counter()

    def run_one(run: tuple[tc.TensorCase, str]) -> str:
        case, backend = run
        counts[f"cases:{backend}"] += 1
        tags.update(_tags(case, backend, world))
        return _run_one(case, backend, counts, timings)

    try:
        found = lockstep.run_in_lockstep(
            runs, run_one, store_path, 120.0, lambda r: f"{r[1]}: {r[0].label()}"
        )
    finally:
        torch._dynamo.reset()
    return {
        "found": found,
        "cases": {k.removeprefix("cases:"): v for k, v in counts.items() if k[:6] == "cases:"},
        "graphs": {k.removeprefix("graphs:"): v for k, v in counts.items() if k[:7] == "graphs:"},
        "left_out": dict(left_out),
        "drawn": len(drawn),
        "tags": dict(tags),
        "seconds": timings,
        "seed": lockstep.seed_note(),
    }


def _tags(case: tc.TensorCase, backend: str, world: int) -> set[str]:
    """What ``case`` exercises, for the test's coverage checks."""
    tags = {f"func:{case.func}", f"dtype:{case.dtype}", f"variant:{case.func}:{case.variant}"}
    tags |= {f"backend:{backend}", f"backend:{backend}:{case.func}"}
    if case.op:
        tags |= {f"op:{case.func}:{case.op}"}
    if case.group is not None:
        tags.add(f"group-form:{case.group_form}")
        if idist.get_rank() not in case.group:
            tags.add("non-member")
    if case.repeat:
        tags.add("twice")
    tags |= {f"layout:{layout}" for layout in case.layouts}
    if any(0 in shape for shapes in case.shapes for shape in shapes):
        tags.add("empty")
    if any(shape == () for shapes in case.shapes for shape in shapes):
        tags.add("0-d")
    return tags
