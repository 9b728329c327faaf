"""Backend-agnostic per-rank checks, run in every rank by each backend's test file.

Each check is a plain top-level function ``check_x(tmp: Path) -> None`` that uses only
the facade and asserts what every rank must see, for any world size >= 1. Checks
raise only after their collectives, so a failing check does not desynchronize the
next one. ``run_checks`` runs a list of them in one worker and reports each result.
"""

from __future__ import annotations

import math
import sys
import traceback
from pathlib import Path, PurePath
from typing import Any

import torch

import distbridge as idist
from distbridge import _state, environments
from distbridge.models import SerialModel
from tests.distributed.emulation import emulating


def _ranks() -> tuple[int, int]:
    return idist.get_rank(), idist.get_world_size()


def _raises(kind: type[Exception], text: str, fn: Any, *args: Any, **kwargs: Any) -> None:
    """Assert that ``fn(*args, **kwargs)`` raises ``kind`` with ``text`` in its message."""
    try:
        fn(*args, **kwargs)
    except kind as err:
        assert text in str(err), (text, str(err))
    else:
        raise AssertionError(f"{fn.__name__} did not raise {kind.__name__} ({text!r})")


def check_queries(tmp: Path) -> None:
    rank, world = _ranks()
    assert 0 <= rank < world
    assert idist.model_name() != "serial"
    assert idist.backend() in idist.available_backends()
    assert idist.get_nnodes() * idist.get_nproc_per_node() == world
    assert idist.get_node_rank() * idist.get_nproc_per_node() + idist.get_local_rank() == rank
    assert isinstance(idist.device(), torch.device)
    seen = idist.all_gather(rank)
    assert seen == list(range(world)), seen


def check_all_reduce_tensor_ops(tmp: Path) -> None:
    rank, world = _ranks()
    values = [r + 1 for r in range(world)]
    cases: list[tuple[str, torch.dtype, float]] = [
        ("SUM", torch.float32, sum(values)),
        ("sum", torch.int64, sum(values)),
        ("PRODUCT", torch.float64, math.prod(values)),
        ("MIN", torch.int32, min(values)),
        ("MAX", torch.float32, max(values)),
        ("AVG", torch.float64, sum(values) / world),
        ("average", torch.float32, sum(values) / world),
    ]
    for op, dtype, expected in cases:
        x = torch.full((3,), float(rank + 1)).to(dtype)
        out = idist.all_reduce(x, op)
        assert out is x, f"{op}: the result must be the input tensor, reduced in place"
        assert out.dtype == dtype
        assert torch.allclose(out.double(), torch.full((3,), float(expected)).double()), (op, out)
    bits = torch.tensor([1 << rank, 0b1111], dtype=torch.int64)
    assert idist.all_reduce(bits.clone(), "OR").tolist() == [(1 << world) - 1, 0b1111]
    assert idist.all_reduce(bits.clone(), "AND").tolist() == [1 if world == 1 else 0, 0b1111]
    flags = torch.tensor([rank == 0, True])
    assert idist.all_reduce(flags.clone(), "and").tolist() == [world == 1, True]
    assert idist.all_reduce(flags.clone(), "or").tolist() == [True, True]
    # non-contiguous input: reduced on a contiguous copy, then written back
    base = torch.arange(6.0).reshape(2, 3) * (rank + 1)
    view = base.t()
    idist.all_reduce(view)
    factor = sum(values)
    assert torch.equal(base, torch.arange(6.0).reshape(2, 3) * factor)
    scalar = idist.all_reduce(torch.tensor(float(rank)))
    assert scalar.dim() == 0 and scalar.item() == sum(range(world))


def check_all_reduce_numbers_exact(tmp: Path) -> None:
    rank, world = _ranks()
    total = idist.all_reduce(rank + 1)
    assert type(total) is int and total == world * (world + 1) // 2
    big = idist.all_reduce(2**62 + rank, "MAX")
    assert type(big) is int and big == 2**62 + world - 1
    half = idist.all_reduce(0.5 + rank * 0.25)
    assert type(half) is float and half == sum(0.5 + r * 0.25 for r in range(world))
    tenth = idist.all_reduce(0.1, "MIN")
    assert tenth == 0.1, f"0.1 must stay 0.1 exactly, got {tenth!r}"
    avg = idist.all_reduce(rank, "AVG")
    assert type(avg) is float and avg == sum(range(world)) / world
    anded = idist.all_reduce(rank == 0, "AND")
    ored = idist.all_reduce(rank == 0, "or")
    assert type(anded) is bool and anded == (world == 1)
    assert type(ored) is bool and ored is True
    count = idist.all_reduce(True)
    assert type(count) is int and count == world
    prod = idist.all_reduce(-1, "PRODUCT")
    assert prod == (-1) ** world


def check_all_gather_tensor(tmp: Path) -> None:
    rank, world = _ranks()
    out = idist.all_gather(torch.tensor([[rank, rank * 10]]))
    assert out.shape == (world, 2)
    assert out[:, 0].tolist() == list(range(world))
    scalar = idist.all_gather(torch.tensor(float(rank)))
    assert scalar.shape == (world,) and scalar.tolist() == [float(r) for r in range(world)]
    for dtype in (torch.int16, torch.uint16, torch.uint64, torch.bfloat16, torch.complex64):
        wide = idist.all_gather(torch.full((2, 3), rank, dtype=dtype))
        assert wide.shape == (2 * world, 3) and wide.dtype == dtype, (dtype, wide.shape)
        assert wide[::2, 0].to(torch.float64).real.tolist() == list(range(world)), dtype


def check_dtypes_the_backend_lacks(tmp: Path) -> None:
    """int16 / uint16 / uint32 / uint64 travel bit-exactly, also where gloo lacks them."""
    rank, world = _ranks()
    for dtype in (torch.int16, torch.uint16, torch.uint32, torch.uint64):
        x = torch.tensor([rank + 1, 100 + rank, 3]).to(dtype)
        summed = idist.all_reduce(x.clone())
        assert summed.dtype == dtype
        expected_sum = [sum(range(1, world + 1)), sum(100 + r for r in range(world)), 3 * world]
        assert summed.to(torch.int64).tolist() == expected_sum, (dtype, summed)
        highest = idist.all_reduce(x.clone(), "MAX").to(torch.int64).tolist()
        lowest = idist.all_reduce(x.clone(), "MIN").to(torch.int64).tolist()
        assert highest == [world, 100 + world - 1, 3] and lowest == [1, 100, 3], dtype
        sent = idist.broadcast(x.clone(), src=world - 1)
        assert sent.dtype == dtype and sent.to(torch.int64).tolist() == [world, 99 + world, 3]
        safe = idist.broadcast(x.clone() if rank == 0 else None, src=0, safe_mode=True)
        assert safe.dtype == dtype and safe.to(torch.int64).tolist() == [1, 100, 3]
    wrapped = idist.all_reduce(torch.full((2,), 65535, dtype=torch.int64).to(torch.uint16))
    assert wrapped.to(torch.int64).tolist() == [(65535 * world) % 65536] * 2
    # uint64 above 2**63: unsigned order must win (a signed comparison picks the wrong one)
    bits = 5 if rank == 0 else -(2**63) + rank
    value = torch.tensor([bits], dtype=torch.int64).view(torch.uint64)
    top = idist.all_reduce(value.clone(), "MAX").view(torch.int64).item()
    low = idist.all_reduce(value.clone(), "MIN").view(torch.int64).item()
    assert top == (-(2**63) + world - 1 if world > 1 else 5), top
    assert low == 5, low


