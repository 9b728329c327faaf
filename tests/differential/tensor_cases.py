"""Valid inputs for the tensor and number collectives, drawn by hypothesis.

A case is plain, picklable data, drawn alike on every rank (derandomized): the function, the
dtype and op, the shapes and layout of every rank's tensors, a seed from which every rank
rebuilds every rank's tensors (``tensor_inputs.build_inputs``), the root, the group and a
variant (out=, same_shape, safe_mode, ...). A number case holds every rank's Python value
itself. Each rank can so compute the exact answer locally (``tensor_reference``).

Values make the exact answer independent of the reduction order: integers take any bits
(sums and products wrap, which is exact in any order), floats are halves small enough to add
and multiply exactly even in bfloat16, with NaN / inf / -0.0 where IEEE says what they give
whatever the order, and the inputs of an average are chosen so that it divides exactly.
Gathers, broadcasts, scatters and all-to-alls move random bits (NaN payloads included).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

import distbridge as idist
from tests.differential.lockstep import draw_examples

__all__ = [
    "DIFFERENT_NDIMS_PER_RANK",
    "DTYPES",
    "FUNCS",
    "NUMBER_FUNCS",
    "OPS",
    "PRODUCT_FLOATS",
    "REDUCTIONS",
    "Case",
    "NumberCase",
    "TensorCase",
    "case_count",
    "draw_cases",
    "model_ops",
    "number_case",
    "ops_for",
    "tensor_case",
]

#: gather, scatter, all_to_all of a list and all_gather_tensors_with_shapes take tensors with
#: a different number of dims on different ranks (issue 16): their uneven cases draw each
#: tensor's ndim apart. Off: one ndim per case.
DIFFERENT_NDIMS_PER_RANK = True
#: Float MIN / MAX cases draw NaN and -0.0 too: distbridge defines them on every backend as
#: IEEE 754-2019's minimum / maximum (a NaN wins, -0.0 < 0.0; ``algorithms/carriers.py``),
#: where gloo alone keeps whichever operand comes first. Off: no NaN or -0.0 in them.
NAN_AND_SIGNED_ZERO_IN_MIN_MAX = True

#: The dtypes every model must send and reduce: the table ``safe_mode`` and the shape rows
#: share (docs/differences.md, "Nothing received is evaluated").
DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float16, torch.bfloat16, torch.float32, torch.float64,
        torch.complex64, torch.complex128,
        torch.int8, torch.int16, torch.int32, torch.int64,
        torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool,
    )
}  # fmt: skip
OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AND", "OR", "AVG")
_SPELLINGS = {
    "SUM": ("SUM", "sum", "Sum"),
    "PRODUCT": ("PRODUCT", "product", "prod", "PROD"),
    "MIN": ("MIN", "min"),
    "MAX": ("MAX", "Max"),
    "AND": ("AND", "and", "BAND"),
    "OR": ("OR", "or", "bor"),
    "AVG": ("AVG", "avg", "AVERAGE", "mean"),
}
REDUCTIONS = ("all_reduce", "reduce", "reduce_scatter")
MOVES = ("all_gather", "broadcast", "gather", "scatter", "all_to_all")
FUNCS = (*REDUCTIONS, *MOVES, "all_gather_tensors_with_shapes")
NUMBER_FUNCS = ("all_reduce", "reduce", "all_gather", "broadcast", "gather")
LAYOUTS = ("contiguous", "transposed", "offset", "strided", "unit_strides", "expanded")
#: The variants of the functions that have more than "plain" (see ``TensorCase.variant``).
VARIANTS = {
    "gather": ("plain", "same_shape"),
    "scatter": ("plain", "out"),
    "all_to_all": ("plain", "same_shape", "chunks", "single"),
    "broadcast": ("plain", "safe_none", "safe_tensor"),
}
MAX_DIM = 4
_ONE_SHAPE = ("all_reduce", "reduce", "all_gather", "broadcast")  # one shape on every rank


def ops_for(dtype: torch.dtype) -> tuple[str, ...]:
    """The reductions defined for ``dtype`` (``all_reduce``'s docstring)."""
    if dtype.is_complex:
        return ("SUM", "PRODUCT", "AVG")
    if dtype.is_floating_point:
        return ("SUM", "PRODUCT", "MIN", "MAX", "AVG")
    return ("SUM", "PRODUCT", "MIN", "MAX", "AND", "OR")


def model_ops() -> frozenset[str]:
    """The reductions the active model accepts: its documented ``reduce_ops`` (docs/plugins.md),
    found through ``registered_computation_models`` by ``model_name()``."""
    for model in idist.registered_computation_models:
        if model.name == idist.model_name():
            return frozenset(model.reduce_ops)
    raise LookupError(f"no registered model is named {idist.model_name()!r}")


def pairs(ops: Sequence[str] = OPS) -> list[tuple[str, str]]:
    """Every (dtype name, op) pair a tensor reduction takes, limited to ``ops``, the ops in
    turn (so that a few consecutive pairs hold every op)."""
    by_op = [[(name, op) for name, d in DTYPES.items() if op in ops_for(d)] for op in OPS]
    by_op = [found for op, found in zip(OPS, by_op, strict=True) if op in ops]
    turns = max(map(len, by_op), default=0)
    return [found[i] for i in range(turns) for found in by_op if i < len(found)]


# ---- cases -------------------------------------------------------------------------------------


def _members(group: tuple[int, ...] | None, world: int) -> list[int]:
    return sorted(group) if group is not None else list(range(world))


def _group_text(group: tuple[int, ...] | None, form: str) -> str:
    if group is None:
        return ""
    shown = {"list": str(list(group)), "tuple": str(group)}.get(form, f"new_group({list(group)})")
    return f", group={shown}"


@dataclass(frozen=True)
class TensorCase:
    """One call of a tensor collective, every rank's arguments included."""

    func: str
    dtype: str
    op: str | None  # canonical; ``spelling`` is what is passed
    spelling: str | None
    #: per global rank, the shapes of the tensors it passes (scatter: the source's list; a
    #: broadcast with ``safe_tensor``: other ranks' placeholders, of dtype uint8)
    shapes: tuple[tuple[tuple[int, ...], ...], ...]
    layouts: tuple[str, ...]  # per global rank
    seed: int
    specials: bool  # NaN / inf / -0.0 (reductions) or extreme bit patterns (moves)
    root: int | None  # src / dst
    group: tuple[int, ...] | None  # as passed, order kept
    group_form: str  # "list", "tuple" or "new_group"
    #: "plain", or: gather / all_to_all "same_shape"; scatter "out"; all_to_all "chunks"
    #: (``list(x.chunk(n))`` of one tensor) or "single" (one tensor, split along dim 0);
    #: broadcast with safe_mode, the others passing None ("safe_none") or any tensor
    variant: str
    repeat: bool  # call twice (the second call may take a fast path)

    def members(self, world: int) -> list[int]:
        return _members(self.group, world)

    def label(self) -> str:
        op = f", op={self.spelling!r}" if self.op else ""
        root = f", {'dst' if self.func in ('reduce', 'gather') else 'src'}={self.root}"
        variant = "" if self.variant == "plain" else f", {self.variant}"
        shapes = ";".join(",".join(str(list(s)) for s in r) for r in self.shapes)
        return (
            f"{self.func}[{self.dtype}{op}{root if self.root is not None else ''}"
            f"{_group_text(self.group, self.group_form)}{variant}, shapes={shapes}, "
            f"layouts={','.join(self.layouts)}, seed={self.seed}"
            f"{', specials' if self.specials else ''}{', twice' if self.repeat else ''}]"
        )


@dataclass(frozen=True)
class NumberCase:
    """One call of a collective with Python values (int, float, bool, str, Path) per rank."""

    func: str
    op: str | None
    spelling: str | None
    values: tuple[Any, ...]  # per global rank; None only as a safe_mode placeholder
    root: int | None
    group: tuple[int, ...] | None
    group_form: str
    safe_mode: bool

    def members(self, world: int) -> list[int]:
        return _members(self.group, world)

    def label(self) -> str:
        op = f", op={self.spelling!r}" if self.op else ""
        root = "" if self.root is None else f", {'dst' if self.func != 'broadcast' else 'src'}="
        root += "" if self.root is None else str(self.root)
        safe = ", safe_mode=True" if self.safe_mode else ""
        return (
            f"{self.func}[{self.values!r}{op}{root}{_group_text(self.group, self.group_form)}"
            f"{safe}]"
        )


Case = TensorCase | NumberCase


# ---- strategies --------------------------------------------------------------------------------

_SEEDS = st.integers(0, 2**32 - 1)


@st.composite
def _group(draw: st.DrawFn, world: int) -> tuple[tuple[int, ...] | None, str]:
    """None, or a non-empty subset of the ranks in any order, passed in one of three forms."""
    if draw(st.integers(0, 2)) == 0:
        return None, "list"
    ranks = draw(st.permutations(range(world)))
    size = draw(st.integers(1, world))
    return tuple(ranks[:size]), draw(st.sampled_from(("list", "tuple", "new_group")))


def _dims(ndim: int) -> st.SearchStrategy[tuple[int, ...]]:
    return st.tuples(*[st.sampled_from((0, 1, 1, 2, 2, 3, 4)) for _ in range(ndim)])


@st.composite
def _shape(draw: st.DrawFn, *, least: int = 0, dim0_multiple: int = 0) -> tuple[int, ...]:
    ndim = draw(st.integers(max(least, 0), MAX_DIM))
    dims = draw(_dims(ndim))
    if dim0_multiple and ndim:
        dims = (dim0_multiple * draw(st.sampled_from((0, 1, 1, 2))), *dims[1:])
    return dims


@st.composite
def _uneven(draw: st.DrawFn, count: int, ndim: int | None) -> tuple[tuple[int, ...], ...]:
    """``count`` shapes of ``ndim`` dims (each its own ndim if None)."""
    if ndim is None:
        return tuple(draw(_shape()) for _ in range(count))
    return tuple(draw(_dims(ndim)) for _ in range(count))


def _spelling(draw: st.DrawFn, op: str) -> str:
    return draw(st.sampled_from(_SPELLINGS[op]))


def _written(func: str, variant: str, rank: int, root: int | None, members: list[int]) -> bool:
    """Whether the call writes its result into ``rank``'s tensor (which then cannot be an
    expanded one): all_reduce's members, reduce's ``dst``, a broadcast's receivers."""
    if rank not in members:
        return False
    if func == "reduce":
        return rank == root
    return func == "all_reduce" or (func == "broadcast" and variant == "plain" and rank != root)


@st.composite
def tensor_case(
    draw: st.DrawFn, func: str, world: int, ops: Sequence[str] = OPS, variant: str | None = None
) -> TensorCase:
    """A valid call of tensor collective ``func`` in a world of ``world`` ranks, with ops
    limited to ``ops``, in ``variant`` (default: any of the function's)."""
    group, form = draw(_group(world))
    members = _members(group, world)
    size = len(members)
    if variant is None:
        variant = draw(st.sampled_from(VARIANTS.get(func, ("plain",))))
    if func in REDUCTIONS:
        dtype, op = draw(st.sampled_from(pairs(ops)))
        spelling = _spelling(draw, op)
    else:
        dtype, op, spelling = draw(st.sampled_from(sorted(DTYPES))), None, None
    rooted = func in ("reduce", "broadcast", "gather", "scatter")
    root = draw(st.sampled_from(members)) if rooted else None
    ndim = None if DIFFERENT_NDIMS_PER_RANK else draw(st.integers(0, MAX_DIM))
    if func == "reduce_scatter" or variant == "single":  # dim 0 splits into group-size chunks
        one = draw(_shape(least=1, dim0_multiple=size))
        shapes = tuple((one,) for _ in range(world))
    elif variant == "chunks":  # list(x.chunk(size)) of one tensor: every chunk has a dim 0
        one = draw(_shape(least=1))
        one = (max(one[0], 1), *one[1:])
        shapes = tuple((one,) * size for _ in range(world))
    elif variant in ("same_shape", "out") or func in _ONE_SHAPE:
        one = draw(_shape()) if ndim is None else draw(_dims(ndim))
        if func == "scatter":
            shapes = tuple((one,) * size if r == root else () for r in range(world))
        else:
            shapes = tuple((one,) * (size if func == "all_to_all" else 1) for _ in range(world))
    elif func == "scatter":  # uneven from here on
        sent = draw(_uneven(size, ndim))
        shapes = tuple(sent if r == root else () for r in range(world))
    elif func == "all_to_all":
        shapes = tuple(draw(_uneven(size, ndim)) for _ in range(world))
    else:  # gather, all_gather_tensors_with_shapes: one shape per rank
        shapes = tuple((s,) for s in draw(_uneven(world, ndim)))
    if variant == "safe_tensor":  # the other ranks' placeholders: any shape
        shapes = tuple(s if r == root else (draw(_shape()),) for r, s in enumerate(shapes))
    written = [_written(func, variant, r, root, members) for r in range(world)]
    layouts = tuple(draw(st.sampled_from(LAYOUTS[:-1] if w else LAYOUTS)) for w in written)
    return TensorCase(
        func=func,
        dtype=dtype,
        op=op,
        spelling=spelling,
        shapes=shapes,
        layouts=layouts,
        seed=draw(_SEEDS),
        specials=draw(st.booleans()),
        root=root,
        group=group,
        group_form=form,
        variant=variant,
        repeat=draw(st.integers(0, 3)) == 0,
    )


_HALVES = [k / 2 for k in range(-16, 17)]
PRODUCT_FLOATS = [0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, -2.0, 3.0, -3.0, 4.0, -4.0]
_FLOAT_SPECIALS = [math.nan, math.inf, -math.inf, -0.0]
_INT64 = st.integers(-(2**63), 2**63 - 1)


def _float_bits() -> st.SearchStrategy[float]:
    """Any float64, NaN payloads included (a received float must keep every bit)."""
    return st.integers(0, 2**64 - 1).map(
        lambda b: float(np.array([b], dtype=np.uint64).view(np.float64)[0])
    )


def _number_values(kind: str, op: str) -> st.SearchStrategy[Any]:
    """Values of ``kind`` whose reduction with ``op`` is exact in any order and fits."""
    if kind == "bool":
        return st.booleans()
    if kind == "int":
        bound = {"SUM": 2**40, "AVG": 2**40, "PRODUCT": 2**20}.get(op)
        return st.integers(-bound, bound) if bound else _INT64
    if op in ("MIN", "MAX"):
        extra = [math.inf, -math.inf] + ([math.nan, -0.0] if NAN_AND_SIGNED_ZERO_IN_MIN_MAX else [])
        return st.sampled_from(_HALVES + extra)
    pool = PRODUCT_FLOATS if op == "PRODUCT" else _HALVES
    return st.sampled_from(pool + _FLOAT_SPECIALS)


def _average_exactly(values: list[Any], members: list[int]) -> list[Any]:
    """Shift the last member's value so that the members' sum divides by their number (a
    finite float average is then exact, however it is divided)."""
    kind = type(values[members[0]])
    if kind is bool or not all(math.isfinite(values[m]) for m in members):
        return values
    scale = 2 if kind is float else 1  # floats are halves
    total = sum(round(values[m] * scale) for m in members)
    values[members[-1]] -= kind((total % len(members)) / scale)
    return values


_TEXT = st.one_of(
    st.text(max_size=6),
    st.text(min_size=20, max_size=60),  # past the 48 bytes inline in the header (UTF-8)
)
_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "int": _INT64,
    "float": st.one_of(st.floats(), _float_bits()),
    "bool": st.booleans(),
    "str": _TEXT,
    "Path": _TEXT.map(PurePosixPath),
}
#: The kinds a gather may mix (numbers or text, never both); a broadcast may mix any.
_CATEGORIES = {"number": ("int", "float", "bool"), "text": ("str", "Path")}


