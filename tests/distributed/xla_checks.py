"""XLA-specific per-rank checks, and ``run_all``: the backend-agnostic checks, then these.

Like ``checks.py``, each check uses the facade and holds for any world size, and raises
only after its collectives. Every rank feeds the same values, so the expected results are
known without trusting a collective.
"""

from __future__ import annotations

import math
import os
import traceback
from pathlib import Path
from typing import Any

import torch

import distbridge as idist
from tests.distributed import barrier_checks, checks
from tests.distributed.call_counts import counting

#: Every dtype torch_xla can put on a device, plus complex128 (which torch_xla 2.9 cannot
#: move exactly: distbridge carries it as bytes).
DTYPES = (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
    torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2, torch.complex32,
)  # fmt: skip
#: Dtypes torch_xla cannot put on a device at all: only CPU tensors of them are checked.
NOT_ON_DEVICE = (torch.complex32,)


def _model() -> Any:
    from distbridge._state import current

    return current()


def _xla() -> torch.device:
    import torch_xla

    return torch.device(torch_xla.device())


def _bits(t: torch.Tensor) -> list[int]:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).tolist()


def _extremes(dtype: torch.dtype) -> torch.Tensor:
    """Values whose bits a lossy path would change: extremes, -0.0, NaN, 1 + eps."""
    if dtype is torch.bool:
        return torch.tensor([True, False, True])
    if dtype.is_complex:
        real = _extremes(getattr(torch, torch.finfo(dtype).dtype))
        return torch.complex(real, real.flip(0))
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        values = [info.max, info.min, info.tiny, 1 + info.eps, -0.0, math.nan]
        return torch.tensor(values, dtype=torch.float64).to(dtype)
    info_i = torch.iinfo(dtype)
    return torch.tensor([info_i.max, info_i.min, 1, 0], dtype=dtype)


def _small(dtype: torch.dtype) -> torch.Tensor:
    """Small integers: sums and products of every rank's copy are exact in any order."""
    return torch.tensor([1, 0, 1, 1]).to(dtype)


def check_xla_queries(tmp: Path) -> None:
    import torch_xla.runtime as xr

    assert idist.model_name() == "xla-dist" and idist.backend() == "xla-tpu"
    assert idist.device().type == "xla", idist.device()
    assert idist.get_world_size() == xr.world_size()
    assert idist.get_rank() == xr.global_ordinal()
    assert idist.get_local_rank() == xr.local_ordinal()
    assert idist.get_nproc_per_node() == xr.local_device_count()
    assert idist.get_node_rank() == xr.host_index()
    idist.set_local_rank(0)  # a hint: the runtime knows better, nothing changes
    assert idist.get_local_rank() == xr.local_ordinal()


def check_xla_tensors_stay_where_they_are(tmp: Path) -> None:
    world = idist.get_world_size()
    device = _xla()
    on_cpu = torch.ones(3)
    on_xla = torch.ones(3, device=device)
    assert idist.all_reduce(on_cpu) is on_cpu and on_cpu.device.type == "cpu"
    assert idist.all_reduce(on_xla) is on_xla and on_xla.device.type == "xla"
    assert on_cpu.tolist() == [world] * 3 and on_xla.cpu().tolist() == [world] * 3
    assert idist.all_gather(torch.ones(2)).device.type == "cpu"
    gathered = idist.all_gather(torch.ones(2, device=device))
    assert gathered.device.type == "xla" and gathered.cpu().tolist() == [1.0] * 2 * world
    sent = torch.full((2,), 5.0, device=device)
    assert idist.broadcast(sent, src=0) is sent and sent.device.type == "xla"
    received = idist.broadcast(torch.arange(3) if idist.get_rank() == 0 else None, safe_mode=True)
    assert received.tolist() == [0, 1, 2]