def check_all_gather_values(tmp: Path) -> None:
    rank, world = _ranks()
    mixed = idist.all_gather(rank if rank % 2 == 0 else rank + 0.5)
    assert mixed == [r if r % 2 == 0 else r + 0.5 for r in range(world)]
    assert [type(v) for v in mixed] == [int if r % 2 == 0 else float for r in range(world)]
    exact = idist.all_gather(0.1 * (rank + 1))
    assert exact == [0.1 * (r + 1) for r in range(world)]
    flags = idist.all_gather(rank == 0)
    assert flags == [r == 0 for r in range(world)] and all(type(f) is bool for f in flags)
    texts = ["", "héllo", "日本語テキスト", "emoji 🎉🚀", "a" * 1000]
    got = idist.all_gather(texts[rank % len(texts)])
    assert got == [texts[r % len(texts)] for r in range(world)], got
    objs = idist.all_gather({"rank": rank, "t": torch.arange(rank + 1), "p": Path(f"/r{rank}")})
    assert [o["rank"] for o in objs] == list(range(world))
    assert [o["t"].tolist() for o in objs] == [list(range(r + 1)) for r in range(world)]
    paths = idist.all_gather(Path(f"/data/rank{rank}"))
    assert paths == [Path(f"/data/rank{r}") for r in range(world)]
    assert all(isinstance(p, PurePath) for p in paths)


def check_all_gather_mixed_kinds_raise(tmp: Path) -> None:
    rank, world = _ranks()
    value: Any = "text" if rank == 0 else 7
    try:
        idist.all_gather(value)
    except TypeError as err:
        assert world > 1 and "different kinds" in str(err), err
    else:
        assert world == 1, "a str on one rank and an int on another must raise on every rank"


def check_broadcast_tensor(tmp: Path) -> None:
    rank, world = _ranks()
    src = world - 1
    x = torch.full((4, 2), float(rank))
    out = idist.broadcast(x, src=src)
    assert out is x and torch.equal(x, torch.full((4, 2), float(src)))
    placeholder = torch.arange(5, dtype=torch.int32) if rank == 0 else None
    safe = idist.broadcast(placeholder, src=0, safe_mode=True)
    assert safe.dtype == torch.int32 and safe.tolist() == list(range(5))
    scalar = idist.broadcast(torch.tensor(3.5) if rank == 0 else None, safe_mode=True)
    assert scalar.dim() == 0 and scalar.item() == 3.5


def check_broadcast_values(tmp: Path) -> None:
    rank, world = _ranks()
    src = world // 2
    mine = rank == src
    assert idist.broadcast(0.1 if mine else 0.0, src=src) == 0.1
    seven = idist.broadcast(7 if mine else 0, src=src)
    assert type(seven) is int and seven == 7
    huge = idist.broadcast(2**63 - 1 if mine else None, src=src, safe_mode=True)
    assert huge == 2**63 - 1
    flag = idist.broadcast(True if mine else None, src=src, safe_mode=True)
    assert flag is True
    text = idist.broadcast("ünïcødé 🎉" if mine else "", src=src)
    assert text == "ünïcødé 🎉"
    path = idist.broadcast(Path("/tmp/ckpt.pt") if mine else None, src=src, safe_mode=True)
    assert isinstance(path, Path) and path == Path("/tmp/ckpt.pt")
    nan = idist.broadcast(float("nan") if mine else None, src=src, safe_mode=True)
    assert math.isnan(nan)


def check_barrier(tmp: Path) -> None:
    rank, _ = _ranks()
    marker = tmp / f"barrier-{rank}"
    marker.write_text("here")
    idist.barrier()
    present = sorted(p.name for p in tmp.glob("barrier-*"))
    assert len(present) == idist.get_world_size(), present


def check_the_ledger_records_each_collective(tmp: Path) -> None:
    """The collective ledger of this rank lists the last facade calls as they were made: their
    numbers, what they carried, this file's lines, "done"; the same numbers and ops on every
    rank (the hang verdict compares them across ranks)."""
    from distbridge._state import current

    rank, world = _ranks()
    ledger = current().ledger
    lines = []
    x = torch.arange(6, dtype=torch.float32, device=idist.device()).reshape(2, 3)
    lines.append(_line_after())
    idist.all_reduce(x)
    lines.append(_line_after())
    idist.all_gather(rank)
    lines.append(_line_after())
    idist.broadcast_object({"rank": rank}, src=0)
    lines.append(_line_after())
    idist.barrier()
    got = [r for r in ledger.snapshot() if r["group"] is None][-4:]
    first = got[0]["seq"]
    ops = [(r["seq"] - first, r["op"]) for r in got]
    assert ops == [(0, "all_reduce"), (1, "all_gather"), (2, "broadcast_object"), (3, "barrier")]
    assert [r["what"] for r in got] == ["float32[2, 3]", "int", "dict", "NoneType"], got
    here = "checks.py:{} in check_the_ledger_records_each_collective"
    for record, line in zip(got, lines, strict=True):
        assert record["site"].endswith(here.format(line)), (record["site"], line)
        assert record["state"] == "done", record
    everyone = idist.all_gather_object((first, ops))
    assert everyone == [everyone[0]] * world, everyone


def _line_after() -> int:
    """The line after the caller's current one (where the collective to record is made)."""
    frame = sys._getframe(1)
    return frame.f_lineno + 1


def _backend_group_count() -> int:
    """How many groups the backend holds (torch.distributed's registry for the native model)."""
    from distbridge._state import current

    if idist.model_name() == "native-dist":
        import torch.distributed as dist

        return len(dist.distributed_c10d._world.pg_map)
    return len(current().groups)


