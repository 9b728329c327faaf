"""Differential compatibility with pytorch-ignite itself, in a world of one.

The same calls go to ``ignite.distributed`` and to distbridge side by side:

- bad input (generated with hypothesis where it varies): whenever ignite raises, distbridge
  raises an instance of ignite's type (``except`` clauses written for ignite keep working);
- good input: the same results and types, and the same environment variables set by
  ``initialize`` and restored by ``finalize``;
- the launch paths of a world of one: hand-set variables, ``file://``, ``tcp://``.

Where distbridge differs on purpose, the test asserts distbridge's behaviour and names the
row of docs/migration.md that says why (``ON_PURPOSE``; ``test_every_row_is_in_migration``).
The 2-rank half is ``tests/distributed/test_ignite_differential_gloo.py``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler, Sampler

import distbridge as idist
from distbridge.errors import DistributedError
from tests.unit.test_facade import LAUNCH_VARS

ignite_dist = pytest.importorskip(
    "ignite.distributed", reason="pytorch-ignite is not installed (the test extra has it)"
)

LIBS = {"ignite": ignite_dist, "distbridge": idist}
MIGRATION = Path(__file__).resolve().parents[2] / "docs" / "migration.md"
FAST = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

#: Where distbridge differs from ignite on purpose: the case, and the text of its row in
#: docs/migration.md's table of differences.
ON_PURPOSE = {
    "all_gather_tensors_with_shapes(1)": "| `all_gather_tensors_with_shapes` of a non-tensor |",
    "Parallel(init_method='tcp://...')": '| `init_method="tcp://..."` in `initialize`',
    "initialize under hand-set RANK / WORLD_SIZE=1": "| `initialize` under hand-set `RANK`",
    "initialize's variables": "| the variables `initialize` sets |",
    "new_group(tuple)": "| `new_group` of a tuple or a range |",
    "Parallel(nnodes=...) without nproc_per_node": "| `nnodes`, `node_rank`, `master_addr`",
    "group='abc'": "| a `group=` or `new_group()` argument that is no group |",
    "a node whose other node never comes": "| a node of a multi-node `spawn` / `Parallel`",
    "new_group([]) on 2 ranks": "| `new_group([])` on several ranks |",
    "broadcast of a number on 2 ranks": "| `broadcast` of a number on several ranks",
}
_LAUNCH_VARS = LAUNCH_VARS

# pytorch-ignite 0.5.5 itself fails where torch_xla 2.9 is installed (it calls
# torch_xla.core.xla_model.xrt_world_size, which torch_xla removed), so the reference is
# missing in the XLA session (nox -s xla); the main run compares against it.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch_xla") is not None,
    reason="pytorch-ignite 0.5.5 fails with torch_xla 2.9 installed (xm.xrt_world_size is "
    "gone): no reference to compare with",
)


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher variables around: both libraries start serial."""
    for name in _LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    ignite_dist.utils._set_model(ignite_dist.utils._SerialModel())
    yield
    ignite_dist.utils._set_model(ignite_dist.utils._SerialModel())


def outcome(call: Callable[[ModuleType], Any], lib: ModuleType) -> tuple[str, Any]:
    """``("ok", result)`` or ``("raised", exception)``, warnings kept quiet."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return "ok", call(lib)
        except Exception as err:  # the differential compares what was raised
            return "raised", err


def same_exception_kind(call: Callable[[ModuleType], Any]) -> tuple[str, Any]:
    """Run ``call`` on both; when ignite raises, distbridge raises an instance of its type.
    Returns ignite's outcome."""
    ignite_kind, ignite_value = outcome(call, ignite_dist)
    ours_kind, ours_value = outcome(call, idist)
    if ignite_kind == "raised":
        assert ours_kind == "raised", f"ignite raised {ignite_value!r}, distbridge returned"
        assert isinstance(ours_value, type(ignite_value)), (
            f"ignite raised {type(ignite_value).__name__}: {ignite_value}; distbridge raised "
            f"{type(ours_value).__mro__}: {ours_value}"
        )
    return ignite_kind, ignite_value


def without(mapping: dict[str, str], *keys: str) -> dict[str, str]:
    return {k: v for k, v in mapping.items() if k not in keys}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- (a) bad input: distbridge raises an instance of ignite's type --------------------------