def check_xla_native_all_to_all_and_reduce_scatter(tmp: Path) -> None:
    """xm.all_to_all (as bytes: exact) and xm.reduce_scatter do the work where they can
    (counted here); tensors stay on their device."""
    import torch_xla.core.xla_model as xm

    world, rank, device = idist.get_world_size(), idist.get_rank(), _xla()
    with counting(xm, "all_to_all", "reduce_scatter") as calls:
        signed = torch.tensor([-0.0, math.nan, 1.5] * world)  # -0.0 and NaN come back as sent
        for x in (signed, signed.to(device)):  # (a narrow device may flip the NaN's sign)
            back = idist.all_to_all(x)
            assert back.device == x.device
            assert torch.equal(torch.signbit(back.cpu()), torch.signbit(x.cpu()))
            assert back.cpu()[1::3].isnan().all() and back.cpu()[2::3].tolist() == [1.5] * world
        parts = idist.all_to_all([torch.full((2,), rank * 10 + j) for j in range(world)])
        assert [p.tolist() for p in parts] == [[j * 10 + rank] * 2 for j in range(world)]
        assert calls["all_to_all"] == 3, calls
        for x in (torch.ones(world, 2), torch.ones(world, 2, device=device)):
            summed = idist.reduce_scatter(x)
            assert summed.device == x.device and summed.cpu().tolist() == [[float(world)] * 2]
        averaged = idist.reduce_scatter(torch.full((world,), float(rank)), op="AVG")
        assert averaged.tolist() == [sum(range(world)) / world]
        # CPU float32 goes to the device only where it stores float32 exactly (not under
        # XLA_USE_BF16): elsewhere it is emulated, exactly.
        assert calls["reduce_scatter"] == (3 if _model()._holds(torch.float32) else 1), calls


def _reduction_cases(dtype: torch.dtype) -> list[str]:
    if dtype is torch.bool:
        return ["AND", "OR", "MIN", "MAX"]
    ops = ["SUM", "PRODUCT"]
    if not dtype.is_complex:
        ops += ["MIN", "MAX"]
    if dtype.is_floating_point or dtype.is_complex:
        ops.append("AVG")
    else:
        ops += ["AND", "OR"]
    return ops


