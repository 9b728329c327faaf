"""The exact answer to every tensor and number case, torch.distributed's own answer, and the
comparison of results.

`expect` computes what one rank must get from every rank's input (each rank rebuilds them
all): reductions fold in float64 (exact for the values the cases draw) or in the integer
dtype itself (numpy wraps as torch does), moves are copies. `difference` compares byte for
byte: dtype, shape, device and every bit of a moved value (NaN payloads included); a
reduced float compares NaN with NaN and tells -0.0 from 0.0. `torch_answer` runs
torch.distributed's op on the same inputs, wherever gloo has it.
"""

from __future__ import annotations

import math
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tests.differential.tensor_cases import DTYPES, REDUCTIONS, NumberCase, TensorCase

__all__ = [
    "Expected",
    "as_bools",
    "describe",
    "difference",
    "element_bytes",
    "expect",
    "expect_number",
    "identity_problem",
    "reduce_exact",
    "torch_answer",
    "torch_has",
]

# ---- exact reductions --------------------------------------------------------------------------

_INT_STEPS = {
    "SUM": np.add,
    "PRODUCT": np.multiply,
    "MIN": np.minimum,
    "MAX": np.maximum,
    "AND": np.bitwise_and,
    "OR": np.bitwise_or,
}


def _float_parts(t: torch.Tensor) -> np.ndarray[Any, Any]:
    """float64 values of ``t``; a complex tensor gets a last axis (real, imaginary)."""
    real = torch.view_as_real(t) if t.is_complex() else t
    return real.double().numpy()


