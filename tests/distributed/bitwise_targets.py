"""The per-rank body of the differential tests of the bitwise reductions: ``reduce`` and
``reduce_scatter`` with AND / OR against ``all_reduce``'s answer and the exact one.

NCCL has no bitwise reduction: ``all_reduce`` folds AND / OR from an all-gather there, and
``reduce`` and ``reduce_scatter`` take the same route (``algorithms/fold.backend_op``),
so every reduction takes the same ops on every backend. Every rank draws the same cases
(``tests/differential/tensor_cases.py``, limited to AND / OR: every (dtype, op) pair of both
functions, then hypothesis's draws) and runs them in lockstep. Each result is checked
against the exact answer by the harness of ``differential_tensor_targets`` (layouts, groups,
non-members, the buffers around the inputs), then reduce's result on ``dst`` and
reduce_scatter's chunk against all_reduce's of the same inputs, bit for bit. On the native
model every case runs twice: by the backend's own rule, and by NCCL's
(``emulation.as_on_nccl``), so that gloo ranks on a CPU take NCCL's route too.
"""

from __future__ import annotations

import traceback
from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import torch

import distbridge as idist
from distbridge.models import NativeModel
from tests.differential import lockstep
from tests.differential import tensor_cases as tc
from tests.differential import tensor_inputs as ti
from tests.differential import tensor_reference as ref
from tests.distributed import differential_tensor_targets as targets
from tests.distributed.emulation import as_on_nccl

__all__ = ["BITWISE", "FUNCS", "check_case", "draw_bitwise_cases", "run_bitwise_differential"]

BITWISE = ("AND", "OR")
FUNCS = ("reduce", "reduce_scatter")
_SPELLINGS = {"AND": ("AND", "band", "and", "BAND"), "OR": ("OR", "bor", "or", "BOR")}


def draw_bitwise_cases(world: int, per_func: int) -> list[tc.TensorCase]:
    """``per_func`` cases of each function (at least one per (dtype, op) pair of AND / OR),
    the same list in every process; the pairs and spellings go round."""
    every_pair = tc.pairs(BITWISE)
    cases: list[tc.TensorCase] = []
    turn = 0
    for func in FUNCS:
        drawn = lockstep.draw_examples(
            tc.tensor_case(func, world, BITWISE), max(per_func, len(every_pair))
        )
        for case in drawn:
            dtype, op = every_pair[turn % len(every_pair)]
            spelling = _SPELLINGS[op][turn // len(every_pair) % len(_SPELLINGS[op])]
            cases.append(replace(case, dtype=dtype, op=op, spelling=spelling))
            turn += 1
    return cases


def _against_all_reduce(case: tc.TensorCase, device: torch.device | None) -> list[str]:
    """reduce's result on ``dst`` (reduce_scatter's chunk on every member) against the same
    chunk of all_reduce's result on the same inputs, and all_reduce's against the exact one."""
    rank, world = idist.get_rank(), idist.get_world_size()
    members = case.members(world)
    group = targets.group_argument(case)
    inputs = ti.build_inputs(case, world)
    mine = inputs[rank][0].to(device) if device is not None else inputs[rank][0]
    all_reduced = idist.all_reduce(mine.clone(), op=case.spelling, group=group)
    if case.func == "reduce":
        got = idist.reduce(mine.clone(), dst=case.root, op=case.spelling, group=group)
    else:
        got = idist.reduce_scatter(mine.clone(), op=case.spelling, group=group)
    if rank not in members or (case.func == "reduce" and rank != case.root):
        return []  # what these ranks get back the harness checks
    assert case.op is not None
    exact = ref.reduce_exact([inputs[m][0] for m in members], case.op)
    want = all_reduced.detach().cpu()
    if case.func == "reduce_scatter":
        rows = want.shape[0] // len(members)
        want = want.narrow(0, members.index(rank) * rows, rows)
    problems = []
    found = ref.difference(all_reduced.detach().cpu(), exact, exact_bits=True, where="all_reduce")
    if found:
        problems.append(f"{found}, not the exact {ref.describe(exact)}")
    found = ref.difference(got.detach().cpu(), want, exact_bits=True, where=case.func)
    if found:
        problems.append(f"{found}, unlike all_reduce's {ref.describe(want)}")
    return problems


def check_case(case: tc.TensorCase, device: torch.device | None = None) -> list[targets.Mismatch]:
    """Run ``case`` on this rank: against the exact answer (the harness), then against
    all_reduce's answer. Its mismatches (label, expected, got)."""
    found, _ = targets.run_case(case, device)
    where = f"rank {idist.get_rank()} of {idist.get_world_size()} ({idist.model_name()})"
    found += [(case.label(), "", f"{where}: {p}") for p in _against_all_reduce(case, device)]
    return found


def rules() -> dict[str, Any]:
    """The rules every case runs under on the active model: its own, and on the native model
    NCCL's too (``as_on_nccl``), each as a context factory."""
    own: dict[str, Any] = {"own": nullcontext}
    native = idist.model_name() == NativeModel.name
    return {**own, "nccl-rule": as_on_nccl} if native and idist.backend() != "nccl" else own


def run_bitwise_differential(
    local_rank: int,
    store_path: str,
    per_func: int = 18,
    case_timeout: float = 30.0,
    *,
    on_device: bool = False,
) -> dict[str, Any]:
    """Draw the cases for this world and run them in lockstep with the other ranks, under
    every rule of `rules`; a JSON-friendly report (``mismatches``, ``cases``, ``digest``,
    ``rules``, ``seen``: how often each function, dtype and op ran on this rank).

    Args:
        local_rank: unused (``spawn`` passes it).
        store_path: a path prefix every rank can reach, not used before (one FileStore per
            rule keeps the ranks in step).
        per_func: cases per function, at least one per (dtype, op) pair (18).
        case_timeout: seconds every rank gets to finish one case.
        on_device: build the tensors on ``idist.device()`` instead of the CPU.
    """
    del local_rank
    world = idist.get_world_size()
    cases = draw_bitwise_cases(world, per_func)
    device = idist.device() if on_device else None
    mismatches: list[targets.Mismatch] = []
    seen: Counter[str] = Counter()
    ran = []
    for name, rule in rules().items():
        context: AbstractContextManager[Any] = rule()
        with context:

            def run_one(case: tc.TensorCase, name: str = name) -> str:
                try:
                    found = check_case(case, device)
                except Exception:  # the harness itself failed: as much a failure
                    error = traceback.format_exc(limit=-4)
                    found = [(case.label(), "", f"rank {idist.get_rank()}: {error}")]
                mismatches.extend((f"[{name}] {label}", e, g) for label, e, g in found)
                seen[f"{case.func}:{case.dtype}:{case.op}"] += 1
                return "; ".join(got for _, _, got in found)

            lockstep.run_in_lockstep(
                cases, run_one, f"{store_path}.{name}", case_timeout, lambda c: c.label()
            )
        ran.append(name)
    return {
        "model": idist.model_name(),
        "world": world,
        "rank": idist.get_rank(),
        "cases": len(cases),
        "digest": lockstep.digest(cases),
        "mismatches": mismatches,
        "rules": ran,
        "seen": dict(seen),
    }
