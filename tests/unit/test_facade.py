"""The facade: pure delegation to the active model, ignite's signatures, argument checks."""

from __future__ import annotations

import math
import os
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
import torch
import torch.distributed as dist

import distbridge as idist
from distbridge import _state, environments
from distbridge._registry import registry
from distbridge.errors import BackendUnavailableError, DistributedError
from distbridge.models import SerialModel
from distbridge.testing import reset_state
from tests.unit.test_registry import FakeModel

LAUNCH_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
)

#: the torch.distributed options the facade's barrier passes on when it is given none
NO_OPTIONS = {"async_op": False, "device_ids": None}
# What a call returns, so a test can tell the model's answer from anything else.
RESULT = object()
DEVICE = torch.device("meta")


class RecordingModel(FakeModel):
    """Records every public call with its exact arguments and answers with sentinels."""

    name: ClassVar[str] = "recording-dist"
    backends: ClassVar[tuple[str, ...]] = ("recbk",)
    spawn_options: ClassVar[tuple[str, ...]] = ("timeout",)
    spawned: ClassVar[list[tuple[Any, ...]]] = []
    created: ClassVar[list[dict[str, Any]]] = []

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.live = True

    def _record(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((method, args, kwargs))
        return RESULT

    @classmethod
    def from_backend(cls, backend: str, **kwargs: Any) -> Any:
        cls.created.append({"backend": backend, **kwargs})
        return cls()

    @classmethod
    def spawn(cls, fn: Any, args: Any, kwargs_dict: Any, nproc_per_node: Any, **kwargs: Any) -> Any:
        cls.spawned.append((fn, args, kwargs_dict, nproc_per_node, kwargs))
        return ["spawned"]

    def is_current(self) -> bool:
        return self.live

    def get_rank(self) -> int:
        return 5

    def get_world_size(self) -> int:
        return 8

    def get_local_rank(self) -> int:
        return 1

    def get_nproc_per_node(self) -> int:
        return 2

    def get_nnodes(self) -> int:
        return 4

    def get_node_rank(self) -> int:
        return 2

    def device(self) -> torch.device:
        return DEVICE

    def set_local_rank(self, index: int) -> None:
        self._record("set_local_rank", index)

    def finalize(self) -> None:
        self._record("finalize")

    def all_reduce(self, *args: Any, **kwargs: Any) -> Any:
        return self._record("all_reduce", *args, **kwargs)

    def all_gather(self, *args: Any, **kwargs: Any) -> Any:
        return self._record("all_gather", *args, **kwargs)

    def broadcast(self, *args: Any, **kwargs: Any) -> Any:
        return self._record("broadcast", *args, **kwargs)

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        self._record("barrier", *args, **kwargs)

    def new_group(self, *args: Any, **kwargs: Any) -> Any:
        return self._record("new_group", *args, **kwargs)

    def all_gather_tensors_with_shapes(self, *args: Any, **kwargs: Any) -> Any:
        return self._record("all_gather_tensors_with_shapes", *args, **kwargs)


@pytest.fixture
def model() -> Iterator[RecordingModel]:
    installed = RecordingModel()
    _state.install(installed)
    yield installed
    reset_state()


@pytest.fixture
def registered() -> Iterator[type[RecordingModel]]:
    """RecordingModel (and its backend "recbk") registered in distbridge's registry."""
    RecordingModel.spawned.clear()
    RecordingModel.created.clear()
    registry.register(RecordingModel)
    yield RecordingModel
    if RecordingModel in registry._models:
        registry.unregister(RecordingModel)
    reset_state()


def _unset(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)


def top_level_worker(local_rank: int) -> int:
    return local_rank


# ---- dispatch ---------------------------------------------------------------------------------

T = torch.ones(2)
G = [0, 1]
SHAPES = [[2], [3]]

DISPATCH: list[tuple[Callable[[], Any], str, tuple[Any, ...]]] = [
    (lambda: idist.all_reduce(T), "all_reduce", (T, "SUM", None)),
    (lambda: idist.all_reduce(3, "max", G), "all_reduce", (3, "max", G)),
    (lambda: idist.all_reduce(T, op="avg", group=G), "all_reduce", (T, "avg", G)),
    (lambda: idist.all_gather(T), "all_gather", (T, None)),
    (lambda: idist.all_gather("s", group=G), "all_gather", ("s", G)),
    (lambda: idist.broadcast(T), "broadcast", (T, 0, False, None)),
    (lambda: idist.broadcast(None, 3, True, G), "broadcast", (None, 3, True, G)),
    (lambda: idist.broadcast(T, src=2, group=G), "broadcast", (T, 2, False, G)),
    (lambda: idist.new_group(G), "new_group", (G,)),
    (
        lambda: idist.all_gather_tensors_with_shapes(T, SHAPES),
        "all_gather_tensors_with_shapes",
        (T, SHAPES, None),
    ),
    (
        lambda: idist.all_gather_tensors_with_shapes(T, SHAPES, group=G),
        "all_gather_tensors_with_shapes",
        (T, SHAPES, G),
    ),
]


@pytest.mark.parametrize(("call", "method", "args"), DISPATCH)
def test_collectives_delegate_with_the_same_arguments(
    model: RecordingModel, call: Callable[[], Any], method: str, args: tuple[Any, ...]
) -> None:
    assert call() is RESULT
    assert len(model.calls) == 1
    name, got, kwargs = model.calls[0]
    assert name == method
    assert kwargs == {}
    assert len(got) == len(args)
    assert all(a is b for a, b in zip(got, args, strict=True))


def test_barrier_delegates(model: RecordingModel) -> None:
    assert idist.barrier() is None
    idist.barrier(G)
    idist.barrier(G, timeout=5, name="x")
    assert model.calls == [
        ("barrier", (None, None, None), NO_OPTIONS),
        ("barrier", (G, None, None), NO_OPTIONS),
        ("barrier", (G, 5, "x"), NO_OPTIONS),
    ]


def test_new_group_passes_options(model: RecordingModel) -> None:
    assert idist.new_group(G, backend="gloo", timeout=3) is RESULT
    assert model.calls == [("new_group", (G,), {"backend": "gloo", "timeout": 3})]


def test_queries_come_from_the_model(model: RecordingModel) -> None:
    assert idist.backend() == "recbk"
    assert idist.model_name() == "recording-dist"
    assert idist.device() is DEVICE
    assert idist.get_rank() == 5
    assert idist.get_world_size() == 8
    assert idist.get_local_rank() == 1
    assert idist.get_nproc_per_node() == 2
    assert idist.get_nnodes() == 4
    assert idist.get_node_rank() == 2
    assert idist.hostname() == socket.gethostname()
    assert model.calls == []


def test_set_local_rank_delegates_and_remembers(model: RecordingModel) -> None:
    idist.set_local_rank(3)
    assert model.calls == [("set_local_rank", (3,), {})]
    assert _state._local_rank_hint == 3
    reset_state()
    assert _state._local_rank_hint is None


def test_finalize_delegates_then_falls_back_to_serial(model: RecordingModel) -> None:
    idist.finalize()
    assert model.calls == [("finalize", (), {})]
    assert isinstance(_state.current(), SerialModel)
    assert idist.model_name() == "serial"


def test_initialize_refuses_a_second_context(model: RecordingModel) -> None:
    with pytest.raises(
        DistributedError,
        match=r"already initialized with backend 'recbk'; call distbridge\.finalize\(\) first",
    ):
        idist.initialize("gloo")
    assert _state.current() is model


def test_show_config_reports_the_model(
    model: RecordingModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="distbridge")
    idist.show_config()
    lines = [r.getMessage() for r in caplog.records if r.name == "distbridge"]
    assert lines == [
        "distributed configuration: recording-dist",
        "backend: recbk",
        "device: meta",
        f"hostname: {socket.gethostname()}",
        "world size: 8",
        "rank: 5",
        "local rank: 1",
        "num processes per_node: 2",
        "num nodes: 4",
        "node rank: 2",
    ]


def test_helpers_use_the_facade(model: RecordingModel) -> None:
    ran: list[int] = []

    @idist.one_rank_only(rank=5, with_barrier=True)
    def on_five() -> str:
        ran.append(5)
        return "five"

    @idist.one_rank_only(rank=0)
    def on_zero() -> str:
        ran.append(0)
        return "zero"

    assert on_five() == "five"
    assert on_zero() is None
    assert ran == [5]
    assert model.calls == [("barrier", (None, None, None), NO_OPTIONS)]

    model.calls.clear()
    with idist.one_rank_first(rank=1, local=True):  # local rank 1 of 2: goes first
        ran.append(1)
    # Through the store (no process-group timeout); math.inf: no limit of its own.
    assert model.calls == [
        ("barrier", (None, math.inf, "one_rank_first(rank=1, local=True)"), NO_OPTIONS)
    ]
    model.calls.clear()
    with idist.one_rank_first(rank=0, timeout=9):  # rank 5 waits for rank 0, then runs
        assert model.calls == [("barrier", (None, 9.0, "one_rank_first(rank=0)"), NO_OPTIONS)]
    assert len(model.calls) == 1
    on_eight = idist.one_rank_only(rank=8)(lambda: None)
    with pytest.raises(
        ValueError, match=r"rank should be between 0 and 7, but given 8: the world has 8 ranks\."
    ):
        on_eight()


def test_initialize_and_spawn_go_through_the_registry(registered: type[RecordingModel]) -> None:
    idist.initialize("recbk", opt=1)
    assert registered.created == [{"backend": "recbk", "opt": 1}]
    assert idist.model_name() == "recording-dist"
    _state.reset()  # not reset_state(): that would unregister the model too

    out = idist.spawn("recbk", top_level_worker, (1,), {"a": 2}, 3, extra=4)
    assert out == ["spawned"]
    fn, args, kwargs_dict, nproc, kwargs = registered.spawned[0]
    assert (fn, args, kwargs_dict, nproc) == (top_level_worker, (1,), {"a": 2}, 3)
    assert kwargs == {"backend": "recbk", "extra": 4}

    idist.spawn("recbk", top_level_worker, args=[7])
    fn, args, kwargs_dict, nproc, kwargs = registered.spawned[1]
    assert (args, kwargs_dict, nproc, kwargs) == ((7,), {}, 1, {"backend": "recbk"})


def test_available_backends_comes_from_the_registry(registered: type[RecordingModel]) -> None:
    assert "recbk" in idist.available_backends()
    assert "gloo" in idist.available_backends()


# ---- adoption and re-validation ---------------------------------------------------------------


def test_a_stale_model_is_replaced(model: RecordingModel) -> None:
    assert idist.model_name() == "recording-dist"
    model.live = False
    assert idist.model_name() == "serial"  # the context went away: never stale


def test_a_live_context_is_adopted_on_first_use(
    registered: type[RecordingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RecordingModel, "context", True)
    _state.reset()  # a fresh serial model, as at import time
    assert type(_state.current()) is registered
    assert idist.get_rank() == 5


def test_local_rank_hint_reaches_an_adopted_model(
    registered: type[RecordingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    idist.set_local_rank(1)
    assert idist.model_name() == "serial"
    monkeypatch.setattr(RecordingModel, "context", True)
    idist.sync()
    adopted = _state.current()
    assert isinstance(adopted, RecordingModel)
    assert adopted.calls == [("set_local_rank", (1,), {})]


def test_sync_keeps_the_initialized_model_while_its_context_lives(
    registered: type[RecordingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    # initialize() sets things up on its model (failure watcher, debug mode, variables to
    # restore): a sync() that swapped in a freshly adopted instance would lose them.
    idist.initialize("recbk")
    initialized = _state.current()
    monkeypatch.setattr(RecordingModel, "context", True)  # the registry sees it live too
    idist.sync()
    assert _state.current() is initialized
    initialized.live = False  # its context ended: the live one is adopted afresh
    idist.sync()
    adopted = _state.current()
    assert isinstance(adopted, RecordingModel) and adopted is not initialized


def test_sync_adopts_a_context_registered_later(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RecordingModel, "context", True)
    assert idist.model_name() == "serial"
    registry.register(RecordingModel)
    try:
        idist.sync()
        assert idist.model_name() == "recording-dist"
    finally:
        registry.unregister(RecordingModel)
        reset_state()


def test_a_context_of_a_model_registered_later_is_adopted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(RecordingModel, "context", True)
    assert idist.model_name() == "serial"  # the serial model is now in use
    registry.register(RecordingModel)
    try:
        assert idist.model_name() == "recording-dist"
    finally:
        registry.unregister(RecordingModel)
        reset_state()


# ---- unknown keyword arguments ----------------------------------------------------------------


def test_initialize_rejects_unknown_kwargs(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAUNCH_VARS)
    with pytest.raises(TypeError, match=r"initialize\('gloo'\) got unexpected keyword .*'bogus'"):
        idist.initialize("gloo", bogus=1)
    assert not dist.is_initialized()
    assert idist.model_name() == "serial"


def test_spawn_rejects_unknown_kwargs() -> None:
    with pytest.raises(TypeError, match=r"'bogus'"):
        idist.spawn("gloo", top_level_worker, nproc_per_node=1, bogus=1)


def test_spawn_unknown_backend() -> None:
    with pytest.raises(BackendUnavailableError, match=r"Did you mean 'gloo'\?"):
        idist.spawn("glo", top_level_worker)


def test_parallel_rejects_unknown_kwargs() -> None:
    with pytest.raises(
        TypeError, match=r"Parallel\(\) got unexpected keyword arguments \['bogus'\]"
    ):
        idist.Parallel(backend="gloo", bogus=1)


def test_parallel_spawn_rejects_unknown_kwargs_before_starting() -> None:
    with pytest.raises(TypeError, match=r"'bogus'.*nnodes, node_rank"):
        idist.Parallel(backend="gloo", nproc_per_node=1, bogus=1)


# ---- Parallel ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nproc_per_node": 2}, r"Parallel\(backend=None\) runs serially"),
        ({"init_method": "tcp://h:1"}, r"Parallel\(backend=None\) runs serially"),
        (
            {"master_port": 1234},
            r"^If backend is None, argument 'master_port' should be also None, but given 1234: "
            r"Parallel\(backend=None\) runs serially, and master_port needs a backend such as "
            r"'gloo'\.$",
        ),
        ({"backend": "gloo", "nnodes": 2}, r"^nnodes applies only when Parallel spawns"),
        (
            {"backend": "gloo", "node_rank": 1, "master_addr": "h"},
            r"^master_addr, node_rank apply only when Parallel spawns the workers: pass "
            r"nproc_per_node too",
        ),
    ],
)
def test_parallel_argument_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        idist.Parallel(**kwargs)


def test_parallel_unknown_backend() -> None:
    with pytest.raises(BackendUnavailableError, match=r"Did you mean 'nccl'\?"):
        idist.Parallel(backend="ncl")


@pytest.mark.skipif(dist.is_mpi_available(), reason="this torch build has MPI")
def test_parallel_unavailable_backend() -> None:
    with pytest.raises(BackendUnavailableError, match=r"Backend 'mpi' is not available: torch"):
        idist.Parallel(backend="mpi")


def test_parallel_refuses_to_spawn_under_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"started by torchelastic .* drop nproc_per_node"):
        idist.Parallel(backend="gloo", nproc_per_node=2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"2 processes on this node\), so Parallel must not"):
        idist.Parallel(backend="gloo", nproc_per_node=2)


def test_parallel_spawns_per_node_under_one_task_per_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """srun --ntasks-per-node=1: each task spawns its node's workers; the layout and the
    rendezvous address come from SLURM unless given."""
    slurm = {
        "SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
        "SLURM_NODEID": "1", "SLURM_NNODES": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
        "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "1234",
    }  # fmt: skip
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(key, raising=False)
    launch = environments.detect()
    assert launch is not None and launch.launcher == "slurm"
    parallel = idist.Parallel(backend="gloo", nproc_per_node=3)
    assert parallel._spawn_params == {
        "nproc_per_node": 3,
        "nnodes": 2,
        "node_rank": 1,
        "master_addr": "n1",
        "master_port": launch.master_port,
    }
    given = idist.Parallel(backend="gloo", nproc_per_node=3, master_port=4321, node_rank=0)
    assert given._spawn_params is not None
    assert (given._spawn_params["master_port"], given._spawn_params["node_rank"]) == (4321, 0)


def test_parallel_launcher_error_has_a_documented_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises((ValueError, DistributedError)):
        idist.Parallel(backend="gloo", nproc_per_node=2)


def test_parallel_serial_runs_in_this_process() -> None:
    calls: list[tuple[Any, ...]] = []

    def work(local_rank: int, a: int, b: int = 0) -> int:
        calls.append((local_rank, a, b))
        return a + b

    with idist.Parallel() as parallel:
        assert parallel.backend is None
        assert parallel.run(work, 1, b=2) == 3
        assert idist.model_name() == "serial"
    assert calls == [(0, 1, 2)]


def test_parallel_spawn_goes_through_spawn(registered: type[RecordingModel]) -> None:
    with idist.Parallel(backend="recbk", nproc_per_node=3, master_port=1234, timeout=5) as p:
        assert idist.model_name() == "serial"  # the parent is not initialized
        assert p.run(top_level_worker, 1, k=2) == ["spawned"]
    fn, args, kwargs_dict, nproc, kwargs = registered.spawned[0]
    assert (fn, args, kwargs_dict, nproc) == (top_level_worker, (1,), {"k": 2}, 3)
    assert kwargs == {"backend": "recbk", "master_port": 1234, "timeout": 5}
    assert registered.created == []  # spawning does not initialize the parent


@pytest.mark.parametrize("port", [70000, -1, 0, "70000"])
def test_parallel_refuses_a_port_out_of_range(registered: type[RecordingModel], port: Any) -> None:
    """The range its message names is checked for every backend, not only by native spawn."""
    with pytest.raises(
        ValueError, match=rf"^master_port must be a port number \(1\.\.65535\), got {port!r}\.$"
    ):
        idist.Parallel(backend="recbk", nproc_per_node=2, master_port=port)
    assert registered.spawned == []


# ---- a real world of one (gloo, in this process, no port) -------------------------------------


def test_initialize_and_finalize_a_gloo_world_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAUNCH_VARS)
    idist.initialize("gloo")
    try:
        assert dist.is_initialized()
        assert (idist.model_name(), idist.backend()) == ("native-dist", "gloo")
        assert (idist.get_rank(), idist.get_world_size(), idist.get_local_rank()) == (0, 1, 0)
        assert os.environ["RANK"] == "0"
        assert os.environ["WORLD_SIZE"] == "1"
        assert idist.all_reduce(3) == 3
        with pytest.raises(DistributedError, match=r"already initialized with backend 'gloo'"):
            idist.initialize("gloo")
    finally:
        idist.finalize()
    assert not dist.is_initialized()
    assert idist.model_name() == "serial"
    assert "RANK" not in os.environ
    assert "WORLD_SIZE" not in os.environ


def test_parallel_with_a_backend_initializes_and_finalizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _unset(monkeypatch, *LAUNCH_VARS)
    with idist.Parallel(backend="gloo") as parallel:
        assert idist.backend() == "gloo"
        assert parallel.run(lambda local_rank, x: (local_rank, x), "v") == (0, "v")
    assert not dist.is_initialized()
    assert idist.backend() is None


def test_reset_state_finalizes(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAUNCH_VARS)
    idist.initialize("gloo")
    reset_state()
    assert not dist.is_initialized()
    assert "RANK" not in os.environ
    assert idist.model_name() == "serial"


def test_a_model_is_probed_only_once_its_module_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The serial hot path skips models whose framework is not imported, and notices the
    import as soon as it happens."""
    calls: list[str] = []

    class GatedModel(RecordingModel):
        name: ClassVar[str] = "gated-dist"
        backends: ClassVar[tuple[str, ...]] = ("gatedbk",)
        context_module: ClassVar[str | None] = "distbridge_test_gated_framework"
        context: ClassVar[bool] = True  # from_context adopts

        @classmethod
        def has_context(cls) -> bool:
            calls.append("probe")
            return True

    assert idist.model_name() == "serial"
    registry.register(GatedModel)
    try:
        assert idist.model_name() == "serial"
        assert calls == [], "a model whose module is not imported must not be probed"
        monkeypatch.setitem(sys.modules, "distbridge_test_gated_framework", object())
        assert idist.model_name() == "gated-dist"
        assert calls
    finally:
        registry.unregister(GatedModel)
        reset_state()
