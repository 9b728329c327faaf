"""Run under ``horovodrun -np N``: the backend-agnostic checks plus Horovod's own, per rank.

    horovodrun -np 2 [--gloo | --mpi] python -m tests.distributed.horovod_checks MODE OUT TMP

MODE says how the Horovod context comes to be:

- ``initialize``: ``distbridge.Parallel(backend="horovod")`` calls ``hvd.init()``.
- ``adopt``: user code calls ``hvd.init(process_sets="dynamic")``; distbridge adopts it.
- ``adopt-static``: user code calls plain ``hvd.init()`` (no dynamic process sets): groups
  must raise a clear NotImplementedError; everything else works.

Each rank writes ``OUT_DIR/rank<r>.json``: check name -> "ok" or the traceback.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

import distbridge as idist
from tests.distributed import barrier_checks, checks
from tests.distributed.call_counts import counting

#: what main() saw: the value of HOROVOD_DYNAMIC_PROCESS_SETS after user code's own init
_CONTEXT: dict[str, Any] = {}


def _hvd() -> Any:
    import horovod.torch as hvd

    return hvd


def hvd_check_queries(tmp: Path) -> None:
    hvd = _hvd()
    assert idist.model_name() == "horovod-dist" and idist.backend() == "horovod"
    assert (idist.get_rank(), idist.get_world_size()) == (hvd.rank(), hvd.size())
    assert idist.get_local_rank() == hvd.local_rank()
    assert idist.get_nproc_per_node() == hvd.local_size()
    assert (idist.get_node_rank(), idist.get_nnodes()) == (hvd.cross_rank(), hvd.cross_size())
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert idist.device().type == expected
    dynamic = os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS")
    assert dynamic == _CONTEXT["dynamic_env"], "initialize must not leave it set"


def hvd_check_ragged_all_gather(tmp: Path) -> None:
    rank, world = idist.get_rank(), idist.get_world_size()
    out = idist.all_gather(torch.arange(rank + 1, dtype=torch.int64))
    assert out.tolist() == [i for r in range(world) for i in range(r + 1)], out
    for dtype in (torch.bool, torch.bfloat16, torch.complex64, torch.uint16):
        part = torch.ones((rank + 1, 2), dtype=dtype)
        got = idist.all_gather(part)
        assert got.dtype == dtype and got.shape == (world * (world + 1) // 2, 2), (dtype, got)


def hvd_check_extra_dtypes(tmp: Path) -> None:
    rank, world = idist.get_rank(), idist.get_world_size()
    wrapped = idist.all_reduce(torch.tensor([200, rank], dtype=torch.uint8))
    assert wrapped.tolist() == [(200 * world) % 256, sum(range(world))]
    low = idist.all_reduce(torch.tensor([-rank], dtype=torch.int8), "MIN")
    assert low.tolist() == [-(world - 1)]
    flags = torch.tensor([rank == 0, True, False])
    assert idist.all_reduce(flags.clone()).tolist() == [True, True, False]
    assert idist.all_reduce(flags.clone(), "PRODUCT").tolist() == [world == 1, True, False]
    half = idist.all_reduce(torch.full((2,), 1.5, dtype=torch.bfloat16))
    assert half.dtype == torch.bfloat16 and half.tolist() == [1.5 * world] * 2
    avg16 = idist.all_reduce(torch.full((2,), float(rank), dtype=torch.float16), "AVG")
    assert avg16.tolist() == [sum(range(world)) / world] * 2
    z = torch.tensor([complex(rank, 1)], dtype=torch.complex64)
    assert idist.all_reduce(z.clone()).tolist() == [complex(sum(range(world)), world)]
    assert idist.all_reduce(z.clone(), "AVG").tolist() == [complex(sum(range(world)) / world, 1)]
    expected = complex(1, 0)
    for r in range(world):
        expected *= complex(r, 1)
    prod = idist.all_reduce(z.clone(), "PRODUCT").item()
    assert abs(prod - expected) < 1e-4 * max(1.0, abs(expected)), (prod, expected)
    big = torch.tensor([1 << (62 - rank), -1], dtype=torch.int64)
    ored = idist.all_reduce(big.clone(), "OR").tolist()
    assert ored == [sum(1 << (62 - r) for r in range(world)), -1]
    unsigned = torch.tensor([-1 if rank == 0 else 1], dtype=torch.int64).view(torch.uint64)
    anded = idist.all_reduce(unsigned.clone(), "AND").view(torch.int64).tolist()
    assert anded == [-1 if world == 1 else 1]


def hvd_check_adasum(tmp: Path) -> None:
    hvd = _hvd()
    world = idist.get_world_size()
    x = torch.ones(4)
    try:
        out = idist.all_reduce(x, "ADASUM")
    except NotImplementedError as err:
        power_of_two = world & (world - 1) == 0
        assert "ADASUM" in str(err), err
        assert not power_of_two or not hvd.mpi_enabled(), err
    else:
        assert torch.allclose(out, torch.ones(4)), out  # Adasum of equal vectors is the vector
        if world == 2:  # a=[1,2], b=[2,4]: (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b = 0.75 b
            pair = idist.all_reduce(torch.tensor([1.0, 2.0]) * (idist.get_rank() + 1), "ADASUM")
            assert torch.allclose(pair, torch.tensor([1.5, 3.0])), pair
    try:
        idist.all_reduce(torch.ones(1, dtype=torch.int64), "ADASUM")
    except TypeError as err:
        assert "ADASUM" in str(err)
    else:
        raise AssertionError("ADASUM of an int tensor must raise TypeError")


def hvd_check_process_sets(tmp: Path) -> None:
    hvd = _hvd()
    rank, world = idist.get_rank(), idist.get_world_size()
    basics = sys.modules["horovod.torch.mpi_ops"]._basics
    before = len(basics._get_process_set_ids_and_ranks())
    members = [0, world - 1] if world > 2 else [0]
    for _ in range(4):
        idist.all_reduce(torch.ones(1), group=members)
    group = idist.new_group(members)
    assert isinstance(group, hvd.ProcessSet) and group is idist.new_group(members)
    created = len(basics._get_process_set_ids_and_ranks()) - before
    assert created <= 1, f"{created} process sets made for one rank tuple"
    got = idist.all_reduce(rank + 1, group=group)
    assert got == (sum(r + 1 for r in members) if rank in members else rank + 1)
    assert idist.all_reduce(1, group=hvd.global_process_set) == world
    assert idist.new_group(list(range(world))) is hvd.global_process_set
    sent = idist.broadcast(torch.tensor([rank]), src=members[-1], group=members)
    assert sent.item() == (members[-1] if rank in members else rank)
    try:
        idist.all_reduce(1, group="not a group")
    except TypeError as err:
        assert "a group from distbridge.new_group()" in str(err)
    else:
        raise AssertionError("a str group must raise TypeError")


def hvd_check_torch_group_beside(tmp: Path) -> None:
    """With a torch process group in the same job, Horovod stays the adopted model."""
    import torch.distributed as dist

    rank, world = idist.get_rank(), idist.get_world_size()
    init = f"file://{tmp / 'pg'}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        idist.sync()
        assert idist.model_name() == "horovod-dist", idist.model_name()
        assert idist.all_reduce(1) == world
    finally:
        dist.destroy_process_group()


def hvd_check_auto_training(tmp: Path) -> None:
    """auto_model broadcasts rank 0's weights (no DDP wrapper); auto_optim averages the
    gradients through hvd.DistributedOptimizer, so the weights stay equal across ranks."""
    rank = idist.get_rank()
    torch.manual_seed(rank)  # different initial weights on every rank
    layer = torch.nn.Linear(3, 2)
    model = idist.auto_model(layer)
    assert model is layer, "Horovod trains the module itself"
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0)
    first = idist.all_gather(start)
    assert all(torch.equal(first[0], row) for row in first), "rank 0's weights not broadcast"
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.1))
    assert hasattr(optimizer, "synchronize"), f"not Horovod's DistributedOptimizer: {optimizer!r}"
    for step in range(3):
        optimizer.zero_grad()
        x = torch.full((4, 3), float(rank + step))
        model(x).pow(2).mean().backward()
        optimizer.step()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = idist.all_gather(weights.unsqueeze(0))
    assert all(torch.equal(every[0], row) for row in every), "weights differ across ranks"


def hvd_check_native_alltoall_and_reducescatter(tmp: Path) -> None:
    """all_to_all and reduce_scatter go through hvd.alltoall / hvd.reducescatter where
    Horovod has them (counted here), and through the emulation where it has not."""
    hvd, rank, world = _hvd(), idist.get_rank(), idist.get_world_size()
    with counting(hvd, "alltoall", "reducescatter") as calls:
        sent = [torch.full((rank + j + 1,), float(j)) for j in range(world)]
        uneven = idist.all_to_all(sent)
        want = [[float(rank)] * (j + rank + 1) for j in range(world)]
        assert [u.tolist() for u in uneven] == want
        assert calls["alltoall"] == 1, calls  # the shape rows travel by all-gather
        flags = torch.tensor([rank * 10 + j for j in range(world)], dtype=torch.bool)
        one = idist.all_to_all(flags)
        assert one.tolist() == [bool(j * 10 + rank) for j in range(world)]  # as bytes
        assert calls["alltoall"] == 2, calls
        summed = idist.reduce_scatter(torch.ones(world, 3))
        assert summed.tolist() == [[float(world)] * 3]
        averaged = idist.reduce_scatter(torch.full((world,), float(rank)), op="AVG")
        assert averaged.tolist() == [sum(range(world)) / world]
        assert calls["reducescatter"] == 2, calls
        smallest = idist.reduce_scatter(torch.full((world,), rank, dtype=torch.int32), op="MIN")
        assert smallest.tolist() == [0] and calls["reducescatter"] == 2, calls  # emulated


def hvd_check_gather_and_scatter_by_alltoall(tmp: Path) -> None:
    """gather and scatter, which Horovod lacks, go as one hvd.alltoall each (to dst alone,
    from src alone), for the dtypes Horovod moves and for those it carries as bytes."""
    hvd, rank, world = _hvd(), idist.get_rank(), idist.get_world_size()
    dst = src = world - 1
    with counting(hvd, "alltoall") as calls:
        got = idist.gather(torch.full((2, 3), float(rank)), dst=dst, same_shape=True)
        want = [[[float(r)] * 3] * 2 for r in range(world)]
        assert [g.tolist() for g in got] == (want if rank == dst else []), got
        assert calls["alltoall"] == 1, calls
        small = torch.arange(rank + 1).to(torch.uint16)  # uneven, carried as bytes
        got = idist.gather(small, dst=dst)
        want_small = [list(range(r + 1)) for r in range(world)]
        assert [g.tolist() for g in got] == (want_small if rank == dst else []), got
        assert calls["alltoall"] == 2, calls  # the shape rows travel by all-gather
        chunks = [torch.full((4,), float(j)) for j in range(world)] if rank == src else None
        out = idist.scatter(chunks, src=src, out=torch.empty(4))
        assert out.tolist() == [float(rank)] * 4 and calls["alltoall"] == 3, calls
        flags = [torch.tensor([j % 2 == 1] * (j + 1)) for j in range(world)]
        got_flags = idist.scatter(flags if rank == src else None, src=src)
        assert got_flags.tolist() == [rank % 2 == 1] * (rank + 1), got_flags
        assert calls["alltoall"] == 4, calls


def hvd_check_timed_barrier(tmp: Path) -> None:
    barrier_checks.check_timed_barrier(tmp)  # through the TCPStore rank 0 hosts


HVD_CHECKS = [name for name in dir() if name.startswith("hvd_check_")]


def run_static_checks(tmp: Path) -> dict[str, str]:
    """For plain ``hvd.init()``: adoption works, groups raise NotImplementedError."""

    def adopted(tmp: Path) -> None:
        assert idist.model_name() == "horovod-dist"
        assert idist.all_reduce(1) == idist.get_world_size()
        assert idist.all_gather("x") == ["x"] * idist.get_world_size()

    def groups_unavailable(tmp: Path) -> None:
        world = idist.get_world_size()
        try:
            idist.all_reduce(1, group=[0])
        except NotImplementedError as err:
            assert world > 1 and "new_group([0])" in str(err) and "dynamic" in str(err), err
        else:
            assert world == 1, "a group without dynamic process sets must raise"
        assert idist.all_reduce(1, group=list(range(world))) == world  # the global set

    def shutdown_by_hand(tmp: Path) -> None:
        _hvd().shutdown()
        assert idist.model_name() == "serial", "a shut-down context must not stay adopted"

    return _run({"adopted": adopted, "groups_unavailable": groups_unavailable,
                 "shutdown_by_hand": shutdown_by_hand}, tmp)  # fmt: skip


def _run(named: dict[str, Any], tmp: Path) -> dict[str, str]:
    results = {}
    for name, check in named.items():
        folder = tmp / name
        folder.mkdir(exist_ok=True)
        try:
            check(folder)
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    return results


def run_all(tmp: Path) -> dict[str, str]:
    generic = [c for c in checks.CHECKS if c != "check_finalize_and_reinitialize"]
    results = checks.run_checks(idist.get_local_rank(), generic, str(tmp))
    results.update(_run({name: globals()[name] for name in HVD_CHECKS}, tmp))
    results.update(checks.run_checks(0, ["check_finalize_and_reinitialize"], str(tmp)))
    return results


def main(mode: str, out: Path, tmp: Path) -> None:
    hvd = _hvd()
    _CONTEXT["dynamic_env"] = None if mode == "initialize" else "1"
    if mode == "initialize":
        with idist.Parallel(backend="horovod"):
            results = run_all(tmp)
    elif mode == "adopt":
        hvd.init(process_sets="dynamic")
        results = run_all(tmp)
    elif mode == "adopt-static":
        hvd.init()
        results = run_static_checks(tmp)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    rank = int(os.environ.get("HOROVOD_RANK") or os.environ["OMPI_COMM_WORLD_RANK"])  # Gloo | MPI
    (out / f"rank{rank}.json").write_text(json.dumps(results))
    if hvd.is_initialized():
        hvd.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