def check_groups(tmp: Path) -> None:
    rank, world = _ranks()
    members = [0, world - 1] if world > 1 else [0]
    groups_before = _backend_group_count()
    for _ in range(5):
        out = idist.all_reduce(rank + 1, group=members)
        if rank in members:
            assert out == sum(r + 1 for r in members)
        else:
            assert out == rank + 1, "a rank outside the group gets its input back"
    created = _backend_group_count() - groups_before
    assert created <= 1, f"{created} groups created for one rank set: not cached"
    assert idist.new_group(members) is idist.new_group(members)
    got = idist.broadcast(rank * 10, src=members[-1], group=members)
    assert got == (members[-1] * 10 if rank in members else rank * 10)
    if rank not in members:  # bad input is an error outside the group as inside it
        src = members[-1]
        _raises(ValueError, "safe_mode=True", idist.broadcast, None, src=src, group=members)
        sparse = torch.ones(2).to_sparse()
        _raises(TypeError, "dense", idist.broadcast, sparse, src=src, group=members)
        assert idist.broadcast(None, src=members[-1], group=members, safe_mode=True) is None
    idist.barrier(group=members)
    gathered = idist.all_gather(torch.tensor([rank]), group=members)
    if rank in members:
        assert gathered.tolist() == members
    whole = idist.all_reduce(torch.ones(1), group=list(range(world)))
    assert whole.item() == world


def check_validation_errors_match_serial(tmp: Path) -> None:
    """Bad input fails before any communication, with the serial model's error type."""
    serial = SerialModel()
    world = idist.get_world_size()
    cases: list[tuple[str, Any]] = [
        ("bad op", lambda m: m.all_reduce(1, "SUMM")),
        ("float AND", lambda m: m.all_reduce(1.5, "AND")),
        ("int AVG tensor", lambda m: m.all_reduce(torch.ones(2, dtype=torch.int64), "AVG")),
        ("object to all_reduce", lambda m: m.all_reduce("text")),
        ("src type", lambda m: m.broadcast(1, src="0")),
        ("src range", lambda m: m.broadcast(1, src=world)),
        ("group range", lambda m: m.all_reduce(1, group=[world])),
        ("group dup", lambda m: m.all_reduce(1, group=[0, 0])),
        ("group type", lambda m: m.barrier(group=["a"])),
        ("None src", lambda m: m.broadcast(None, src=m.get_rank())),
        ("big int", lambda m: m.all_reduce(2**64)),
    ]
    from distbridge._state import current

    live = current()
    for name, call in cases:
        errors = []
        for m in (serial, live):
            try:
                call(m)
            except (TypeError, ValueError) as err:
                errors.append(type(err))
            else:
                errors.append(None)
        assert errors[0] is not None, f"{name}: the serial model accepted bad input"
        assert errors[0] == errors[1], f"{name}: serial raised {errors[0]}, live raised {errors[1]}"


def check_all_gather_tensors_with_shapes(tmp: Path) -> None:
    rank, world = _ranks()
    shapes = [(r + 1, 2) for r in range(world)]
    mine = torch.full(shapes[rank], float(rank))
    parts = idist.all_gather_tensors_with_shapes(mine, shapes)
    assert [tuple(p.shape) for p in parts] == shapes
    assert [p.unique().tolist() for p in parts] == [[float(r)] for r in range(world)]


def check_one_rank_helpers(tmp: Path) -> None:
    rank, world = _ranks()
    flag = tmp / "first-done"
    with idist.one_rank_first(rank=world - 1):
        if rank == world - 1:
            flag.write_text("x")
        else:
            assert flag.exists(), "the chosen rank must finish its block before the others start"

    @idist.one_rank_only(rank=0, with_barrier=True)
    def only_zero() -> int:
        return 42

    assert only_zero() == (42 if rank == 0 else None)


def check_reduce(tmp: Path) -> None:
    rank, world = _ranks()
    dst = world - 1
    values = [r + 1 for r in range(world)]
    for op, expected in (("SUM", sum(values)), ("max", max(values)), ("MIN", 1),
                         ("PRODUCT", math.prod(values)), ("AVG", sum(values) / world)):  # fmt: skip
        x = torch.full((2, 2), float(rank + 1))
        out = idist.reduce(x, dst=dst, op=op)
        assert out is x
        want = float(expected) if rank == dst else float(rank + 1)
        assert torch.allclose(x, torch.full((2, 2), want)), (op, rank, x)
    total = idist.reduce(rank + 1, dst=0)
    assert type(total) is int and total == (sum(values) if rank == 0 else rank + 1)
    tenth = idist.reduce(0.1, dst=0, op="MIN")
    assert type(tenth) is float and tenth == 0.1
    small = idist.reduce(torch.tensor([rank + 1], dtype=torch.uint16), dst=0)
    assert small.dtype == torch.uint16
    assert small.item() == (sum(values) if rank == 0 else rank + 1)


def check_gather_uneven(tmp: Path) -> None:
    rank, world = _ranks()
    dst = world // 2
    parts = idist.gather(torch.full((rank + 1, 2), rank, dtype=torch.int32), dst=dst)
    if rank == dst:
        assert [tuple(p.shape) for p in parts] == [(r + 1, 2) for r in range(world)]
        assert [p.unique().tolist() for p in parts] == [[r] for r in range(world)]
        assert all(p.dtype == torch.int32 for p in parts)
    else:
        assert parts == []
    same = idist.gather(torch.tensor([rank, rank]), dst=0)
    assert [p.tolist() for p in same] == ([[r, r] for r in range(world)] if rank == 0 else [])
    numbers = idist.gather(rank if rank % 2 else rank + 0.5, dst=0)
    if rank == 0:
        assert numbers == [r if r % 2 else r + 0.5 for r in range(world)]
        assert [type(n) for n in numbers] == [int if r % 2 else float for r in range(world)]
    texts = idist.gather(f"ränk{rank}", dst=0)
    assert texts == ([f"ränk{r}" for r in range(world)] if rank == 0 else [])
    wide = idist.gather(torch.tensor([rank], dtype=torch.uint64), dst=0)
    assert [w.item() for w in wide] == (list(range(world)) if rank == 0 else [])


def check_scatter_uneven(tmp: Path) -> None:
    rank, world = _ranks()
    src = world - 1
    tensors = [torch.full((r + 1, 3), float(r)) for r in range(world)] if rank == src else None
    mine = idist.scatter(tensors, src=src)
    assert mine.shape == (rank + 1, 3) and mine.unique().tolist() == [float(rank)]
    mine16 = idist.scatter(
        [torch.tensor([r, 7], dtype=torch.int16) for r in range(world)] if rank == 0 else None
    )
    assert mine16.dtype == torch.int16 and mine16.tolist() == [rank, 7]
    scalars = idist.scatter([torch.tensor(r * 1.5) for r in range(world)] if rank == 0 else None)
    assert scalars.dim() == 0 and scalars.item() == rank * 1.5


