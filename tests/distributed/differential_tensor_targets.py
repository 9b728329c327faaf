"""The per-rank body of the differential tests of the tensor and number collectives.

It uses only the facade and takes the world from ``idist.get_world_size()``, so any model
runs it: the serial model (``tests/unit/test_differential_tensors.py`` calls `run_case`),
gloo (``test_differential_tensors_gloo.py``), Horovod and XLA (`check_tensor_differential`).
Every rank draws the same cases (``tests/differential/tensor_cases.py``), runs them in
lockstep, compares each result with the exact answer, and on gloo also with
torch.distributed's own op. Reductions the model does not take (its documented
``reduce_ops``) are not drawn, and the report names them.
"""

from __future__ import annotations

import traceback
from collections import Counter
from contextlib import nullcontext
from pathlib import Path, PurePath
from typing import Any

import torch

import distbridge as idist
from tests.differential import lockstep
from tests.differential import tensor_cases as tc
from tests.differential import tensor_inputs as ti
from tests.differential import tensor_reference as ref
from tests.distributed.emulation import emulating

__all__ = [
    "Mismatch",
    "check_tensor_differential",
    "required_tags",
    "run_case",
    "run_tensor_differential",
]

Mismatch = tuple[str, str, str]  # (case label, expected, got)


# ---- one case ----------------------------------------------------------------------------------


def group_argument(case: tc.Case) -> Any:
    """The ``group=`` argument; ``new_group`` runs on every rank, as it must."""
    if case.group is None:
        return None
    if case.group_form == "new_group":
        return idist.new_group(list(case.group))
    return list(case.group) if case.group_form == "list" else tuple(case.group)


def _arguments(
    case: tc.TensorCase, rank: int, inputs: list[list[torch.Tensor]], device: torch.device | None
) -> tuple[Any, list[Any], list[ti.Built]]:
    """What this rank passes: the first argument, the tensors it holds (``passed``: in the
    order ``expect`` reads them, scatter's ``out`` last), and their buffers."""
    layout = case.layouts[rank]
    built = [ti.present(t, layout, device) for t in inputs[rank]]
    tensors = [b.tensor for b in built]
    size = len(case.members(idist.get_world_size()))
    if case.func == "all_to_all" and case.variant == "chunks":
        whole = torch.cat(inputs[rank]) if inputs[rank] else torch.empty(0)
        whole = whole.to(device) if device is not None else whole
        built = [ti.Built(tensor=whole, base=whole, value=whole)]
        tensors = list(whole.chunk(size))
        return tensors, tensors, built
    if case.func == "scatter":
        first = tensors if rank == case.root else None
        if case.variant == "out":
            written = "offset" if layout == "expanded" else layout  # out is written into
            out = ti.present(ti.filler(case), written, device)
            return first, [*tensors, out.tensor], [*built, out]
        return first, tensors, built
    if case.func == "all_to_all" and case.variant != "single":
        return tensors, tensors, built
    mine = tensors[0]
    if case.variant == "safe_none" and rank != case.root:
        return None, [], []
    return mine, [mine], built


def _call(case: tc.TensorCase, first: Any, passed: list[Any], group: Any) -> Any:
    func, root = case.func, case.root
    if func == "all_reduce":
        return idist.all_reduce(first, op=case.spelling, group=group)
    if func == "reduce":
        return idist.reduce(first, dst=root, op=case.spelling, group=group)
    if func == "reduce_scatter":
        return idist.reduce_scatter(first, op=case.spelling, group=group)
    if func == "all_gather":
        return idist.all_gather(first, group=group)
    if func == "broadcast":
        safe = case.variant != "plain"
        return idist.broadcast(first, src=root, safe_mode=safe, group=group)
    if func == "gather":
        return idist.gather(first, dst=root, group=group, same_shape=case.variant == "same_shape")
    if func == "scatter":
        out = passed[-1] if case.variant == "out" else None
        return idist.scatter(first, src=root, group=group, out=out)
    if func == "all_to_all":
        same = case.variant in ("same_shape", "chunks")
        return idist.all_to_all(first, group=group, same_shape=same)
    members = case.members(idist.get_world_size())
    shapes = [list(case.shapes[m][0]) for m in members]
    return idist.all_gather_tensors_with_shapes(first, shapes, group=group)