def _expected(value: torch.Tensor, op: str, world: int) -> torch.Tensor:
    """The reduction of ``world`` copies of ``value``, computed in float64 / int64 / bool."""
    if value.dtype is torch.bool or op in ("MIN", "MAX", "AND", "OR", "AVG"):
        return value
    wide = value.to(torch.complex128 if value.dtype.is_complex else torch.float64)
    return wide * world if op == "SUM" else wide**world


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in a dtype CPU comparisons support (float8 and uint64 have no torch.equal)."""
    if t.dtype is torch.bool:
        return t
    return t.to(torch.complex128 if t.dtype.is_complex else torch.float64)


def check_xla_every_dtype(tmp: Path) -> None:
    """all_reduce, all_gather and broadcast of every dtype, given on the CPU and on the device:
    values, bits, dtype and device come back exactly."""
    world, rank = idist.get_world_size(), idist.get_rank()
    device = _xla()
    problems = []
    for dtype in DTYPES:
        for where in ("cpu",) if dtype in NOT_ON_DEVICE else ("cpu", "xla"):
            # What the device holds is the reference for device tensors (complex128 loses bits
            # on the way in; that is torch_xla's transfer, not a collective).
            def make(values: torch.Tensor, where: str = where) -> torch.Tensor:
                return values.clone() if where == "cpu" else values.to(device)

            label = f"{dtype} on {where}"
            for op in _reduction_cases(dtype):
                x = make(_small(dtype))
                sent = x.cpu()
                out = idist.all_reduce(x, op)
                expected = _expected(sent, op, world)
                got = out.cpu()
                if out is not x or out.device.type != where or out.dtype != dtype:
                    problems.append(f"{label} {op}: {out.dtype} on {out.device}")
                elif not torch.equal(_wide(got), _wide(expected)):
                    problems.append(f"{label} {op}: {got.tolist()} != {expected.tolist()}")
            x = make(_extremes(dtype))
            sent_bits = _bits(x)
            gathered = idist.all_gather(x)
            if gathered.device.type != where or gathered.dtype != dtype:
                problems.append(f"{label} all_gather: {gathered.dtype} on {gathered.device}")
            elif _bits(gathered) != sent_bits * world:
                problems.append(f"{label} all_gather changed bits")
            received = make(torch.zeros_like(_extremes(dtype)) if rank else _extremes(dtype))
            out = idist.broadcast(received, src=0)
            if out is not received or out.device.type != where or _bits(out) != sent_bits:
                problems.append(f"{label} broadcast: bits or device changed")
    assert not problems, "\n".join(problems)


def check_xla_numbers_exact(tmp: Path) -> None:
    world, rank = idist.get_world_size(), idist.get_rank()
    big = 2**62 + 1
    assert idist.all_reduce(big, "MAX") == big
    assert idist.all_gather(big + rank) == [big + r for r in range(world)]
    assert idist.broadcast(-(2**63) if rank == 0 else 0, src=0) == -(2**63)
    third = 1 / 3
    assert idist.all_reduce(third, "MIN") == third and idist.all_gather(1 + 2**-52)[0] == 1 + 2**-52
    assert idist.broadcast(5e-324 if rank == 0 else None, safe_mode=True) == 5e-324


def check_xla_groups(tmp: Path) -> None:
    from distbridge.models.xla.model import XlaGroup

    world, rank = idist.get_world_size(), idist.get_rank()
    group = idist.new_group([0])
    assert isinstance(group, XlaGroup) and group.ranks == (0,)
    assert idist.new_group(range(world)) is idist.new_group(list(range(world)))
    mine = idist.all_reduce(torch.ones(1), group=group)
    assert mine.item() == 1.0
    idist.barrier(group=group)
    idist.barrier(group=list(range(world)))
    assert idist.all_gather(f"r{rank}", group=group) == (["r0"] if rank == 0 else [f"r{rank}"])
    errors = []
    for call in (
        lambda: idist.new_group([0], pg_options=None),
        lambda: idist.all_reduce(1, group=object()),
        lambda: idist.barrier(group=[[0]]),
    ):
        try:
            call()
        except TypeError as err:
            errors.append(str(err))
    assert len(errors) == 3, errors
    assert "new_group() got unexpected keyword arguments ['pg_options']" in errors[0]


def check_xla_dtype_carriers(tmp: Path) -> None:
    """The dtypes carried as bytes are exactly those the device does not hold (so the carrier
    path really ran in the variants that make the device lossy)."""
    model = _model()
    lossy = {torch.complex128}  # torch_xla 2.9 drops its imaginary part on the way in
    if os.environ.get("XLA_USE_32BIT_LONG") == "1":
        lossy |= {torch.int64, torch.uint64}
    if os.environ.get("XLA_USE_BF16") == "1":
        lossy |= {torch.float32, torch.float64}
    carried = {d for d in DTYPES if d is not torch.bool and not model._holds(d)}
    carried -= set(NOT_ON_DEVICE)  # carried too, always
    assert not any(model._holds(d) for d in NOT_ON_DEVICE)
    assert lossy <= carried, (lossy, carried)
    for dtype in carried - lossy:
        assert dtype.is_floating_point and dtype.itemsize <= 2, dtype  # f8, f16, bf16 under BF16


def check_xla_finalize_leaves_the_replica(tmp: Path) -> None:
    """After finalize, the replica is not adopted again until initialize (runs last)."""
    world = idist.get_world_size()
    idist.finalize()
    assert idist.model_name() == "serial"
    assert idist.get_world_size() == 1 and idist.device().type == "cpu"
    idist.initialize("xla-tpu")
    assert idist.model_name() == "xla-dist" and idist.get_world_size() == world


def check_xla_timed_barrier(tmp: Path) -> None:
    barrier_checks.check_timed_barrier(tmp)  # one replica here: no store, returns at once


XLA_CHECKS = [name for name in dir() if name.startswith("check_xla_")]
XLA_CHECKS.remove("check_xla_finalize_leaves_the_replica")
XLA_CHECKS.append("check_xla_finalize_leaves_the_replica")


#: What the context-making scenarios skip: how the context was made does not change dtypes.
SLOW_CHECKS = ("check_xla_every_dtype",)


def run_all(local_rank: int, tmp: str, full: bool = True) -> dict[str, str]:
    """Every backend-agnostic check, then the XLA checks (``full``: with the slow ones too);
    map each name to "ok" or its traceback."""
    results = checks.run_checks(local_rank, checks.CHECKS, tmp)
    for name in XLA_CHECKS:
        if not full and name in SLOW_CHECKS:
            continue
        folder = Path(tmp) / name
        folder.mkdir(exist_ok=True)
        idist.barrier()
        try:
            globals()[name](folder)
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    return results