_NOT_INTS = st.one_of(st.text(max_size=3), st.floats(), st.none(), st.lists(st.integers()))
_BAD_BACKENDS = st.one_of(
    st.sampled_from(["nccl", "mpi", "xla-tpu", "horovod", "GLOO", ""]),
    st.text(max_size=8).filter(lambda b: b != "gloo"),
)


@FAST
@given(
    ranks=st.one_of(
        st.lists(st.integers(0, 3)).flatmap(
            lambda good: st.lists(_NOT_INTS, min_size=1).map(lambda bad: good + bad)
        ),
        st.text(max_size=4),
        st.integers(),
        st.dictionaries(st.integers(0, 2), st.integers(0, 2)),
    )
)
def test_new_group_of_no_list_of_ints_raises_ignites_type(ranks: Any) -> None:
    kind, _ = same_exception_kind(lambda lib: lib.new_group(ranks))
    assert kind == "raised"  # every draw is bad input to ignite


@FAST
@given(rank=st.integers(-(2**40), 2**40).filter(lambda r: r != 0), local=st.booleans())
def test_one_rank_first_out_of_range_raises_ignites_type(rank: int, local: bool) -> None:
    def enter(lib: ModuleType) -> None:
        with lib.one_rank_first(rank=rank, local=local):
            pass

    kind, _ = same_exception_kind(enter)
    assert kind == "raised"


@FAST
@given(backend=_BAD_BACKENDS, how=st.sampled_from(["initialize", "spawn", "Parallel"]))
def test_unknown_or_unavailable_backend_raises_ignites_type(backend: str, how: str) -> None:
    calls: dict[str, Callable[[ModuleType], Any]] = {
        "initialize": lambda lib: lib.initialize(backend),
        "spawn": lambda lib: lib.spawn(backend, print, args=(), nproc_per_node=1),
        "Parallel": lambda lib: lib.Parallel(backend=backend),
    }
    kind, _ = same_exception_kind(calls[how])
    assert kind == "raised"
    assert not torch.distributed.is_initialized()


@FAST
@given(
    name=st.sampled_from(["nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port"]),
    value=st.one_of(st.integers(1, 4), st.just("127.0.0.1")),
)
def test_parallel_without_backend_refuses_spawn_arguments_as_ignite(name: str, value: Any) -> None:
    kind, _ = same_exception_kind(lambda lib: lib.Parallel(backend=None, **{name: value}))
    assert kind == "raised"


@FAST
@given(
    nproc_per_node=st.one_of(st.integers(-3, 3), st.just("2")),
    nnodes=st.one_of(st.none(), st.integers(-2, 3)),
    node_rank=st.one_of(st.none(), st.integers(-2, 4)),
    master_addr=st.sampled_from([None, "127.0.0.1"]),
    master_port=st.sampled_from([None, 29411, "29411"]),
    init_method=st.sampled_from([None, "env://"]),
)
def test_parallel_layout_checks_match_ignite(
    nproc_per_node: Any,
    nnodes: int | None,
    node_rank: int | None,
    master_addr: str | None,
    master_port: Any,
    init_method: str | None,
) -> None:
    """Parallel's checks after the backend (ignite's own test stops at its first check): the
    same layouts are refused, with ignite's type, and the same are taken."""

    def make(lib: ModuleType) -> Any:
        return lib.Parallel(
            backend="gloo",
            nproc_per_node=nproc_per_node,
            nnodes=nnodes,
            node_rank=node_rank,
            master_addr=master_addr,
            master_port=master_port,
            init_method=init_method,
        )

    kind, _ = same_exception_kind(make)
    if kind == "ok":
        assert outcome(make, idist)[0] == "ok"  # what ignite takes, distbridge takes


@FAST
@given(
    sampler=st.one_of(
        st.none(),
        st.integers(),
        st.text(max_size=3),
        st.lists(st.integers(), max_size=3),
        st.builds(
            lambda n: DistributedSampler(range(n), num_replicas=1, rank=0), st.integers(1, 9)
        ),
        st.just(Sampler()),  # no __len__
    )
)
def test_distributed_proxy_sampler_refuses_as_ignite(sampler: Any) -> None:
    kind, _ = same_exception_kind(lambda lib: lib.DistributedProxySampler(sampler))
    assert kind == "raised"


@FAST
@given(batch_size=st.integers(-5, 0), safe_mode=st.booleans())
def test_bad_values_of_collectives_and_loaders_raise_ignites_type(
    batch_size: int, safe_mode: bool
) -> None:
    kind, _ = same_exception_kind(
        lambda lib: lib.auto_dataloader(list(range(4)), batch_size=batch_size)
    )
    assert kind == "raised"
    kind, _ = same_exception_kind(lambda lib: lib.broadcast(None, safe_mode=safe_mode))
    assert kind == "raised"