def number_buckets(func: str) -> list[tuple[str, bool]]:
    """The (kind, safe_mode) pairs `draw_cases` splits ``func``'s number cases into: for a
    reduction the kind of every value; else one kind for every value, or a mix of numbers,
    of texts or (a broadcast) of anything."""
    if func in ("all_reduce", "reduce"):
        return [(kind, False) for kind in _CATEGORIES["number"]]
    kinds = [*_VALUES, "numbers", "texts"] + ["any"] * (func == "broadcast")
    return [(kind, safe) for kind in kinds for safe in (False, True)[: 1 + (func == "broadcast")]]


_MIXES = {"numbers": _CATEGORIES["number"], "texts": _CATEGORIES["text"], "any": tuple(_VALUES)}


@st.composite
def number_case(
    draw: st.DrawFn,
    func: str,
    world: int,
    ops: Sequence[str] = OPS,
    kind: str | None = None,
    safe: bool | None = None,
) -> NumberCase:
    """A valid call of ``func`` with a Python number, str or Path on every rank: values of
    ``kind`` (a key of ``_VALUES`` or ``_MIXES``; drawn if None), for a broadcast with
    ``safe_mode=safe`` (drawn if None)."""
    group, form = draw(_group(world))
    members = _members(group, world)
    root = None
    safe_mode = False
    op = spelling = None
    if func in ("all_reduce", "reduce"):
        kind = kind or draw(st.sampled_from(_CATEGORIES["number"]))
        allowed = [o for o in OPS if o in ops and not (kind == "float" and o in ("AND", "OR"))]
        op = draw(st.sampled_from(allowed))
        spelling = _spelling(draw, op)
        values = [draw(_number_values(kind, op)) for _ in range(world)]
        if op == "AVG":
            values = _average_exactly(values, members)
        if func == "reduce":
            root = draw(st.sampled_from(members))
    else:
        kind = kind or draw(st.sampled_from([k for k, _ in number_buckets(func)]))
        kinds = _MIXES.get(kind, (kind,))
        values = [draw(_VALUES[draw(st.sampled_from(kinds))]) for _ in range(world)]
        root = draw(st.sampled_from(members)) if func != "all_gather" else None
        if func == "broadcast":
            safe_mode = draw(st.booleans()) if safe is None else safe
            if safe_mode:
                values = [
                    v if r == root or draw(st.booleans()) else None for r, v in enumerate(values)
                ]
    return NumberCase(
        func=func,
        op=op,
        spelling=spelling,
        values=tuple(values),
        root=root,
        group=group,
        group_form=form,
        safe_mode=safe_mode,
    )