def check_reduce_scatter(tmp: Path) -> None:
    rank, world = _ranks()
    x = torch.arange(2.0 * world).reshape(world, 2) * (rank + 1)
    before = x.clone()
    out = idist.reduce_scatter(x)
    factor = sum(r + 1 for r in range(world))
    assert torch.equal(x, before), "reduce_scatter must not modify its input"
    assert out.shape == (1, 2)
    assert out.tolist() == [[2.0 * rank * factor, (2.0 * rank + 1) * factor]]
    avg = idist.reduce_scatter(torch.full((world * 3,), float(rank)), op="AVG")
    assert avg.shape == (3,) and torch.allclose(avg, torch.full((3,), sum(range(world)) / world))
    biggest = idist.reduce_scatter(torch.full((world,), rank, dtype=torch.int16), op="MAX")
    assert biggest.dtype == torch.int16 and biggest.tolist() == [world - 1]
    try:
        idist.reduce_scatter(torch.ones(world + 1))
    except ValueError as err:
        assert world > 1 and "multiple of" in str(err)
    else:
        assert world == 1, "dim 0 that does not divide must raise"


def check_all_to_all_uneven(tmp: Path) -> None:
    rank, world = _ranks()
    sent = [torch.full((rank + j + 1, 2), rank * 10 + j) for j in range(world)]
    got = idist.all_to_all(sent)
    assert len(got) == world
    for j, piece in enumerate(got):
        assert piece.shape == (j + rank + 1, 2), (j, piece.shape)
        assert piece.unique().tolist() == [j * 10 + rank]
    wide = idist.all_to_all([torch.tensor([rank, j], dtype=torch.uint32) for j in range(world)])
    assert [w.tolist() for w in wide] == [[j, rank] for j in range(world)]
    assert all(w.dtype == torch.uint32 for w in wide)


def check_all_to_all_chunks_on_some_ranks_only(tmp: Path) -> None:
    """Even ranks pass ``list(x.chunk(world))`` (sent as ``x`` itself), odd ranks separate
    tensors of the same shape: the two paths must send alike (Horovod refused rows of
    different shapes across ranks: "Mismatched ALLTOALL tensor shapes")."""
    rank, world = _ranks()
    for _ in range(2):  # the second time, the even ranks take the remembered fast path
        rows = [[[rank, j, i] for i in range(3)] for j in range(world)]
        if rank % 2 == 0:  # chunks of one (3 * world, 3) tensor: their _base
            x = torch.tensor([row for chunk in rows for row in chunk], dtype=torch.float32)
            sent = list(x.chunk(world))
        else:
            sent = [torch.tensor(r, dtype=torch.float32) for r in rows]
        got = idist.all_to_all(sent, same_shape=True)
        assert [g.tolist() for g in got] == [[[j, rank, i] for i in range(3)] for j in range(world)]


def check_all_to_all_one_tensor(tmp: Path) -> None:
    rank, world = _ranks()
    # Two rows per chunk: rows 2j and 2j+1 go to rank j, which gets them at rows 2*rank...
    x = torch.tensor([[rank, j, i] for j in range(world) for i in range(2)])
    before = x.clone()
    got = idist.all_to_all(x)
    assert torch.equal(x, before), "all_to_all must not modify its input"
    assert got.shape == x.shape and got.dtype == x.dtype
    assert got.tolist() == [[j, rank, i] for j in range(world) for i in range(2)]
    wide = idist.all_to_all(
        torch.tensor([rank * 100 + j for j in range(world)], dtype=torch.uint16)
    )
    assert wide.dtype == torch.uint16 and wide.tolist() == [j * 100 + rank for j in range(world)]
    halves = idist.all_to_all(torch.full((world, 3), rank + 0.5).t().contiguous().t())
    assert halves.tolist() == [[j + 0.5] * 3 for j in range(world)]
    members = [0, world - 1] if world > 1 else [0]
    mine = torch.tensor([float(rank)] * len(members))
    in_group = idist.all_to_all(mine, group=members)
    if rank in members:
        assert in_group.tolist() == [float(r) for r in members]
    else:
        assert in_group is mine
    _raises(ValueError, "0-dim", idist.all_to_all, torch.tensor(1.0))
    if world > 1:
        _raises(ValueError, "multiple of", idist.all_to_all, torch.ones(world + 1))
    # Later calls of a kind already checked take the fast path: the same answers, and
    # what differs in layout or contiguity, or a bad flag, still gets the checks.
    for _ in range(2):
        again = idist.all_to_all(torch.tensor([rank * 100 + j for j in range(world)]))
        assert again.tolist() == [j * 100 + rank for j in range(world)]
    strided = torch.tensor([rank * 100 + j for j in range(world) for _ in range(2)])[::2]
    assert idist.all_to_all(strided).tolist() == [j * 100 + rank for j in range(world)]
    _raises(TypeError, "same_shape must be True or False", idist.all_to_all, strided,
            same_shape=1)  # fmt: skip