def _buffer_problem(built: ti.Built, before: torch.Tensor, written: bool) -> str:
    """'' when no byte of ``built``'s buffer changed, except its tensor's own elements where
    the call writes its result (``written``)."""
    rows_before, rows_after = ref.element_bytes(before), ref.element_bytes(built.base)
    keep = torch.ones(before.numel(), dtype=torch.bool)
    if written:
        t = built.tensor
        keep.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(False)
    if torch.equal(rows_before[keep], rows_after[keep]):
        return ""
    return "an input tensor (or the buffer around it) was modified"


def _tensor_tags(case: tc.TensorCase, rank: int, world: int, built: list[ti.Built]) -> set[str]:
    tags = {f"func:{case.func}", f"dtype:{case.dtype}", f"variant:{case.func}:{case.variant}"}
    if case.op:
        tags |= {f"op:{case.op}", f"pair:{case.func}:{case.dtype}:{case.op}"}
    for b in built:
        t = b.tensor
        tags |= {"0-d"} if t.dim() == 0 else set()
        tags |= {"empty"} if t.numel() == 0 else set()
        tags |= {"non-contiguous"} if not t.is_contiguous() else set()
        tags |= {"storage-offset"} if t.storage_offset() else set()
        tags |= {"expanded"} if 0 in t.stride() and t.numel() > 1 else set()
        odd = t.is_contiguous() and t.numel() and t.stride() != torch.empty(t.shape).stride()
        tags |= {"unit-strides"} if odd else set()
    if len({s for shapes in case.shapes for s in shapes}) > 1:
        tags.add(f"uneven:{case.func}")
    return tags | _common_tags(case, rank, world) | ({"twice"} if case.repeat else set())


def _common_tags(case: tc.Case, rank: int, world: int) -> set[str]:
    tags = set()
    if case.group is not None:
        tags.add(f"group-form:{case.group_form}")
        if len(case.group) < world:
            tags.add("group-subset")
        if list(case.group) != sorted(case.group):
            tags.add("group-unsorted")
        if rank not in case.group:
            tags.add(f"non-member:{case.func}")
    if case.root:
        tags.add("root>0")
    return tags


def _run_tensor_case(
    case: tc.TensorCase, device: torch.device | None, compare_torch: bool
) -> tuple[list[str], set[str]]:
    rank, world = idist.get_rank(), idist.get_world_size()
    group = group_argument(case)
    inputs = ti.build_inputs(case, world)
    problems: list[str] = []
    tags: set[str] = set()
    result: Any = None
    for attempt in range(2 if case.repeat else 1):
        first, passed, built = _arguments(case, rank, inputs, device)
        before = [b.base.clone() for b in built]
        tags |= _tensor_tags(case, rank, world, built)
        try:
            result = _call(case, first, passed, group)
        except Exception as err:  # a valid input must not raise
            problems.append(f"call {attempt + 1} raised {type(err).__name__}: {err}")
            continue
        expected = ref.expect(case, world, rank, inputs, passed, idist.device())
        found = ref.difference(result, expected.value, expected.exact_bits)
        found = found or ref.identity_problem(result, expected.same)
        for b, old in zip(built, before, strict=True):
            written = b.tensor is expected.same and expected.same is not None
            found = found or _buffer_problem(b, old, written)
        if found:
            problems.append(f"call {attempt + 1}: {found}; expected {ref.describe(expected.value)}")
    members = case.members(world)
    if compare_torch and ref.torch_has(case, world):
        torch_group = idist.new_group(members) if case.group is not None else None
        if rank in members:  # non-members take no part in torch's op
            theirs = ref.torch_answer(case, world, rank, inputs, torch_group)
            ours = ref.as_bools(result)
            exact = case.func not in tc.REDUCTIONS
            found = "" if theirs is None else ref.difference(ours, theirs, exact)
            if found and not problems:
                mine = f"unlike torch.distributed's own op, {found}"
                problems.append(f"{mine}; expected {ref.describe(theirs)} (torch's result)")
            tags.add("torch")
    return problems, tags