def test_fixed_cases_raise_ignites_type() -> None:
    cases: dict[str, Callable[[ModuleType], Any]] = {
        "one_rank_first(rank=100)": lambda lib: lib.one_rank_first(rank=100).__enter__(),
        "DistributedProxySampler(None)": lambda lib: lib.DistributedProxySampler(None),
        "Parallel(backend='abc')": lambda lib: lib.Parallel(backend="abc"),
        "new_group(['a', 'b', 'c'])": lambda lib: lib.new_group(["a", "b", "c"]),
        "auto_model(3)": lambda lib: lib.auto_model(3),
        "barrier(5)": lambda lib: lib.barrier(5),
        "spawn(None, ...)": lambda lib: lib.spawn(None, print, args=()),
    }
    for name, call in cases.items():
        kind, _ = same_exception_kind(call)
        assert kind == "raised", name


#: pytorch-ignite's own ``pytest.raises(match=...)`` regexes (tests/ignite/distributed: test_auto,
#: test_launcher, utils/__init__, utils/test_native, utils/test_horovod, utils/test_xla), with the
#: call each checks in a world of one. A user's suite has the same checks: each regex must
#: match ignite's message (the table is true to the installed ignite) and distbridge's. The
#: checks that need several ranks are in tests/distributed/ignite_targets.py (``IGNITE_WORDS``).
IGNITE_REGEXES: dict[str, tuple[Callable[[ModuleType], Any], str]] = {
    "new_group(['a', 'b', 'c'])": (
        lambda lib: lib.new_group(["a", "b", "c"]),
        "Argument ranks should be list of int",
    ),
    "new_group(1)": (lambda lib: lib.new_group(1), "Argument ranks should be list of int"),
    "one_rank_first(rank=100)": (
        lambda lib: lib.one_rank_first(rank=100).__enter__(),
        "rank should be between 0 and 0, but given 100",
    ),
    "Parallel(backend='abc')": (
        lambda lib: lib.Parallel(backend="abc"),
        r"Unknown backend 'abc'. Available backends:",
    ),
    "Parallel(nnodes=2)": (
        lambda lib: lib.Parallel(nnodes=2),
        r"If backend is None, argument 'nnodes' should be also None",
    ),
    "Parallel(nproc_per_node=-1)": (
        lambda lib: lib.Parallel(backend="gloo", nproc_per_node=-1),
        r"Argument nproc_per_node should positive",
    ),
    "Parallel(nnodes=-1)": (
        lambda lib: lib.Parallel(backend="gloo", nproc_per_node=1, nnodes=-1),
        r"Argument nnodes should positive",
    ),
    "Parallel(nnodes=2) without node_rank": (
        lambda lib: lib.Parallel(backend="gloo", nproc_per_node=1, nnodes=2),
        r"If number of nodes larger than one",
    ),
    "Parallel(node_rank=2) of 2 nodes": (
        lambda lib: lib.Parallel(backend="gloo", nproc_per_node=1, nnodes=2, node_rank=2),
        r"Argument node_rank should be between 0 and",
    ),
    "Parallel(nnodes=2) without master_addr": (
        lambda lib: lib.Parallel(backend="gloo", nproc_per_node=1, nnodes=2, node_rank=1),
        r"If number of nodes larger than one, arguments master_addr and master_port",
    ),
    "DistributedProxySampler(None)": (
        lambda lib: lib.DistributedProxySampler(None),
        r"Argument sampler should be instance of torch Sampler",
    ),
    "DistributedProxySampler(Sampler())": (
        lambda lib: lib.DistributedProxySampler(Sampler()),
        r"Argument sampler should have length",
    ),
    "DistributedProxySampler(DistributedSampler)": (
        lambda lib: lib.DistributedProxySampler(
            DistributedSampler(range(4), num_replicas=2, rank=0)
        ),
        r"Argument sampler must not be a distributed sampler already",
    ),
    "spawn('abc')": (
        lambda lib: lib.spawn("abc", print, args=(), nproc_per_node=1),
        r"Backend should be one of",
    ),
    "spawn('horovod') without Horovod": (
        lambda lib: lib.spawn("horovod", print, args=(), nproc_per_node=1),
        r"Backend should be one of",
    ),
    "spawn('xla-tpu') without torch_xla": (
        lambda lib: lib.spawn("xla-tpu", print, args=(), nproc_per_node=1),
        r"Backend should be one of",
    ),
}


