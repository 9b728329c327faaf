"""Per-rank bodies of ``tests/distributed/test_ndims_gloo.py``: tensors whose number of dims
differs across ranks (0 to 3), through gather, scatter, all_to_all of a list and
all_gather_tensors_with_shapes, compared byte for byte with the answer each rank computes
by itself.

Every rank draws the same cases (hypothesis, derandomized: its seed is a hash of the
drawing function, and nothing else decides what it draws; the ranks compare a digest
before running any). A tensor is a function of its case, sender and receiver alone, so
every rank can rebuild every rank's tensor and knows exactly what it must receive.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge.errors import CollectiveMismatch
from tests.distributed.emulation import emulating

__all__ = ["KINDS", "REGRESSIONS", "Case", "debug_examples", "draw_cases", "run_cases", "tensor_of"]

KINDS = ("gather", "scatter", "all_to_all", "all_gather_tensors_with_shapes")
DTYPES = tuple(
    str(d).removeprefix("torch.")
    for d in (
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
        torch.complex128, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
        torch.bool, getattr(torch, "uint16", None), getattr(torch, "uint32", None),
        getattr(torch, "uint64", None),
    )
    if d is not None
)  # fmt: skip
NDIMS = st.integers(0, 3)


@st.composite
def _shapes(draw: st.DrawFn, count: int) -> tuple[tuple[int, ...], ...]:
    """``count`` shapes of 0 to 3 dims of 0 to 3 each (empty tensors too); three times in
    four, not all with one number of dims when there are several."""
    ndims = draw(st.lists(NDIMS, min_size=count, max_size=count))
    if count > 1 and len(set(ndims)) == 1 and draw(st.integers(0, 3)):
        ndims[-1] = (ndims[-1] + draw(st.integers(1, 3))) % 4
    dims = st.integers(0, 3)
    return tuple(tuple(draw(st.lists(dims, min_size=n, max_size=n))) for n in ndims)


@dataclass(frozen=True)
class Case:
    """One call. ``shapes`` has one shape per group member (the tensor it sends, or for
    scatter the one it receives); for all_to_all, group size squared, sender-major."""

    kind: str
    dtype: str
    members: tuple[int, ...] | None  # None: the world, as group=None
    root: int  # the global rank of dst / src
    shapes: tuple[tuple[int, ...], ...]
    strided: bool  # inputs are non-contiguous views
    seed: int

    def group_ranks(self, world: int) -> tuple[int, ...]:
        return self.members if self.members is not None else tuple(range(world))

    def mixed(self) -> bool:
        """Whether the tensors of this case have different numbers of dims."""
        return len({len(s) for s in self.shapes}) > 1


@st.composite
def _case(draw: st.DrawFn, world: int, kind: str) -> Case:
    subsets = st.lists(st.integers(0, world - 1), min_size=1, max_size=world, unique=True)
    whole = st.none()  # the world, twice as often as a drawn group
    members = draw(st.one_of(whole, whole, subsets.map(lambda m: tuple(sorted(m)))))
    ranks = members if members is not None else tuple(range(world))
    count = len(ranks) ** 2 if kind == "all_to_all" else len(ranks)
    return Case(
        kind=kind,
        dtype=draw(st.sampled_from(DTYPES)),
        members=members,
        root=draw(st.sampled_from(ranks)),
        shapes=draw(_shapes(count)),
        strided=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def draw_cases(count: int, world: int) -> list[Case]:
    """``count`` cases (a multiple of 4: one of each kind per example hypothesis draws) for a
    world of ``world`` ranks: the same list in every process."""
    drawn: list[Case] = []

    @settings(
        max_examples=count // len(KINDS),
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.tuples(*(_case(world, kind) for kind in KINDS)))
    def collect(cases: tuple[Case, ...]) -> None:
        drawn.extend(cases)

    collect()
    return drawn


def tensor_of(case: Case, sender: int, receiver: int, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor group member ``sender`` sends to ``receiver`` (0 for gathers): random
    bytes (NaN payloads, -0.0 and subnormals included), non-contiguous when ``strided``."""
    dtype = getattr(torch, case.dtype)
    width = torch.empty((), dtype=dtype).element_size()
    generator = torch.Generator().manual_seed(case.seed * 1009 + sender * 31 + receiver)
    raw = torch.randint(0, 256, (math.prod(shape) * width,), dtype=torch.uint8, generator=generator)
    if dtype == torch.bool:
        raw &= 1
    tensor = raw.view(dtype).reshape(shape)
    if case.strided:  # every other element of a buffer twice as long
        tensor = torch.stack([tensor, torch.zeros_like(tensor)], dim=-1)[..., 0]
    return tensor


#: Cases the drawn ones found, kept: gloo's own gather has no complex dtypes, and an empty
#: row of an emulated gather may start at an odd byte offset (int16 carried as bytes).
REGRESSIONS = (
    Case("gather", "complex64", (0, 1), 1, ((2, 2, 2), (0,)), strided=False, seed=1),
    Case("gather", "complex128", (0, 1), 0, ((), (3,)), strided=True, seed=2),
    Case("gather", "int16", (0, 1), 0, ((1, 0, 2), (0, 0, 2)), strided=False, seed=3),
)


