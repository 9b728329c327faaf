"""Per-rank bodies for ``test_ignite_differential_gloo.py``: the same calls to
``ignite.distributed`` and to distbridge on one real gloo world. ignite adopts the world
distbridge made (``ignite.distributed.sync``), so both act on the same ranks.

Mismatches are collected, never raised, so every rank runs every call (a rank that stopped
half way would leave the other one waiting)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import ignite.distributed as ignite_dist
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DistributedSampler

import distbridge as idist

__all__ = ["bad_input", "good_input", "ignites_words", "loaders", "outside_the_group"]

LIBS: dict[str, ModuleType] = {"ignite": ignite_dist, "distbridge": idist}

_NUMBERS = st.one_of(
    st.integers(-(2**20), 2**20), st.floats(allow_nan=False, allow_infinity=False, width=32)
)
_TENSORS = st.lists(st.integers(-100, 100), min_size=1, max_size=4).map(torch.tensor)


def _same(ours: Any, theirs: Any) -> bool:
    if type(ours) is not type(theirs):
        return False
    if isinstance(ours, torch.Tensor):
        return ours.dtype == theirs.dtype and torch.equal(ours, theirs)
    if isinstance(ours, list):
        return len(ours) == len(theirs) and all(map(_same, ours, theirs))
    return bool(ours == theirs)


def _result(call: Callable[[ModuleType], Any], lib: ModuleType) -> Any:
    """What ``call(lib)`` returns, or the exception it raised (as text): a rank never leaves
    a case half way, so hypothesis runs the same cases on both."""
    try:
        return call(lib)
    except Exception as err:  # compared across the libraries
        return f"raised {err!r}"


def good_input(local_rank: int, count: int) -> list[str]:
    """Queries, then ``count`` drawn values through all_reduce / all_gather / broadcast on
    both libraries (the draws are derandomized: the same on every rank)."""
    ignite_dist.sync()
    rank = idist.get_rank()
    failures: list[str] = []
    for name in (
        "backend",
        "model_name",
        "device",
        "get_world_size",
        "get_rank",
        "get_local_rank",
        "get_nproc_per_node",
        "get_nnodes",
        "get_node_rank",
        "hostname",
    ):
        ours, theirs = getattr(idist, name)(), getattr(ignite_dist, name)()
        if not _same(ours, theirs):
            failures.append(f"{name}: distbridge {ours!r}, ignite {theirs!r}")

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        number=_NUMBERS,
        tensor=_TENSORS,
        # ASCII: ignite sizes a str by its characters and sends its UTF-8 bytes, so other
        # text desyncs ignite's ranks (docs/differences.md); distbridge's is tested elsewhere
        text=st.text(st.characters(max_codepoint=127), max_size=5),
        op=st.sampled_from(["SUM", "MIN", "MAX", "PRODUCT"]),
        src=st.integers(0, 1),
    )
    def case(number: Any, tensor: torch.Tensor, text: str, op: str, src: int) -> None:
        mine = number if rank == 0 else -number  # different values on the two ranks
        calls: dict[str, Callable[[ModuleType], Any]] = {
            f"all_reduce({mine!r}, {op})": lambda lib: lib.all_reduce(mine, op=op),
            f"all_reduce(tensor, {op})": lambda lib: lib.all_reduce(tensor.clone() + rank, op=op),
            f"all_gather({mine!r})": lambda lib: lib.all_gather(mine),
            "all_gather(tensor)": lambda lib: lib.all_gather(tensor + rank),
            f"all_gather({text!r})": lambda lib: lib.all_gather(text * (rank + 1)),
            f"broadcast({mine!r}, src={src})": lambda lib: lib.broadcast(mine, src=src),
            f"broadcast(tensor, src={src})": lambda lib: lib.broadcast(tensor + rank, src=src),
            f"broadcast({text!r}, src={src})": lambda lib: lib.broadcast(text + str(rank), src=src),
        }
        sent = number if src == 0 else -number
        for what, call in calls.items():
            ours, theirs = _result(call, idist), _result(call, ignite_dist)
            if what.startswith(f"broadcast({mine!r}"):  # differs on purpose: migration.md,
                # "relies on numbers arriving as floats": ignite sends float32
                as_float32 = torch.tensor(sent, dtype=torch.float32).item()
                same = type(ours) is type(sent) and ours == sent and theirs == as_float32
            elif isinstance(ours, float) and isinstance(theirs, float) and op == "PRODUCT":
                same = ours == theirs or abs(ours - theirs) <= 1e-6 * abs(theirs)
            else:
                same = _same(ours, theirs)
            if not same:
                failures.append(f"{what}: distbridge {ours!r}, ignite {theirs!r}")

    case()
    return failures


def outside_the_group(local_rank: int) -> dict[str, Any]:
    """Items 4 and 9: a rank outside the group gets its input back, on both libraries; an
    empty group is one no rank belongs to."""
    ignite_dist.sync()
    rank = idist.get_rank()
    obj = {"rank": rank}
    tensor = torch.tensor([rank + 1.0])
    out: dict[str, Any] = {}
    for name, lib in LIBS.items():
        out[f"{name} object"] = lib.all_gather(obj, group=[1])
        out[f"{name} tensor"] = lib.all_gather(tensor, group=[1]).tolist()
    # torch 2.13's new_group(ranks=[]) fails inside ignite's native model (a TypeError from
    # ProcessGroup's constructor); distbridge gives what ignite's serial model and torch's
    # documentation say: a group no rank belongs to
    empty = idist.new_group([])
    out["empty group"] = empty
    out["empty all_reduce"] = idist.all_reduce(tensor.clone(), group=empty).tolist()
    out["empty all_gather"] = idist.all_gather(obj, group=empty)
    out["empty all_reduce of a list"] = idist.all_reduce(7, group=[])
    out["ignite's serial new_group([])"] = ignite_dist.utils._SerialModel().new_group([])
    out["ignite new_group([])"] = repr(_raised(lambda lib: lib.new_group([]), ignite_dist))
    return out


def _raised(call: Callable[[ModuleType], Any], lib: ModuleType) -> BaseException | None:
    try:
        call(lib)
    except Exception as err:  # compared across the libraries
        return err
    return None


def bad_input(local_rank: int) -> list[str]:
    """Items 3, 9 and 10 on 2 ranks: where ignite raises, distbridge raises an instance of its
    type (ignite's native model checks groups, unlike its serial one)."""
    ignite_dist.sync()
    failures: list[str] = []
    cases: dict[str, Callable[[ModuleType], Any]] = {
        "all_gather(t, group='abc')": lambda lib: lib.all_gather(torch.ones(1), group="abc"),
        "all_reduce(t, group='abc')": lambda lib: lib.all_reduce(torch.ones(1), group="abc"),
        "all_gather(obj, group={0})": lambda lib: lib.all_gather({"a": 1}, group={0}),
        "new_group(['a', 'b', 'c'])": lambda lib: lib.new_group(["a", "b", "c"]),
        "new_group('01')": lambda lib: lib.new_group("01"),
        "one_rank_first(rank=100)": lambda lib: lib.one_rank_first(rank=100).__enter__(),
        "one_rank_first(rank=2, local=True)": (
            lambda lib: lib.one_rank_first(rank=2, local=True).__enter__()
        ),
        "all_reduce(t, op='XOR')": lambda lib: lib.all_reduce(torch.ones(1), op="XOR"),
        "broadcast(None)": lambda lib: lib.broadcast(None),
        "DistributedProxySampler(None)": lambda lib: lib.DistributedProxySampler(None),
    }
    for what, call in cases.items():
        theirs, ours = _raised(call, ignite_dist), _raised(call, idist)
        if theirs is None:
            failures.append(f"{what}: ignite raised nothing (the case is not bad input)")
        elif not isinstance(ours, type(theirs)):
            failures.append(f"{what}: ignite {theirs!r}, distbridge {ours!r}")
    return failures


#: pytorch-ignite's own ``pytest.raises(match=...)`` regexes that need several ranks (its serial
#: model raises none of these): tests/ignite/distributed/utils/__init__.py. Rank 0 is the source
#: of ``broadcast(None)``, so its regex differs from the other ranks'.
IGNITE_WORDS: dict[str, tuple[Callable[[ModuleType], Any], str, str]] = {
    "all_reduce('abc')": (lambda lib: lib.all_reduce("abc"), *["Unhandled input type"] * 2),
    "all_reduce([0, 1, 2])": (lambda lib: lib.all_reduce([0, 1, 2]), *["Unhandled input type"] * 2),
    "broadcast([0, 1, 2])": (
        lambda lib: lib.broadcast([0, 1, 2], src=0),
        *["Unhandled input type"] * 2,
    ),
    "all_reduce(10, op='ABC')": (
        lambda lib: lib.all_reduce(10, op="ABC"),
        *["Unsupported reduction operation"] * 2,
    ),
    "all_reduce(t, group='abc')": (
        lambda lib: lib.all_reduce(torch.ones(1), group="abc"),
        *["Argument group should be list of int or ProcessGroup"] * 2,
    ),
    "all_gather(t, group='abc')": (
        lambda lib: lib.all_gather(torch.ones(1), group="abc"),
        *["Argument group should be list of int"] * 2,
    ),
    "broadcast(None, src=0)": (
        lambda lib: lib.broadcast(None, src=0),
        "Source data can not be None",
        "Argument safe_mode should be True",
    ),
    "new_group(['a', 'b', 'c'])": (
        lambda lib: lib.new_group(["a", "b", "c"]),
        *["Argument ranks should be list of int"] * 2,
    ),
    "one_rank_first(rank=100)": (
        lambda lib: lib.one_rank_first(rank=100).__enter__(),
        *[r"rank should be between 0 and 1, but given 100"] * 2,
    ),
}


def ignites_words(local_rank: int) -> list[str]:
    """Item 5 of issue 38 on 2 ranks: each of ignite's regexes matches ignite's message (the
    table is ignite's) and distbridge's, raised with ignite's type."""
    ignite_dist.sync()
    failures: list[str] = []
    for what, (call, on_src, elsewhere) in IGNITE_WORDS.items():
        regex = on_src if idist.get_rank() == 0 else elsewhere
        theirs, ours = _raised(call, ignite_dist), _raised(call, idist)
        if theirs is None or not re.search(regex, str(theirs)):
            failures.append(f"{what}: the table is not ignite's: {regex!r} vs {theirs!r}")
        elif not isinstance(ours, type(theirs)) or not re.search(regex, str(ours)):
            failures.append(f"{what}: {regex!r} does not match distbridge's {ours!r}")
    return failures


def loaders(local_rank: int) -> dict[str, Any]:
    """Item 8: auto_dataloader given a batch_sampler, and a DistributedSampler made for
    another rank and world size, on both libraries: the warnings and the batches."""
    ignite_dist.sync()
    rank = idist.get_rank()
    data = list(range(12))
    out: dict[str, Any] = {}
    for name, lib in LIBS.items():
        batches = BatchSampler(DistributedSampler(data, 2, rank, shuffle=False), 2, False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = lib.auto_dataloader(data, batch_sampler=batches)
        out[f"{name} batch_sampler batches"] = [b.tolist() for b in loader]
        out[f"{name} batch_sampler warnings"] = [str(w.message) for w in caught]
        wrong = DistributedSampler(data, num_replicas=3, rank=1 - rank, shuffle=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = lib.auto_dataloader(data, sampler=wrong, batch_size=4)
        out[f"{name} sampler batches"] = [b.tolist() for b in loader]
        out[f"{name} sampler warnings"] = [str(w.message) for w in caught]
    return out