def _complex_product(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    re = a[..., 0] * b[..., 0] - a[..., 1] * b[..., 1]
    im = a[..., 0] * b[..., 1] + a[..., 1] * b[..., 0]
    return np.stack([re, im], axis=-1)


def reduce_exact(values: list[torch.Tensor], op: str) -> torch.Tensor:
    """``op`` over ``values`` (one per member, in rank order), computed exactly; bools as
    logical values (SUM and MAX are OR, PRODUCT and MIN are AND)."""
    dtype = values[0].dtype
    if dtype is torch.bool:
        stack = torch.stack(values)
        return stack.any(0) if op in ("SUM", "MAX", "OR") else stack.all(0)
    if dtype.is_floating_point or dtype.is_complex:
        with np.errstate(invalid="ignore"):  # inf - inf and 0 * inf are NaN, as they must be
            return _reduce_floats([_float_parts(v) for v in values], op, dtype)
    arrays = [v.numpy() for v in values]
    acc = arrays[0]
    for array in arrays[1:]:
        acc = _INT_STEPS[op](acc, array)
    return torch.from_numpy(np.array(acc, dtype=arrays[0].dtype))


def ieee_min_max(op: str, a: Any, b: Any) -> Any:
    """IEEE 754-2019 minimum / maximum, element-wise: a NaN wins, -0.0 is below 0.0 (what
    distbridge defines for float MIN / MAX on every backend)."""
    picked = (np.minimum if op == "MIN" else np.maximum)(a, b)  # propagates NaN
    zeros = (a == 0) & (b == 0)
    negative = np.signbit(a) | np.signbit(b) if op == "MIN" else np.signbit(a) & np.signbit(b)
    return np.where(zeros, np.where(negative, -0.0, 0.0), picked)


def _reduce_floats(parts: list[np.ndarray[Any, Any]], op: str, dtype: torch.dtype) -> torch.Tensor:
    """The float64 fold of ``reduce_exact``, rounded once to ``dtype``."""
    acc = parts[0]
    for part in parts[1:]:
        if op == "PRODUCT":
            acc = _complex_product(acc, part) if dtype.is_complex else acc * part
        elif op in ("MIN", "MAX"):
            acc = ieee_min_max(op, acc, part)
        else:
            acc = acc + part
    if op == "AVG":
        acc = acc / len(parts)
    as_float = torch.from_numpy(np.array(acc, dtype=np.float64))
    if dtype.is_complex:
        return torch.complex(as_float[..., 0], as_float[..., 1]).to(dtype)
    return as_float.to(dtype)


def _reduce_numbers(values: list[Any], op: str) -> Any:
    """A Python number reduction as ``all_reduce``'s docstring says: ints stay ints (bitwise
    AND / OR), floats are reduced in float64, bools stay bools under AND / OR / MIN / MAX and
    count under SUM / PRODUCT; an average is a float."""
    if op == "AVG":
        total = values[0]
        for v in values[1:]:
            total = total + v
        return float(total) / len(values) if isinstance(total, float) else total / len(values)
    acc = int(values[0]) if type(values[0]) is bool and op in ("SUM", "PRODUCT") else values[0]
    for v in values[1:]:
        if op == "SUM":
            acc = acc + v
        elif op == "PRODUCT":
            acc = acc * v
        elif op in ("MIN", "MAX") and isinstance(acc, float):
            acc = float(ieee_min_max(op, np.float64(acc), np.float64(v)))
        elif op == "MIN":
            acc = min(acc, v)
        elif op == "MAX":
            acc = max(acc, v)
        elif op == "AND":
            acc = acc & v
        else:
            acc = acc | v
    if type(values[0]) is bool:
        return bool(acc) if op in ("AND", "OR", "MIN", "MAX") else int(acc)
    return acc


# ---- what a rank must get ----------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What one call must return on one rank.

    ``value`` is the result (a tensor, a list, a number or None). ``same`` is the object the
    call must return itself (for a list: the objects its items must be), or None when the
    result must be new. ``exact_bits``: every bit must match (moves); else a reduced float's
    NaN equals any NaN."""

    value: Any
    same: Any = None
    exact_bits: bool = True


def _chunk(t: torch.Tensor, size: int, index: int) -> torch.Tensor:
    """Chunk ``index`` of ``size`` equal chunks of ``t`` along dim 0."""
    rows = t.shape[0] // size
    return t.narrow(0, index * rows, rows)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` with at least one dim (a 0-dim tensor gathers as one row)."""
    return t.unsqueeze(0) if t.dim() == 0 else t


def expect(
    case: TensorCase,
    world: int,
    rank: int,
    inputs: list[list[torch.Tensor]],
    passed: list[Any],
    device: torch.device,
) -> Expected:
    """What ``case`` returns on ``rank``: ``inputs`` are every rank's values (contiguous, CPU),
    ``passed`` what this rank passed (tensors in their layouts, or None), ``device`` the
    model's ``device()``."""
    members = case.members(world)
    member = rank in members
    mine = passed[0] if passed else None
    here = mine.device if isinstance(mine, torch.Tensor) else device
    own = inputs[rank][0] if inputs[rank] else None
    func, variant = case.func, case.variant
    if not member:  # what the docstrings (and, where they are silent, the code) give back
        if func == "gather":
            return Expected([])
        if func == "scatter":
            return Expected(None)
        if func == "all_gather_tensors_with_shapes":
            return Expected([own], same=[mine])
        if func == "all_to_all" and variant != "single":
            return Expected([t.to(here) for t in inputs[rank]], same=list(passed))
        return Expected(None if mine is None else own.to(here), same=mine)
    size, index = len(members), members.index(rank)
    firsts = [inputs[m][0] for m in members] if func != "scatter" else []
    if func in REDUCTIONS:
        assert case.op is not None
        total = reduce_exact(firsts, case.op).to(here)
        if func == "all_reduce" or (func == "reduce" and rank == case.root):
            return Expected(total, same=mine, exact_bits=False)
        if func == "reduce":
            return Expected(own.to(here), same=mine)
        return Expected(_chunk(total, size, index), exact_bits=False)
    if func == "all_gather":
        return Expected(torch.cat([_rows(t) for t in firsts]).to(here))
    if func == "broadcast":
        sent = inputs[case.root][0]
        if variant == "plain" or rank == case.root:
            return Expected(sent.to(here), same=mine)
        return Expected(sent.to(device))
    if func == "gather":
        return Expected([t.to(here) for t in firsts] if rank == case.root else [])
    if func == "scatter":
        part = inputs[case.root][index]
        if variant == "out":
            return Expected(part.to(passed[-1].device), same=passed[-1])
        return Expected(part.to(passed[0].device if rank == case.root else device))
    if func == "all_gather_tensors_with_shapes":
        return Expected([t.to(here) for t in firsts])
    # all_to_all
    if variant == "single":
        return Expected(torch.cat([_chunk(t, size, index) for t in firsts]).to(here))
    got = [inputs[m][index] for m in members]
    return Expected([t.to(p.device) for t, p in zip(got, passed, strict=True)])


def _received(value: Any) -> Any:
    """A value as another rank receives it: a path always comes as a concrete ``Path``."""
    return Path(str(value)) if isinstance(value, PurePath) else value


def expect_number(case: NumberCase, world: int, rank: int) -> Expected:
    """What ``case`` (Python values) returns on ``rank``."""
    members = case.members(world)
    own = case.values[rank]
    if rank not in members:  # the input back (all_gather too: as for tensors, and as ignite)
        return Expected([] if case.func == "gather" else own)
    sent = [case.values[m] for m in members]
    if case.func in ("all_reduce", "reduce"):
        assert case.op is not None
        if case.func == "reduce" and rank != case.root:
            return Expected(own)
        return Expected(_reduce_numbers(sent, case.op), exact_bits=False)
    if case.func == "broadcast":
        return Expected(_received(case.values[case.root]))
    everything = [_received(v) for v in sent]
    return Expected(everything if case.func == "all_gather" or rank == case.root else [])


# ---- comparing ---------------------------------------------------------------------------------


def _bytes(t: torch.Tensor) -> torch.Tensor:
    t = t.view(torch.uint8) if t.dtype is torch.bool else t  # a copy would make bools 0 / 1
    flat = t.detach().cpu().clone(memory_format=torch.contiguous_format).reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)