def check_same_shape_gather_and_all_to_all(tmp: Path) -> None:
    rank, world = _ranks()
    parts = idist.gather(torch.full((2, 3), rank), dst=world - 1, same_shape=True)
    if rank == world - 1:
        assert [p.shape for p in parts] == [(2, 3)] * world
        assert [p.unique().tolist() for p in parts] == [[r] for r in range(world)]
    else:
        assert parts == []
    wide = idist.gather(torch.tensor([rank], dtype=torch.uint16), dst=0, same_shape=True)
    assert [w.tolist() for w in wide] == ([[r] for r in range(world)] if rank == 0 else [])
    got = idist.all_to_all([torch.tensor([rank, j]) for j in range(world)], same_shape=True)
    assert [g.tolist() for g in got] == [[j, rank] for j in range(world)]
    # Chunks of one tensor (sent without a copy), the same rows out of order, and
    # non-contiguous parts: the right answer each time, and the input left alone.
    whole = torch.stack([torch.tensor([[rank, j], [10, 20]]) for j in range(world)])
    kept = whole.clone()
    got = idist.all_to_all([c.squeeze(0) for c in whole.chunk(world)], same_shape=True)
    assert [g.tolist() for g in got] == [[[j, rank], [10, 20]] for j in range(world)]
    assert all(g.data_ptr() != whole.data_ptr() for g in got)
    backwards = idist.all_to_all([whole[world - 1 - k] for k in range(world)], same_shape=True)
    assert [g.tolist() for g in backwards] == [
        [[j, world - 1 - rank], [10, 20]] for j in range(world)
    ]
    as_floats = whole.to(torch.float32).view(torch.int32)  # chunks whose base is float32
    got = idist.all_to_all(list(as_floats.chunk(world)), same_shape=True)
    assert all(g.dtype == torch.int32 for g in got)
    assert [g.view(torch.float32).squeeze(0).tolist() for g in got] == [
        [[j, rank], [10, 20]] for j in range(world)
    ]
    strided = idist.all_to_all([t.t() for t in whole.unbind(0)], same_shape=True)
    assert [g.tolist() for g in strided] == [[[j, 10], [rank, 20]] for j in range(world)]
    assert torch.equal(whole, kept)
    # Calls of a kind seen before take the fast paths: the same answers, and lists that are
    # not x.chunk(world) in order (reversed, one part a copy) still get theirs.
    x = torch.arange(world * 2).view(world, 2) + 100 * rank
    want = [[[100 * j + 2 * rank, 100 * j + 2 * rank + 1]] for j in range(world)]
    for _ in range(3):
        got = idist.all_to_all(list(x.chunk(world)), same_shape=True)
        assert [g.tolist() for g in got] == want
        every = idist.gather(x, dst=0, same_shape=True)
        assert [p.tolist() for p in every] == (
            [(x - 100 * rank + 100 * r).tolist() for r in range(world)] if rank == 0 else []
        )
    if idist.backend() == "gloo":  # the kinds are known: the loop took the fast paths
        model = _state.current()
        assert model.fast_gather.knows(x) and model.fast_all_to_all.knows(x)
    flipped = idist.all_to_all(list(x.chunk(world))[::-1], same_shape=True)
    back = 2 * (world - 1 - rank)
    assert [g.tolist() for g in flipped] == [[[100 * j + back, 100 * j + back + 1]]
                                             for j in range(world)]  # fmt: skip
    copied = list(x.chunk(world))
    copied[-1] = copied[-1].clone()
    assert [g.tolist() for g in idist.all_to_all(copied, same_shape=True)] == want
    # Views of a known tensor that lie end to end but are not its chunks along dim 0 (rows
    # of another width): they must go as themselves, not as the tensor's chunks.
    wide = torch.arange(world * 4).view(world, 4) + 100 * rank
    idist.all_to_all(list(wide.chunk(world)), same_shape=True)  # its kind is now known
    halves = [wide.view(-1)[2 * j : 2 * j + 2].view(1, 2) for j in range(world)]
    got = idist.all_to_all(halves, same_shape=True)
    assert [g.tolist() for g in got] == want
    deeper = idist.all_to_all(list(wide.view(world, 4, 1).chunk(world)), same_shape=True)
    assert [tuple(g.shape) for g in deeper] == [(1, 4, 1)] * world
    _raises(ValueError, "dst=", idist.gather, x, dst=world, same_shape=True)
    _raises(TypeError, "dst must be an int", idist.gather, x, dst=0.0, same_shape=True)
    members = [0, world - 1] if world > 1 else [0]
    in_group = idist.all_to_all(
        [torch.tensor([float(rank)]) for _ in members], group=members, same_shape=True
    )
    if rank in members:
        assert [g.item() for g in in_group] == [float(r) for r in members]
    mixed = [torch.zeros(1), torch.zeros(2)] + [torch.zeros(1)] * (world - 2)
    if world > 1:  # a local check, before anything is sent
        _raises(ValueError, "one dtype and shape", idist.all_to_all, mixed, same_shape=True)
    _raises(TypeError, "same_shape must be True or False", idist.gather, torch.ones(1), 0,
            same_shape=1)  # fmt: skip
    _raises(TypeError, "takes a tensor", idist.gather, 3, 0, same_shape=True)


def check_scatter_into_out(tmp: Path) -> None:
    rank, world = _ranks()
    src = world - 1
    given = [torch.full((2, 2), float(r)) for r in range(world)] if rank == src else None
    out = torch.empty(2, 2)
    got = idist.scatter(given, src=src, out=out)
    assert got is out and out.unique().tolist() == [float(rank)]
    wide = torch.empty(1, dtype=torch.uint32)
    idist.scatter([torch.tensor([r], dtype=torch.uint32) for r in range(world)] if rank == 0
                  else None, out=wide)  # fmt: skip
    assert wide.tolist() == [rank]
    members = [0, world - 1] if world > 1 else [0]
    piece = torch.zeros(1)
    sent = [torch.tensor([float(r)]) for r in members] if rank == members[0] else None
    idist.scatter(sent, src=members[0], group=members, out=piece)
    assert piece.tolist() == ([float(rank)] if rank in members else [0.0])
    bad = [torch.zeros(3)] * world
    if rank == 0:  # the source raises after sending zeros: the others, waiting, get them
        _raises(ValueError, "out's dtype and shape", idist.scatter, bad, out=torch.zeros(2))
    else:
        assert idist.scatter(None, out=torch.ones(2)).tolist() == [0.0, 0.0]
    _raises(TypeError, "scatter's out", idist.scatter, None, out=[1.0])
    # The same kind of out again takes the fast path: the same answers and the same errors,
    # also for a bad source list or src once the kind is known (the others still get zeros).
    for step in range(3):
        mine = idist.scatter([torch.full((2, 2), r + step + 0.5) for r in range(world)]
                             if rank == src else None, src=src, out=torch.empty(2, 2))  # fmt: skip
        assert mine.unique().tolist() == [rank + step + 0.5]
    if rank == src:
        for wrong in ([torch.zeros(2, 2, dtype=torch.float64)] * world, [torch.zeros(4)] * world):
            _raises(ValueError, "scatter", idist.scatter, wrong, src=src, out=torch.empty(2, 2))
    else:
        for _ in range(2):
            zeros = idist.scatter(None, src=src, out=torch.ones(2, 2))
            assert zeros.tolist() == [[0.0, 0.0]] * 2
    if idist.backend() == "gloo":  # the kind is known: the loop took the fast path
        assert _state.current().fast_scatter.knows(torch.empty(2, 2))
    _raises(ValueError, "src=", idist.scatter, None, src=world, out=torch.empty(2, 2))
    _raises(TypeError, "src must be an int", idist.scatter, None, src=True, out=torch.empty(2, 2))
    strided = torch.zeros(2, 4)[:, ::2]  # not contiguous: the general path, written back
    given = [torch.arange(4.0).view(2, 2).t() + r for r in range(world)]  # transposed chunks
    idist.scatter(given if rank == 0 else None, out=strided)
    assert strided.tolist() == [[0.0 + rank, 2.0 + rank], [1.0 + rank, 3.0 + rank]]
    again = idist.scatter(given if rank == 0 else None, out=torch.empty(2, 2))  # fast path
    assert again.tolist() == strided.tolist()