@pytest.mark.parametrize("case", sorted(IGNITE_REGEXES))
def test_messages_contain_ignites_words(case: str) -> None:
    call, regex = IGNITE_REGEXES[case]
    if case.startswith("spawn(") and case.split("'")[1] in idist.available_backends():
        pytest.skip(f"{case.split('(')[1].split(')')[0]} is available here")
    kind, theirs = outcome(call, ignite_dist)
    assert kind == "raised" and re.search(regex, str(theirs)), (
        f"the table is not ignite's: {regex!r} vs {theirs!r}"
    )
    kind, ours = outcome(call, idist)
    assert kind == "raised" and isinstance(ours, type(theirs)), ours
    assert re.search(regex, str(ours)), f"{regex!r} does not match distbridge's {ours}"
    assert str(ours).endswith((".", "?")), ours  # a sentence, not ignite's fragment


def test_differences_on_purpose_are_distbridges_behaviour() -> None:
    # ignite reads .shape of whatever it gets (AttributeError); distbridge says TypeError
    assert isinstance(
        outcome(lambda lib: lib.all_gather_tensors_with_shapes(1, [[1]]), ignite_dist)[1],
        AttributeError,
    )
    with pytest.raises(TypeError, match=r"tensor must be a torch\.Tensor, got int"):
        idist.all_gather_tensors_with_shapes(1, [[1]])  # type: ignore[arg-type]
    # ignite refuses tcp:// (it would hang there); distbridge's tcp:// works, in bounded time
    tcp = "tcp://127.0.0.1:29411"
    with pytest.raises(ValueError, match="TCP initialization"):
        ignite_dist.Parallel(backend="gloo", init_method=tcp)
    assert idist.Parallel(backend="gloo", init_method=tcp).backend == "gloo"
    # a tuple of ranks is a group in distbridge (as a list is), refused by ignite
    with pytest.raises(ValueError, match="list of int"):
        ignite_dist.new_group((0,))
    assert idist.new_group((0,)) == idist.new_group([0])
    # ignite ignores nnodes without nproc_per_node; distbridge says it would not apply
    assert ignite_dist.Parallel(backend="gloo", nnodes=2).backend == "gloo"
    with pytest.raises(ValueError, match="applies only when Parallel spawns"):
        idist.Parallel(backend="gloo", nnodes=2)


def test_every_row_is_in_migration() -> None:
    text = MIGRATION.read_text()
    missing = [case for case, row in ON_PURPOSE.items() if row not in text]
    assert not missing, f"docs/migration.md has no row for {missing}"


# ---- (b) good input: the same results, types and environment -------------------------------

_NUMBERS = st.one_of(
    st.integers(-(2**31), 2**31), st.floats(allow_nan=False, allow_infinity=False, width=32)
)


@FAST
@given(
    value=st.one_of(
        _NUMBERS,
        st.lists(_NUMBERS.map(float), min_size=1, max_size=4).map(torch.tensor),
        st.lists(st.integers(-100, 100), min_size=1, max_size=4).map(torch.tensor),
    ),
    op=st.sampled_from(["SUM", "PRODUCT", "MIN", "MAX", "sum", "max"]),
)
def test_all_reduce_in_a_world_of_one_matches_ignite(value: Any, op: str) -> None:
    ours, theirs = idist.all_reduce(value, op=op), ignite_dist.all_reduce(value, op=op)
    assert type(ours) is type(theirs)
    if isinstance(ours, torch.Tensor):
        assert torch.equal(ours, theirs) and ours.dtype == theirs.dtype
    else:
        assert ours == theirs


@FAST
@given(
    value=st.one_of(
        _NUMBERS,
        st.text(max_size=6),
        st.lists(st.integers(-100, 100), min_size=1, max_size=4).map(torch.tensor),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    )
)
def test_all_gather_and_broadcast_in_a_world_of_one_match_ignite(value: Any) -> None:
    # broadcast of a dict: ignite's serial model passes it back, every distbridge model
    # refuses it (migration.md: bad arguments ignite's serial model accepted silently)
    for name in ("all_gather",) if isinstance(value, dict) else ("all_gather", "broadcast"):
        ours, theirs = getattr(idist, name)(value), getattr(ignite_dist, name)(value)
        assert type(ours) is type(theirs), name
        if isinstance(ours, torch.Tensor):
            assert torch.equal(ours, theirs), name
        else:
            assert ours == theirs, name