def element_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a contiguous ``t``, one row per element."""
    return _bytes(t).reshape(t.numel(), t.element_size())


def _shown(flat: torch.Tensor) -> list[Any]:
    if flat.dtype is torch.bool or flat.dtype in (torch.uint16, torch.uint32, torch.uint64):
        return flat.view(torch.uint8).tolist() if flat.dtype is torch.bool else flat.tolist()
    if flat.is_complex():
        return [repr(v) for v in flat.to(torch.complex128).tolist()]
    if flat.is_floating_point():
        return [repr(v) for v in flat.double().tolist()]
    return flat.tolist()


def describe(value: Any, limit: int = 8) -> str:
    """A short, exact description: a tensor's dtype, shape, device and first values (a bool
    tensor as its bytes, which must be 0 or 1)."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        more = "..." if flat.numel() > limit else ""
        shown = _shown(flat[:limit])
        return f"tensor({value.dtype}, {list(value.shape)}, {value.device}, {shown}{more})"
    if isinstance(value, list):
        return "[" + ", ".join(describe(v, limit) for v in value) + "]"
    if isinstance(value, float):
        return f"float {value!r} (bits {struct.unpack('<Q', struct.pack('<d', value))[0]:#x})"
    return f"{type(value).__name__} {value!r}"


def _nan_aware(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal values, NaN equal to any NaN, -0.0 unequal to 0.0."""
    g, w = got.detach().cpu().contiguous(), want.contiguous()
    if g.is_complex():
        g, w = torch.view_as_real(g), torch.view_as_real(w)
    g, w = g.double(), w.double()
    nan_g, nan_w = torch.isnan(g), torch.isnan(w)
    if not torch.equal(nan_g, nan_w):
        return False
    g, w = g.masked_fill(nan_g, 0.0), w.masked_fill(nan_w, 0.0)
    return torch.equal(_bytes(g), _bytes(w))


def difference(got: Any, want: Any, exact_bits: bool, where: str = "result") -> str:
    """'' when ``got`` is ``want`` exactly, else where they first differ."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{where} is {describe(got)}"
        same_kind = (got.dtype, tuple(got.shape), got.device) == (
            want.dtype,
            tuple(want.shape),
            want.device,
        )
        if not same_kind:
            return f"{where}: {describe(got)}"
        floating = want.is_floating_point() or want.is_complex()
        if exact_bits or not floating:
            same = torch.equal(_bytes(got), _bytes(want))
        else:
            same = _nan_aware(got, want)
        return "" if same else f"{where}: {describe(got)}"
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{where} is {describe(got)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = difference(g, w, exact_bits, f"{where}[{i}]")
            if found:
                return found
        return ""
    if type(got) is not type(want):
        return f"{where} is {describe(got)}"
    if isinstance(want, float):
        if not exact_bits and math.isnan(want) and math.isnan(got):
            return ""
        same = struct.pack("<d", got) == struct.pack("<d", want)
        return "" if same else f"{where} is {describe(got)}"
    return "" if got == want else f"{where} is {describe(got)}"


def identity_problem(got: Any, same: Any) -> str:
    """'' when ``got`` is the object ``same`` (a list: item by item), else what differs."""
    if same is None:
        return ""
    if isinstance(same, list):
        if not isinstance(got, list) or len(got) != len(same):
            return "result is not a list of the tensors passed"
        bad = [i for i, (g, s) in enumerate(zip(got, same, strict=True)) if g is not s]
        return f"result[{bad[0]}] is not the tensor passed" if bad else ""
    return "" if got is same else "result is not the object passed"


# ---- torch.distributed's own answer (gloo) -----------------------------------------------------

_TORCH_OPS = {
    "SUM": "SUM",
    "PRODUCT": "PRODUCT",
    "MIN": "MIN",
    "MAX": "MAX",
    "AND": "BAND",
    "OR": "BOR",
    "AVG": "AVG",
}
#: dtypes gloo has no collective for at all ("Invalid scalar type"): distbridge carries them.
GLOO_LACKS = frozenset((torch.int16, torch.uint16, torch.uint32, torch.uint64))


def torch_has(case: TensorCase, world: int) -> bool:
    """Whether gloo's own op takes ``case`` (its dtype, op and shapes); the same on every
    rank, so every member calls torch's op or none does."""
    dtype = DTYPES[case.dtype]
    if dtype in GLOO_LACKS:
        return False
    if dtype.is_complex and (case.func == "gather" or case.op not in (None, "SUM", "AVG")):
        return False  # gloo gathers no complex; torch reduces complex by SUM and AVG only
    if case.op in ("MIN", "MAX") and dtype.is_floating_point and case.specials:
        return False  # gloo's MIN / MAX of a NaN or -0.0 follow the rank order; ours are IEEE's
    if dtype.is_complex and case.op == "AVG" and case.func != "all_reduce" and case.specials:
        return False  # torch's reduce / reduce_scatter divide a complex AVG as complex numbers
    if case.func in ("gather", "scatter", "all_gather_tensors_with_shapes"):
        members = case.members(world)
        shapes = (
            case.shapes[case.root]
            if case.func == "scatter"
            else tuple(case.shapes[m][0] for m in members)
        )
        return len(set(shapes)) == 1  # torch's gather and scatter take one shape
    return True


def _single(name: str) -> Any:
    """torch 2.13 renamed the single-tensor forms (the old names warn)."""
    old = {
        "all_gather_single": "all_gather_into_tensor",
        "reduce_scatter_single": "reduce_scatter_tensor",
    }
    return getattr(dist, name, None) or getattr(dist, old[name])


def torch_answer(
    case: TensorCase, world: int, rank: int, inputs: list[list[torch.Tensor]], group: Any
) -> Any:
    """torch.distributed's result of ``case`` on this rank (a member), from copies of the same
    inputs; a bool result is read as bools (gloo adds bools as bytes: two Trues give 2).
    None on a rank where torch's op leaves nothing to compare (reduce off ``dst``)."""
    members = case.members(world)
    size, index = len(members), members.index(rank)
    mine = [t.clone() for t in inputs[rank]]
    op = getattr(dist.ReduceOp, _TORCH_OPS[case.op]) if case.op else None
    func, root = case.func, case.root
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        if func == "all_reduce":
            dist.all_reduce(mine[0], op=op, group=group)
            out: Any = mine[0]
        elif func == "reduce":
            dist.reduce(mine[0], dst=root, op=op, group=group)
            out = mine[0] if rank == root else None
        elif func == "reduce_scatter":
            x = mine[0]
            out = x.new_empty((x.shape[0] // size, *x.shape[1:]))
            _single("reduce_scatter_single")(out, x, op=op, group=group)
        elif func in ("all_gather", "all_gather_tensors_with_shapes"):
            x = _rows(mine[0])
            out = x.new_empty((size * x.shape[0], *x.shape[1:]))
            _single("all_gather_single")(out, x, group=group)
            if func != "all_gather":
                out = [_chunk(out, size, i).reshape(mine[0].shape) for i in range(size)]
        elif func == "broadcast":
            sent = inputs[root][0]
            x = sent.clone() if rank == root else torch.empty_like(sent)
            dist.broadcast(x, src=root, group=group)
            out = x
        elif func == "gather":
            parts = [torch.empty_like(mine[0]) for _ in range(size)] if rank == root else None
            dist.gather(mine[0], gather_list=parts, dst=root, group=group)
            out = parts if rank == root else []
        elif func == "scatter":
            like = inputs[root][0]
            out = torch.empty_like(like)
            dist.scatter(out, scatter_list=mine if rank == root else None, src=root, group=group)
        elif case.variant == "single":
            out = torch.empty_like(mine[0])
            dist.all_to_all_single(out, mine[0], group=group)
        else:  # all_to_all of a list: one flat all_to_all_single with splits
            received = [inputs[m][index] for m in members]
            data = torch.cat([t.reshape(-1) for t in mine])
            flat = data.new_empty(sum(t.numel() for t in received))
            sizes_in = [t.numel() for t in mine]
            sizes_out = [t.numel() for t in received]
            dist.all_to_all_single(flat, data, sizes_out, sizes_in, group=group)
            out = [p.reshape(t.shape) for p, t in zip(flat.split(sizes_out), received, strict=True)]
    return as_bools(out)


def as_bools(out: Any) -> Any:
    """``out`` with every bool tensor read as bools (any nonzero byte is True)."""
    if isinstance(out, list):
        return [as_bools(t) for t in out]
    if isinstance(out, torch.Tensor) and out.dtype is torch.bool:
        return out.view(torch.uint8) != 0
    return out