def check_extra_collectives_keep_the_device(tmp: Path) -> None:
    """Tensors on ``idist.device()`` come back on it (on NCCL: they never visit the host), and
    a CPU tensor comes back on the CPU, from every collective, also for a dtype the backend
    carries as bytes (uint16)."""
    rank, world = _ranks()
    device = idist.device()
    for where in (device, torch.device("cpu")):
        x = torch.arange(world * 2, dtype=torch.float32, device=where).view(world, 2) + rank
        wide = torch.full((world,), rank, dtype=torch.uint16, device=where)
        members = [0, world - 1] if world > 1 else [0]
        results = {
            "all_reduce": idist.all_reduce(x.clone()),
            "all_gather": idist.all_gather(x),
            "broadcast": idist.broadcast(x.clone(), src=0),
            "reduce": idist.reduce(x.clone(), dst=0),
            "reduce_scatter": idist.reduce_scatter(x),
            "all_to_all": idist.all_to_all(x),
            "all_to_all uint16": idist.all_to_all(wide),
            "scatter": idist.scatter(list(x.unbind()) if rank == 0 else None, src=0),
            "scatter out=": idist.scatter(
                list(x.unbind()) if rank == 0 else None, out=torch.empty(2, device=where)
            ),
            "all_to_all in a group": idist.all_to_all(x[: len(members)], group=members),
        }
        for i, part in enumerate(idist.gather(x, dst=0) + idist.gather(wide, dst=0)):
            results[f"gather {i}"] = part
        for i, part in enumerate(idist.gather(x, dst=0, same_shape=True)):
            results[f"gather same_shape {i}"] = part
        uneven = [torch.full((j + 1,), float(rank), device=where) for j in range(world)]
        for i, part in enumerate(idist.all_to_all(uneven) + idist.all_to_all(list(x.unbind()))):
            results[f"all_to_all list {i}"] = part
        moved = {name: str(out.device) for name, out in results.items() if out.device != where}
        assert not moved, f"results left {where}: {moved}"
        total = sum(range(world))
        assert results["all_reduce"].tolist() == (x * world + total - rank * world).tolist()
        assert results["reduce_scatter"].tolist() == [
            [float(world * (2 * rank + i) + total) for i in range(2)]
        ]
        assert results["all_to_all"].tolist() == [[2.0 * rank + j, 2.0 * rank + 1 + j]
                                                  for j in range(world)]  # fmt: skip
        assert results["all_to_all uint16"].tolist() == list(range(world))
        assert results["scatter"].tolist() == [2.0 * rank, 2.0 * rank + 1]
        assert results["scatter out="].tolist() == [2.0 * rank, 2.0 * rank + 1]