def _number_tags(case: tc.NumberCase, rank: int, world: int) -> set[str]:
    kinds = {type(v).__name__ if not isinstance(v, PurePath) else "Path" for v in case.values}
    tags = {f"func:number:{case.func}"} | {f"number:{case.func}:{k}" for k in kinds}
    if case.op:
        tags.add(f"number-op:{case.op}:{type(case.values[0]).__name__}")
    if case.safe_mode and None in case.values:
        tags.add("safe-mode-none")
    return tags | _common_tags(case, rank, world)


def _run_number_case(case: tc.NumberCase) -> tuple[list[str], set[str]]:
    rank, world = idist.get_rank(), idist.get_world_size()
    group = group_argument(case)
    value = case.values[rank]
    try:
        if case.func == "all_reduce":
            result = idist.all_reduce(value, op=case.spelling, group=group)
        elif case.func == "reduce":
            result = idist.reduce(value, dst=case.root, op=case.spelling, group=group)
        elif case.func == "all_gather":
            result = idist.all_gather(value, group=group)
        elif case.func == "broadcast":
            result = idist.broadcast(value, src=case.root, safe_mode=case.safe_mode, group=group)
        else:
            result = idist.gather(value, dst=case.root, group=group)
    except Exception as err:  # a valid input must not raise
        return [f"raised {type(err).__name__}: {err}"], _number_tags(case, rank, world)
    expected = ref.expect_number(case, world, rank)
    found = ref.difference(result, expected.value, expected.exact_bits)
    problems = [f"{found}; expected {ref.describe(expected.value)}"] if found else []
    return problems, _number_tags(case, rank, world)


def run_case(
    case: tc.Case, device: torch.device | None = None, compare_torch: bool = False
) -> tuple[list[Mismatch], set[str]]:
    """Run ``case`` on this rank: its mismatches (label, expected, got) and coverage tags."""
    if isinstance(case, tc.NumberCase):
        problems, tags = _run_number_case(case)
    else:
        problems, tags = _run_tensor_case(case, device, compare_torch)
    where = f"rank {idist.get_rank()} of {idist.get_world_size()} ({idist.model_name()})"
    return [_split(case.label(), f"{where}: {p}") for p in problems], tags


def _split(label: str, problem: str) -> Mismatch:
    got, _, expected = problem.partition("; expected ")
    return (label, expected, got)


# ---- a whole run -------------------------------------------------------------------------------


def required_tags(world: int, ops: frozenset[str] | None = None, full: bool = True) -> set[str]:
    """What a run of `run_tensor_differential` in a world of ``world`` must have exercised, on
    some rank (with ``world=1``: what every rank of any world sees); ``full``: as drawn with
    every (dtype, op) pair."""
    ops = tc.model_ops() if ops is None else ops
    tags = {f"func:{f}" for f in tc.FUNCS} | {f"func:number:{f}" for f in tc.NUMBER_FUNCS}
    tags |= {f"dtype:{d}" for d in tc.DTYPES} | {f"op:{o}" for o in tc.OPS if o in ops}
    tags |= {f"pair:all_reduce:{d}:{o}" for d, o in tc.pairs(sorted(ops))} if full else set()
    tags |= {f"variant:{f}:{v}" for f, vs in tc.VARIANTS.items() for v in vs}
    if full:  # shape kinds, layouts and group forms need the cases of a full run
        tags |= {"0-d", "empty", "non-contiguous", "storage-offset", "expanded", "twice"}
        tags.add("unit-strides")  # contiguous, odd strides on size-1 dims (issue 30)
        tags |= {"group-form:list", "group-form:tuple", "group-form:new_group"}
    for func in tc.NUMBER_FUNCS:
        kinds = ("int", "float", "bool") if func in tc.REDUCTIONS else ("str", "Path")
        tags |= {f"number:{func}:{kind}" for kind in kinds}
    if world > 1:
        tags |= {"group-subset", "group-unsorted", "root>0", "safe-mode-none"}
        tags |= {f"non-member:{f}" for f in tc.FUNCS}
        tags |= {f"uneven:{f}" for f in ("gather", "scatter", "all_to_all")}
        tags.add("uneven:all_gather_tensors_with_shapes")
    return tags