def _difference(got: Any, want: Any, where: str) -> str | None:
    """Why ``got`` is not exactly ``want`` (None, or lists of tensors: dtype, shape, bytes)."""
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{where}: got {got!r}, want a list of {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = _difference(g, w, f"{where}[{i}]")
            if found:
                return found
        return None
    if want is None:
        return None if got is None else f"{where}: got {got!r}, want None"
    if not isinstance(got, torch.Tensor):
        return f"{where}: got {got!r}, want a tensor"
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{where}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}"
    # Copies with standard strides: a 1-element view may keep a stride of 2, which .view()
    # refuses even though it counts as contiguous.
    as_bytes = [t.new_empty(t.shape).copy_(t).reshape(-1).view(torch.uint8) for t in (got, want)]
    if not torch.equal(*as_bytes):
        return f"{where}: the values differ: got {got}, want {want}"
    return None


def _run_case(case: Case, rank: int, world: int) -> str | None:
    """Run ``case`` on this rank; what went wrong, if anything."""
    group = list(case.members) if case.members is not None else None
    ranks = case.group_ranks(world)
    n, me = len(ranks), (ranks.index(rank) if rank in ranks else None)
    shapes = case.shapes
    sent: Any = None
    if case.kind == "all_to_all":
        mine = [] if me is None else [(me, j, shapes[me * n + j]) for j in range(n)]
        theirs = [] if me is None else [(j, me, shapes[j * n + me]) for j in range(n)]
        sent = [tensor_of(case, *cell) for cell in mine]
        got = idist.all_to_all(sent, group=group)
        want: Any = [tensor_of(case, *cell) for cell in theirs]
        before = [tensor_of(case, *cell) for cell in mine]
    elif case.kind == "scatter":
        every = [tensor_of(case, 0, i, shapes[i]) for i in range(n)]
        sent = every if rank == case.root else None
        got = idist.scatter(sent, src=case.root, group=group)
        want = None if me is None else tensor_of(case, 0, me, shapes[me])
        before = [tensor_of(case, 0, i, shapes[i]) for i in range(n)] if sent else None
    else:
        sent = torch.zeros(()) if me is None else tensor_of(case, me, 0, shapes[me])
        before = sent.clone()
        everyone = [tensor_of(case, i, 0, shapes[i]) for i in range(n)]
        if case.kind == "gather":
            got = idist.gather(sent, dst=case.root, group=group)
            want = everyone if rank == case.root and me is not None else []
        else:
            lists = [list(s) for s in shapes]
            got = idist.all_gather_tensors_with_shapes(sent, lists, group=group)
            want = [sent] if me is None else everyone
    return _difference(got, want, "result") or _difference(sent, before, "input afterwards")


def run_cases(local_rank: int, count: int, emulated_too: bool = True) -> dict[str, Any]:
    """Draw ``count`` cases, check that every rank drew the same, and run each on the live
    model, then (``emulated_too``, on the native model) again through the emulations.

    Returns:
        The digest of the cases, how many there were and how many mix numbers of dims, and
        this rank's failures (``"<path> case <i> <case>: <what>"``).
    """
    rank, world = idist.get_rank(), idist.get_world_size()
    cases = [*REGRESSIONS, *draw_cases(count, world)]
    digest = hashlib.sha256("\n".join(map(repr, cases)).encode()).hexdigest()
    digests = idist.all_gather(digest)
    if len(set(digests)) != 1:
        raise RuntimeError(f"the ranks drew different cases: {digests}")
    failures = []
    paths = [("model", contextlib.nullcontext())]
    if emulated_too:
        paths.append(("emulated", emulating()))
    for path, context in paths:
        with context:
            for i, case in enumerate(cases):
                try:
                    problem = _run_case(case, rank, world)
                except Exception as err:  # recorded: every rank raising alike still fails
                    problem = f"raised {type(err).__name__}: {err}"
                if problem:
                    failures.append(f"{path} case {i} {case}: {problem}")
    idist.barrier()  # a rank outside the last cases' groups must not leave first
    return {
        "digest": digest,
        "cases": len(cases),
        "mixed": sum(c.mixed() for c in cases),
        "kinds": sorted({c.kind for c in cases if c.mixed()}),
        "failures": failures,
    }


def debug_examples(local_rank: int) -> dict[str, Any]:
    """Fixed mixed-dims calls on 2 ranks in the debug mode, which compares every call across
    ranks first: the well-defined ones must pass its comparison and give the exact answer;
    all_gather of a 0-dim and a 3-dim tensor (no concatenation exists) must raise
    `CollectiveMismatch` on every rank."""
    rank = idist.get_rank()
    scalar, cube = torch.tensor(5.0), torch.arange(24.0).reshape(2, 3, 4)
    mine = scalar if rank == 0 else cube
    seen: dict[str, Any] = {
        "gather": idist.gather(mine, dst=1),
        "with_shapes": idist.all_gather_tensors_with_shapes(mine, [[], [2, 3, 4]]),
        "scatter": idist.scatter([scalar, cube] if rank == 0 else None, src=0),
        "all_to_all": idist.all_to_all([scalar + rank, cube + rank][:: 1 if rank == 0 else -1]),
    }
    try:
        idist.all_gather(mine)
    except CollectiveMismatch as err:
        seen["all_gather"] = str(err)
    else:
        seen["all_gather"] = "no error"
    return seen