def check_empty_tensors(tmp: Path) -> None:
    """Tensors without elements go through every tensor collective, with the shapes a
    non-empty tensor of their shape would get (XLA's gather op refused them once)."""
    rank, world = _ranks()
    for x in (torch.empty(0, 3), torch.empty(world, 0)):
        rows, rest = x.shape[0], tuple(x.shape[1:])
        assert idist.all_reduce(x.clone()).shape == x.shape
        assert idist.all_gather(x).shape == (world * rows, *rest)
        assert idist.broadcast(x.clone(), src=0).shape == x.shape
        assert idist.reduce(x.clone(), dst=0).shape == x.shape
        parts = idist.gather(x, dst=0)
        assert [p.shape for p in parts] == ([x.shape] * world if rank == 0 else [])
        assert idist.scatter([x] * world if rank == 0 else None).shape == x.shape
        assert idist.reduce_scatter(x).shape == (rows // world, *rest)
        assert idist.all_to_all(x).shape == x.shape
        assert [t.shape for t in idist.all_to_all([x] * world)] == [x.shape] * world


def _unit_strided(values: list[float], dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """``values`` in ``shape`` as a tensor torch calls contiguous whose size-1 dims have stride
    2 (``x[::2][:1]`` makes one): the layout a plain ``view(torch.uint8)`` refuses."""
    base = torch.zeros(2 * len(values) + 3, dtype=dtype)
    due = torch.empty(shape).stride()
    strides = tuple(2 * s if n == 1 else s for n, s in zip(shape, due, strict=True))
    out = base.as_strided(shape, strides, 1)
    out.copy_(torch.tensor(values).reshape(shape))
    assert out.is_contiguous() and out.stride() != due, out.stride()
    return out


def check_size_one_dims_with_any_stride(tmp: Path) -> None:
    """Issue 30: a tensor whose size-1 dims have stride 2 (contiguous for torch) goes through
    every tensor collective, in every dtype, bit for bit (Horovod refused bfloat16 ones in
    broadcast, gather and all_gather)."""
    rank, world = _ranks()
    sliced = torch.arange(4.0).to(torch.bfloat16)[::2][:1]  # shape (1,), stride (2,)
    assert idist.broadcast(sliced.clone() if rank == 0 else sliced * 0, src=0).tolist() == [0.0]
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.int16, torch.uint64,
                  torch.bool, torch.complex64):  # fmt: skip
        for shape in ((1,), (1, 1, 1), (1, 2), (2, 1)):
            count = math.prod(shape)
            mine = [float((rank + 1) * (k + 1) % 2 if dtype is torch.bool else rank + k + 1)
                    for k in range(count)]  # fmt: skip
            x = _unit_strided(mine, dtype, shape)
            every = [
                torch.tensor([float((r + 1) * (k + 1) % 2 if dtype is torch.bool else r + k + 1)
                              for k in range(count)]).to(dtype).reshape(shape)
                for r in range(world)
            ]  # fmt: skip
            label = (dtype, shape)
            gathered = idist.all_gather(x)
            assert torch.equal(gathered, torch.cat(every)), label
            sent = idist.broadcast(x.clone(), src=world - 1)
            assert torch.equal(sent, every[-1]), label
            parts = idist.gather(x, dst=0)
            assert (torch.equal(torch.stack(parts), torch.stack(every)) if rank == 0
                    else parts == []), label  # fmt: skip
            chunks = [_unit_strided(mine, dtype, shape) for _ in range(world)]
            got = idist.scatter(chunks if rank == 0 else None, src=0)
            assert torch.equal(got, every[0]), label
            swapped = idist.all_to_all([_unit_strided(mine, dtype, shape)] * world)
            assert all(torch.equal(a, b) for a, b in zip(swapped, every, strict=True)), label
            if dtype in (torch.bool, torch.complex64):
                continue
            summed = idist.all_reduce(x.clone())
            assert torch.equal(summed, sum(e.to(torch.float64) for e in every).to(dtype)), label
            highest = idist.all_reduce(x.clone(), "MAX")
            assert torch.equal(highest, every[-1]), label


def check_extra_collectives_in_groups(tmp: Path) -> None:
    rank, world = _ranks()
    members = [0, world - 1] if world > 1 else [0]
    inside = rank in members
    me = members.index(rank) if inside else -1
    x = torch.tensor([float(rank + 1)])
    out = idist.reduce(x.clone(), dst=members[-1], op="SUM", group=members)
    want = sum(r + 1 for r in members) if rank == members[-1] else rank + 1
    assert out.item() == want
    parts = idist.gather(torch.tensor([rank]), dst=members[0], group=members)
    assert [p.item() for p in parts] == (members if rank == members[0] else [])
    given = [torch.tensor([r]) for r in members] if rank == members[0] else None
    piece = idist.scatter(given, src=members[0], group=members)
    assert (piece.tolist() == [rank]) if inside else piece is None
    rs = idist.reduce_scatter(torch.ones(len(members), 2), group=members)
    assert rs.tolist() == ([[float(len(members))] * 2] if inside else [[1.0, 1.0]] * len(members))
    a2a = idist.all_to_all([torch.tensor([rank, j]) for j in range(len(members))], group=members)
    if inside:
        assert [t.tolist() for t in a2a] == [[src, me] for src in members]
    else:
        assert [t.tolist() for t in a2a] == [[rank, j] for j in range(len(members))]


def check_extra_collectives_bad_input(tmp: Path) -> None:
    """Bad input: a clear error on every rank, never a hang."""
    rank, world = _ranks()
    for call in (
        lambda: idist.reduce(torch.ones(1), dst=world),
        lambda: idist.gather(torch.ones(1), dst=-1),
        lambda: idist.scatter(None, src=world),
        lambda: idist.all_to_all([torch.ones(1)] * (world + 1)),
        lambda: idist.reduce(torch.ones(1, dtype=torch.int64), op="AVG"),
        lambda: idist.reduce(torch.ones(1), dst="0"),
    ):
        try:
            call()
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError("bad input was accepted")
    # the source alone sees the bad list; every rank still raises together
    bad = [torch.ones(1)] * (world + 1) if rank == 0 else None
    try:
        idist.scatter(bad, src=0)
    except ValueError as err:
        assert (
            ("list of" in str(err))
            if rank == 0
            else ("see that rank" in str(err) or "list of" in str(err))
        )
    else:
        raise AssertionError("a bad scatter list must raise on every rank")


class _JsonSerializer:
    def dumps(self, obj: Any) -> bytes:
        import json

        return json.dumps(obj).encode("utf-8")

    def loads(self, data: bytes) -> Any:
        import json

        return json.loads(data)


def check_object_collectives(tmp: Path) -> None:
    import numpy as np

    rank, world = _ranks()
    mine = {
        "rank": rank,
        "array": np.arange(1000 * (rank + 1), dtype=np.float32) + rank,
        "tensor": torch.full((rank + 2, 3), float(rank)),
        "grad": torch.ones(2, requires_grad=True),
        "empty": torch.empty(0, 4),
        "text": "ünï" * rank,
        "nested": [Path(f"/r{rank}"), (rank, None)],
    }
    got = idist.all_gather_object(mine)
    assert [g["rank"] for g in got] == list(range(world))
    for r, g in enumerate(got):
        assert g["array"].dtype == np.float32 and g["array"].shape == (1000 * (r + 1),)
        assert g["array"][0] == r and g["array"][-1] == 1000 * (r + 1) - 1 + r
        assert g["tensor"].shape == (r + 2, 3) and g["tensor"].unique().tolist() == [float(r)]
        assert g["grad"].requires_grad and g["empty"].shape == (0, 4)
        assert g["text"] == "ünï" * r and g["nested"] == [Path(f"/r{r}"), (r, None)]
    dst = world - 1
    gathered = idist.gather_object({"r": rank}, dst=dst)
    assert gathered == ([{"r": r} for r in range(world)] if rank == dst else [])
    config = idist.broadcast_object({"lr": 0.1, "steps": [1, 2]} if rank == 0 else None)
    assert config == {"lr": 0.1, "steps": [1, 2]}
    shards = [list(range(r + 1)) for r in range(world)] if rank == src_of(world) else None
    assert idist.scatter_object(shards, src=src_of(world)) == list(range(rank + 1))
    big = idist.all_gather_object(np.full(300_000 + rank, rank, dtype=np.float32))  # > 1 MiB
    assert [b.shape[0] for b in big] == [300_000 + r for r in range(world)]
    assert [float(b[0]) for b in big] == [float(r) for r in range(world)]
    plain = idist.all_gather_object({"k": [rank]}, serializer=_JsonSerializer())
    assert plain == [{"k": [r]} for r in range(world)]


def src_of(world: int) -> int:
    return world // 2


def check_object_collective_errors(tmp: Path) -> None:
    """An object that cannot be pickled on one rank: every rank raises, none hangs."""
    import threading

    rank, world = _ranks()
    value: Any = threading.Lock() if rank == world - 1 else {"fine": rank}
    for call in (
        lambda: idist.all_gather_object(value),
        lambda: idist.gather_object(value, dst=0),
        lambda: (
            idist.broadcast_object(value if rank == 0 else None, src=0)
            if world - 1 == 0
            else idist.broadcast_object(value, src=world - 1)
        ),
    ):
        try:
            call()
        except TypeError as err:
            assert "serialize" in str(err), err
        else:
            raise AssertionError("an unpicklable object must raise on every rank")
    try:
        idist.scatter_object([1] * (world + 1) if rank == 0 else None, src=0)
    except ValueError as err:
        assert "list of" in str(err) or "see its error" in str(err)
    except TypeError as err:
        assert "see its error" in str(err)
    else:
        raise AssertionError("a bad scatter_object list must raise on every rank")


def check_dict_reductions(tmp: Path) -> None:
    rank, world = _ranks()
    metrics = {
        "loss": torch.tensor(float(rank + 1)),
        "hist": torch.full((3,), rank, dtype=torch.int64),
        "count": rank + 1,
        "acc": 0.5 * rank,
    }
    summed = idist.all_reduce_dict(metrics, op="sum")
    n = sum(range(1, world + 1))
    assert summed["loss"].item() == float(n) and summed["loss"].dtype == torch.float32
    assert (
        summed["hist"].tolist() == [sum(range(world))] * 3 and summed["hist"].dtype == torch.int64
    )
    assert summed["count"] == n and type(summed["count"]) is int
    assert summed["acc"] == 0.5 * sum(range(world))
    mean = idist.all_reduce_dict(metrics, op="mean")
    assert math.isclose(mean["loss"].item(), n / world)
    assert mean["hist"].dtype == torch.float64 and type(mean["count"]) is float
    reduced = idist.reduce_dict({"loss": torch.tensor(float(rank))}, average=True, dst=0)
    want = sum(range(world)) / world if rank == 0 else float(rank)
    assert reduced["loss"].item() == want
    averaged = idist.average_across_processes(torch.tensor([float(rank)]))
    assert averaged.item() == sum(range(world)) / world
    assert idist.average_across_processes({"x": float(rank)}) == {"x": sum(range(world)) / world}
    try:
        idist.all_reduce_dict({"a" if rank == 0 else "b": 1.0})
    except ValueError as err:
        assert world > 1 and "differ across ranks" in str(err)
    else:
        assert world == 1, "different keys on different ranks must raise"


def check_shared_seed_and_results(tmp: Path) -> None:
    import numpy as np

    rank, world = _ranks()
    np.random.seed(1000 + rank)  # different generators on purpose
    seeds = idist.all_gather(idist.shared_random_seed())
    assert len(set(seeds)) == 1 and 0 <= seeds[0] < 2**31
    total = 10
    padded = list(range(total)) + list(range(-(total % world or world) % world))
    mine = padded[rank::world]  # what DistributedSampler(shuffle=False) gives this rank
    assert idist.gather_results(mine, total=total) == list(range(total))
    contiguous = idist.gather_results([f"{rank}-{i}" for i in range(2)], order="contiguous")
    assert contiguous == [f"{r}-{i}" for r in range(world) for i in range(2)]
    uneven = idist.gather_results(list(range(rank + 1)), dst=0)
    longest = world
    expected = [i for i in range(longest) for r in range(world) if i < r + 1]
    assert uneven == (expected if rank == 0 else [])


def check_process_helpers(tmp: Path) -> None:
    rank, _ = _ranks()
    assert idist.is_main_process() == (rank == 0)
    idist.synchronize()
    assert idist.get_local_size() == idist.get_nproc_per_node()
    local = idist.get_local_group()
    assert idist.get_local_group() is local, "the machine group must be created once"
    assert idist.all_reduce(1, group=local) == idist.get_nproc_per_node()

    @idist.rank_zero_only
    def only_zero() -> str:
        return "zero"

    assert only_zero() == ("zero" if rank == 0 else None)
    assert idist.gpu_mem_usage() >= 0.0
    assert not idist.is_module_wrapper(torch.nn.Linear(1, 1))


def check_auto_training(tmp: Path) -> None:
    """Three calls make a loop distributed: shards cover the data once, weights stay equal."""
    import warnings

    from torch.utils.data import TensorDataset

    _, world = _ranks()
    torch.manual_seed(0)
    dataset = TensorDataset(torch.arange(24.0).unsqueeze(1), torch.arange(24.0))
    global_batch = 4 * world
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a global batch that divides must not warn
        loader = idist.auto_dataloader(dataset, batch_size=global_batch, shuffle=False)
    seen = [int(x) for batch in loader for x in batch[1].tolist()]
    assert all(len(b[1]) <= 4 for b in loader), "each process loads global_batch / world"
    everything = [x for part in idist.all_gather_object(seen) for x in part]
    assert set(everything) == set(range(24)), "every sample is seen by some rank"
    assert len(everything) == -(-24 // world) * world, "only DistributedSampler's padding repeats"
    model = idist.auto_model(torch.nn.Linear(1, 1))
    if world > 1 and idist.model_name() == "native-dist":
        assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.01))
    for x, y in loader:
        optimizer.zero_grad()
        x, y = x.to(idist.device()), y.to(idist.device())
        torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        optimizer.step()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = idist.all_gather(weights.unsqueeze(0))
    assert all(torch.equal(every[0], row) for row in every), "weights differ across ranks"
    if world > 1:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            idist.auto_dataloader(dataset, batch_size=world + 1)
        assert any("global batch size" in str(w.message) for w in caught)