def _wanted(func: str, per_func: int, ops: Sequence[str], full: bool) -> int:
    if not full:
        return per_func
    return max(per_func, len(pairs(ops)) if func in REDUCTIONS else len(DTYPES))


def case_count(per_func: int, ops: Sequence[str] = OPS, full: bool = True) -> int:
    """How many cases `draw_cases` draws."""
    total = sum(-(-per_func // len(b)) * len(b) for b in map(number_buckets, NUMBER_FUNCS))
    for func in FUNCS:
        wanted = _wanted(func, per_func, ops, full)
        variants = len(VARIANTS.get(func, ("plain",)))
        total += -(-wanted // variants) * variants
    return total


def draw_cases(
    world: int, per_func: int, ops: Sequence[str] = OPS, full: bool = True
) -> list[Case]:
    """The cases of one run, the same list in every process: ``per_func`` per tensor function
    (split between its variants) and per number function (split between kinds). ``full``: a
    tensor reduction gets at least one case per (dtype, op) pair and a move one per dtype.
    Drawn cases get the pairs and dtypes in turn."""
    cases: list[Case] = []
    every_pair, dtypes = pairs(ops), sorted(DTYPES)
    turn = 0  # pairs and dtypes go round, on from one function to the next
    for func in FUNCS:
        wanted = _wanted(func, per_func, ops, full)
        variants = VARIANTS.get(func, ("plain",))
        each = -(-wanted // len(variants))
        drawn = [
            case
            for variant in variants
            for case in draw_examples(tensor_case(func, world, ops, variant), each)
        ]
        for case in drawn:
            turn += 1
            if func in REDUCTIONS:
                dtype, op = every_pair[turn % len(every_pair)]
                spelling = _SPELLINGS[op][turn % len(_SPELLINGS[op])]
                cases.append(replace(case, dtype=dtype, op=op, spelling=spelling))
            else:
                cases.append(replace(case, dtype=dtypes[turn % len(dtypes)]))
    for func in NUMBER_FUNCS:
        buckets = number_buckets(func)
        for kind, safe in buckets:
            each = -(-per_func // len(buckets))
            cases.extend(draw_examples(number_case(func, world, ops, kind, safe), each))
    return cases