def run_tensor_differential(
    local_rank: int,
    store_path: str,
    per_func: int = 12,
    case_timeout: float = 30.0,
    *,
    full: bool = True,
    compare_torch: bool | None = None,
    on_device: bool = False,
    emulated: bool = False,
) -> dict[str, Any]:
    """Draw the cases for this world, run them in lockstep with the other ranks, and report.

    Args:
        local_rank: unused (``spawn`` passes it).
        store_path: a file every rank can reach, not used before (a FileStore in it keeps
            the ranks in step and turns a hang into an error naming the case).
        per_func: cases per function, at least.
        case_timeout: seconds every rank gets to finish one case.
        full: also one case per (dtype, op) pair of each reduction and per dtype of each
            move (about 400 cases in all; else about ``15 * per_func``).
        compare_torch: also compare with torch.distributed's own op (default: on gloo).
        on_device: build the tensors on ``idist.device()`` instead of the CPU.
        emulated: on the native model, with the base class's emulations of reduce, gather,
            scatter, reduce_scatter and all_to_all instead of torch's ops.

    Returns:
        A JSON-friendly report: ``mismatches`` (label, expected, got), ``cases``, ``tags``
        (how often each feature was exercised on this rank), ``torch_compared`` and
        ``ops_not_taken`` (the reductions this model does not take, so not drawn).
    """
    del local_rank
    with emulating() if emulated else nullcontext():
        world, ops = idist.get_world_size(), tc.model_ops()
        cases = tc.draw_cases(world, per_func, sorted(ops & set(tc.OPS)), full)
        if compare_torch is None:
            compare_torch = idist.backend() == "gloo"
        device = idist.device() if on_device else None
        mismatches: list[Mismatch] = []
        tags: Counter[str] = Counter()

        def run_one(case: tc.Case) -> str:
            try:
                found, seen = run_case(case, device, compare_torch)
            except Exception:  # the harness itself failed: as much a failure as a wrong answer
                error = traceback.format_exc(limit=-4)
                found, seen = [(case.label(), "", f"rank {idist.get_rank()}: {error}")], set()
            mismatches.extend(found)
            tags.update(seen)
            return "; ".join(got for _, _, got in found)

        lockstep.run_in_lockstep(cases, run_one, store_path, case_timeout, lambda c: c.label())
        return {
            "model": idist.model_name(),
            "world": world,
            "rank": idist.get_rank(),
            "cases": len(cases),
            "digest": lockstep.digest(cases),
            "mismatches": mismatches,
            "tags": dict(tags),
            "torch_compared": tags["torch"],
            "ops_not_taken": sorted(set(tc.OPS) - ops),
        }


def check_tensor_differential(tmp: Path, per_func: int = 12, full: bool = True) -> None:
    """`run_tensor_differential` as a check for the Horovod and XLA runs (any world size):
    raises AssertionError naming every mismatch, or a feature no case exercised here."""
    store = str(Path(tmp) / "differential-tensors.store")
    report = run_tensor_differential(0, store, per_func, full=full)
    assert not report["mismatches"], "\n".join(map(" | ".join, report["mismatches"][:50]))
    missing = required_tags(1, full=full) - set(report["tags"])  # what every rank sees
    assert not missing, f"no case exercised {sorted(missing)}"
