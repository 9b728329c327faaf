"""Every reduction takes the bitwise ops on every backend: NCCL has none (torch raises
``ValueError: Cannot use ReduceOp.BAND with NCCL``), so all_reduce, reduce and reduce_scatter
all fold AND / OR from an all-gather there, by one rule (``fold.backend_op``).

NCCL cannot run on a CPU; its rule is a plain function of the backend's name, and below a
gloo world of one reduces by it while torch's ops refuse the bitwise ReduceOps as NCCL does.
The serial model runs the differential cases of ``tests/distributed/bitwise_targets.py``
(reduce / reduce_scatter against all_reduce and the exact answer); gloo runs them on 2 and
3 ranks (``tests/distributed/test_bitwise_reductions_gloo.py``), Horovod and XLA in
``test_differential_engines.py``, NCCL in ``test_nccl.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge import _state
from distbridge.algorithms.fold import NO_BITWISE, backend_op
from distbridge.models.native import ops
from tests.differential import tensor_cases as tc
from tests.distributed import bitwise_targets
from tests.distributed.emulation import as_on_nccl

pytestmark = pytest.mark.timeout(120)

INTEGERS = [d for d in tc.DTYPES.values() if "AND" in tc.ops_for(d)]  # ints and bool
REFUSED = (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR)
REDUCTIONS: dict[str, Callable[[torch.Tensor, str], Any]] = {
    "all_reduce": lambda x, op: idist.all_reduce(x, op=op),
    "reduce": lambda x, op: idist.reduce(x, dst=0, op=op),
    "reduce_scatter": lambda x, op: idist.reduce_scatter(x, op=op),
}


# ---- the rule, a plain function of the backend ---------------------------------------------


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
@pytest.mark.parametrize("op", ["AND", "OR"])
def test_nccl_folds_the_bitwise_ops_and_gloo_runs_them(dtype: torch.dtype, op: str) -> None:
    assert "nccl" in NO_BITWISE
    assert backend_op("nccl", dtype, op) is None  # None: folded from an all-gather
    assert ops.torch_ops("nccl")[dtype, op] is None
    assert backend_op("gloo", dtype, op) == op
    assert ops.torch_ops("gloo")[dtype, op] == getattr(dist.ReduceOp, f"B{op}")


@pytest.mark.parametrize("dtype", list(tc.DTYPES.values()), ids=str)
@pytest.mark.parametrize("op", ["SUM", "PRODUCT", "MIN", "MAX", "AVG"])
def test_nccl_runs_every_other_op_as_c10d_does(dtype: torch.dtype, op: str) -> None:
    assert (
        backend_op("nccl", dtype, op)
        == backend_op("gloo", dtype, op)
        == backend_op(None, dtype, op)
    )


# ---- the route, on a gloo world of one that refuses bitwise ops as NCCL does ------------------


@pytest.fixture
def like_nccl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A gloo world of one reducing by NCCL's rule, whose torch ops raise NCCL's ValueError
    for a bitwise ReduceOp; yields the list of the torch ops called (with their ReduceOp)."""
    calls: list[str] = []

    def like_nccl_op(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            op = kwargs.get("op")
            calls.append(name if op is None else f"{name}({getattr(op, 'name', op)})")
            if op is not None and any(op == refused for refused in REFUSED):
                raise ValueError(f"Cannot use {op} with NCCL")
            return fn(*args, **kwargs)

        return call

    idist.initialize("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        with as_on_nccl():
            monkeypatch.setattr(dist, "all_reduce", like_nccl_op("all_reduce", dist.all_reduce))
            monkeypatch.setattr(dist, "reduce", like_nccl_op("reduce", dist.reduce))
            for name in ("reduce_scatter_single", "all_gather_single"):
                monkeypatch.setattr(ops, name, like_nccl_op(name, getattr(ops, name)))
            yield calls
    finally:
        monkeypatch.undo()
        idist.finalize()


def _route(calls: list[str], func: str, x: torch.Tensor, op: str) -> tuple[list[str], Any]:
    calls.clear()
    out = REDUCTIONS[func](x, op)
    return list(calls), out


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("op", ["AND", "OR", "BAND", "bor"])
def test_on_nccl_reduce_and_reduce_scatter_fold_as_all_reduce_does(
    like_nccl: list[str], dtype: torch.dtype, op: str
) -> None:
    x = torch.tensor([5, 0, 3, 1], dtype=torch.int64).to(dtype)
    routes = {}
    for func in REDUCTIONS:
        routes[func], out = _route(like_nccl, func, x.clone(), op)
        assert torch.equal(out, x), (func, out)  # a world of one: the input itself
    assert routes["all_reduce"] == ["all_gather_single"], routes  # the fold
    assert routes["reduce"] == routes["all_reduce"], routes
    assert routes["reduce_scatter"] == routes["all_reduce"], routes


def test_on_nccl_other_ops_still_run_torch_s_own(like_nccl: list[str]) -> None:
    # The fake is not blind: SUM and MAX reach NCCL's own reduce / all_reduce / reduce_scatter.
    x = torch.tensor([5, 0, 3, 1], dtype=torch.int32)
    assert _route(like_nccl, "reduce", x.clone(), "SUM")[0] == ["reduce(SUM)"]
    assert _route(like_nccl, "all_reduce", x.clone(), "MAX")[0] == ["all_reduce(MAX)"]
    scattered = _route(like_nccl, "reduce_scatter", x.clone(), "SUM")[0]
    assert scattered == ["reduce_scatter_single(SUM)"]


def test_every_drawn_bitwise_case_on_nccl_s_route(like_nccl: list[str]) -> None:
    cases = bitwise_targets.draw_bitwise_cases(1, 18)
    assert {(c.func, c.dtype, c.op) for c in cases} == {
        (f, d, o) for f in bitwise_targets.FUNCS for d, o in tc.pairs(bitwise_targets.BITWISE)
    }
    found = [m for case in cases for m in bitwise_targets.check_case(case)]
    assert not found, "\n".join(" | ".join(m) for m in found[:20])
    assert not any(c.endswith(("(BAND)", "(BOR)")) for c in like_nccl), like_nccl


def test_compiled_bitwise_ops_fold_on_nccl_as_eager_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside torch.compile the functional collectives take the same rule: on NCCL, AND / OR
    are folded from an all-gather, never sent as "band" / "bor" (which NCCL refuses)."""
    idist.initialize("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        monkeypatch.setattr(_state.current(), "backend", lambda: "nccl")
        asked: list[str] = []
        real = funcol.all_reduce

        def like_nccl(tensor: torch.Tensor, op: str, group: Any, tag: str = "") -> torch.Tensor:
            asked.append(op)
            if op in ("band", "bor"):
                raise ValueError(f"Cannot use ReduceOp.{op.upper()} with NCCL")
            return real(tensor, op, group, tag)

        monkeypatch.setattr(funcol, "all_reduce", like_nccl)
        for op in ("OR", "AND", "SUM"):
            step = torch.compile(
                lambda x, op=op: idist.all_reduce(x, op), fullgraph=True, backend="eager"
            )
            x = torch.tensor([5, 0, 3, 1], dtype=torch.int32)
            assert torch.equal(step(x.clone()), x), op  # a world of one: the input itself
            torch.compiler.reset()
        assert "band" not in asked and "bor" not in asked, asked
    finally:
        monkeypatch.undo()
        idist.finalize()


# ---- the serial model, hypothesis-drawn --------------------------------------------------------


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.sampled_from(bitwise_targets.FUNCS).flatmap(
        lambda func: tc.tensor_case(func, 1, bitwise_targets.BITWISE)
    )
)
def test_serial_reduce_matches_all_reduce_and_the_exact_answer(case: tc.TensorCase) -> None:
    assert idist.model_name() == "serial"
    found = bitwise_targets.check_case(case)
    assert not found, "\n".join(" | ".join(m) for m in found)