def check_finalize_and_reinitialize(tmp: Path) -> None:
    """Leave the job and join it again: a fresh context, nothing stale (runs last)."""
    rank, world = _ranks()
    backend = idist.backend()
    assert backend is not None
    idist.finalize()
    launched = environments.detect()  # the serial model answers with the launcher's values
    assert idist.model_name() == "serial"
    assert idist.get_world_size() == (launched.world_size if launched else 1)
    if launched is not None and launched.world_size > 1:
        assert idist.get_rank() == rank
        try:
            idist.all_reduce(1)  # a world-of-one answer would be silently wrong
        except idist.DistributedError as err:
            assert "Call idist.initialize(backend) first" in str(err), err
        else:
            raise AssertionError("a collective between finalize() and initialize() must raise")
    idist.initialize(backend)
    assert idist.get_rank() == rank and idist.get_world_size() == world
    assert idist.all_reduce(1) == world
    assert idist.all_gather(f"again{rank}") == [f"again{r}" for r in range(world)]


CHECKS = [name for name in dir() if name.startswith("check_")]
# Re-initialization changes the context, so it runs after every other check.
CHECKS.remove("check_finalize_and_reinitialize")
CHECKS.append("check_finalize_and_reinitialize")


EXTRA_CHECKS = [n for n in CHECKS if "reduce" in n or "gather_uneven" in n or "scatter" in n
                or "all_to_all" in n or "extra" in n]  # fmt: skip


def run_checks_emulated(local_rank: int, names: list[str], tmp: str) -> dict[str, str]:
    """Run checks with the native model's own ops switched off: the base class's default
    emulations of reduce, gather, scatter, reduce_scatter and all_to_all do the work."""
    with emulating():
        return run_checks(local_rank, names, tmp)


def run_checks(local_rank: int, names: list[str], tmp: str) -> dict[str, str]:
    """Run the named checks in order; map each name to "ok" or its traceback."""
    results: dict[str, str] = {}
    for name in names:
        folder = Path(tmp) / name
        folder.mkdir(exist_ok=True)
        idist.barrier()
        try:
            globals()[name](folder)
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    return results