def test_queries_in_a_world_of_one_match_ignite() -> None:
    names = [
        "backend",
        "device",
        "available_backends",
        "model_name",
        "get_world_size",
        "get_rank",
        "get_local_rank",
        "get_nproc_per_node",
        "get_node_rank",
        "get_nnodes",
        "hostname",
        "has_native_dist_support",
        "has_xla_support",
        "has_hvd_support",
    ]
    for name in names:
        ours, theirs = getattr(idist, name), getattr(ignite_dist, name)
        if callable(ours):
            ours, theirs = ours(), theirs()
        assert ours == theirs and type(ours) is type(theirs), name
    assert idist.new_group([0]) == ignite_dist.new_group([0])
    assert idist.one_rank_only()(lambda: 7)() == ignite_dist.one_rank_only()(lambda: 7)()
    assert idist.sync() is None and ignite_dist.sync() is None
    assert idist.show_config() is None and ignite_dist.show_config() is None
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for lib in (idist, ignite_dist):  # a world of one: unwrapped, on the device
        assert type(lib.auto_model(model)) is torch.nn.Linear
        assert lib.auto_optim(optimizer) is optimizer
        loader = lib.auto_dataloader(list(range(6)), batch_size=4)
        assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5]]
    with idist.one_rank_first(), ignite_dist.one_rank_first():
        assert idist.get_rank() == ignite_dist.get_rank() == 0


def _environment_effects(lib: ModuleType, port: int) -> tuple[dict[str, str], dict[str, str]]:
    """The variables ``initialize("gloo")`` added, and what ``finalize`` left changed."""
    before = dict(os.environ)
    lib.initialize("gloo")
    try:
        during = dict(os.environ)
        assert lib.get_world_size() == 1 and lib.backend() == "gloo"
    finally:
        lib.finalize()
    after = dict(os.environ)
    added = {k: v for k, v in during.items() if before.get(k) != v}
    left = {k: v for k, v in after.items() if before.get(k) != v}
    left.update({k: "<removed>" for k in before if k not in after})
    return added, left


def test_initialize_and_finalize_set_and_restore_the_environment_as_ignite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    monkeypatch.setenv("MASTER_PORT", str(port))  # ignite opens it; no fixed port
    theirs, their_left = _environment_effects(ignite_dist, port)
    ours, our_left = _environment_effects(idist, port)
    assert their_left == our_left == {}
    # every layout variable ignite sets, distbridge sets to the same value, and it also says
    # the node layout; MASTER_ADDR only where a rendezvous uses it (a world of one has none:
    # migration.md, "the variables `initialize` sets")
    assert theirs == {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    assert ours == {**without(theirs, "MASTER_ADDR"), "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0"}


# ---- (c) launch paths of a world of one, for real ------------------------------------------


def test_hand_set_variables_without_an_address_initialize(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Item 1: RANK / LOCAL_RANK / WORLD_SIZE by hand, no MASTER_ADDR / MASTER_PORT."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    idist.initialize("gloo")
    try:
        assert (idist.get_world_size(), idist.get_rank(), idist.backend()) == (1, 0, "gloo")
        assert idist.all_reduce(3) == 3
        # ignite would set MASTER_ADDR / MASTER_PORT=15000 here and open that port; a world
        # of one meets nobody, so distbridge opens none (migration.md: "initialize under
        # hand-set RANK / WORLD_SIZE=1")
        assert "MASTER_PORT" not in os.environ
    finally:
        idist.finalize()


def test_hand_set_variables_for_several_ranks_meet_at_ignites_default_address() -> None:
    """Item 1, several ranks: every process fills in ignite's 127.0.0.1:15000 by itself (the
    2-rank run, on a free port, is in tests/distributed/test_ignite_launch.py)."""
    from distbridge.models.native import init

    assert init.DEFAULT_MASTER == {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "15000"}
    source = Path(ignite_dist.comp_models.native.__file__).read_text()
    for key, value in init.DEFAULT_MASTER.items():
        assert f'os.environ.get("{key}", "{value}")' in source  # ignite's own defaults


@pytest.mark.parametrize("lib_name", ["ignite", "distbridge"])
def test_file_init_method_reads_rank_and_world_size_from_the_environment(
    lib_name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Item 2: init_method="file://..." with RANK / WORLD_SIZE in the environment."""
    lib = LIBS[lib_name]
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # ignite sets it even for file://
    lib.initialize("gloo", init_method=f"file://{tmp_path / 'rendezvous'}")
    try:
        assert (lib.get_world_size(), lib.get_rank()) == (1, 0)
        assert lib.all_reduce(torch.tensor([2.0])).item() == 2.0
    finally:
        lib.finalize()


def test_tcp_init_method_with_nobody_there_ends_in_bounded_time() -> None:
    """Item 7: tcp:// works in distbridge (ignite refuses it), and an address nobody serves
    ends within the timeout with an error naming it."""
    address = f"tcp://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(DistributedError, match=address.replace(".", r"\.")):
        idist.initialize("gloo", init_method=address, rank=1, world_size=2, timeout=2)
    assert time.monotonic() - start < 60
    assert not torch.distributed.is_initialized()
    with pytest.raises(ValueError, match="will hang"):
        ignite_dist.initialize("gloo", init_method=address, rank=1, world_size=2)


def test_tcp_init_method_works_for_a_world_of_one() -> None:
    idist.initialize("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        assert idist.all_reduce(5) == 5 and idist.get_world_size() == 1
    finally:
        idist.finalize()


# ---- (d) ignite's INFO lines (issue 38, item 4) ---------------------------------------------

#: ignite's loggers and distbridge's for the same lines. ignite's setup_logger attaches a
#: handler and stops propagation; distbridge's propagate (a user's logging config shows them).
LOGGERS = {
    "ignite.distributed.launcher.Parallel": "distbridge.parallel.Parallel",
    "ignite.distributed.auto.auto_dataloader": "distbridge.auto.auto_dataloader",
    "ignite.distributed.auto.auto_model": "distbridge.auto.auto_model",
}


def _job(local_rank: int, total: list[int]) -> None:
    total.append(local_rank)


def _logged(
    call: Callable[[ModuleType], Any], lib: ModuleType, caplog: pytest.LogCaptureFixture
) -> list[tuple[str, int, str]]:
    """(logger, level, message) of what ``call`` logged, ignite's logger names mapped to
    distbridge's. distbridge's records are taken as a user's root handler gets them."""
    caplog.clear()
    attached = []
    if lib is ignite_dist:  # its loggers do not propagate: listen on each, once
        for name in LOGGERS:
            logger = logging.getLogger(name)
            attached.append((logger, logger.level, logger.propagate))
            logger.addHandler(caplog.handler)
            logger.propagate = False
    try:
        with caplog.at_level(logging.INFO):
            call(lib)
    finally:
        for logger, level, propagate in attached:
            logger.removeHandler(caplog.handler)
            logger.setLevel(level)
            logger.propagate = propagate
    return [
        (LOGGERS.get(r.name, r.name), r.levelno, r.getMessage())
        for r in caplog.records
        if r.name.startswith(("ignite.distributed", "distbridge."))
    ]


def _parallel(backend: str | None) -> Callable[[ModuleType], Any]:
    def run(lib: ModuleType) -> None:
        with lib.Parallel(backend=backend) as parallel:
            parallel.run(_job, [])

    return run


LOGGED_CALLS: dict[str, Callable[[ModuleType], Any]] = {
    "Parallel(backend=None).run": _parallel(None),
    "Parallel(backend='gloo').run, a world of one": _parallel("gloo"),
    "auto_dataloader(list, batch_size=4)": (
        lambda lib: lib.auto_dataloader(list(range(6)), batch_size=4)
    ),
    "auto_dataloader(tensor, shuffle=True)": (
        lambda lib: lib.auto_dataloader(torch.arange(5), batch_size=2, shuffle=True)
    ),
    "auto_model(Linear)": lambda lib: lib.auto_model(torch.nn.Linear(2, 1)),
}


@pytest.mark.parametrize("case", list(LOGGED_CALLS))
def test_info_lines_are_ignites(
    case: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same INFO lines, at the same level, as ignite's, under distbridge's logger names,
    reaching a root handler (``logging.basicConfig(level=INFO)`` shows them)."""
    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # ignite's gloo world of one opens it
    theirs = _logged(LOGGED_CALLS[case], ignite_dist, caplog)
    ours = _logged(LOGGED_CALLS[case], idist, caplog)
    assert ours == theirs
    if case.startswith("Parallel"):
        assert ours[-1][2] == "End of run" or "Finalized" in ours[-1][2]
    if case.startswith("auto_dataloader"):
        assert "Use data loader kwargs for dataset" in ours[0][2]
