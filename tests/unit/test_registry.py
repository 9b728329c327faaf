"""Registry: registration, priority, backend lookup and its errors, detection, plug-ins."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
import torch.distributed as dist

import distbridge as idist
from distbridge._registry import ENTRY_POINT_GROUP, RegisteredModels, Registry, registry
from distbridge.errors import BackendUnavailableError, DistributedError
from distbridge.models import BUILTIN_MODELS, NativeModel, SerialModel
from distbridge.models.base import ComputationModel
from distbridge.testing import reset_state

#: This test machine: a CPU-only torch wheel (no NCCL without CUDA, never MPI in pip wheels).
CPU_ONLY = pytest.mark.skipif(
    torch.cuda.is_available() or dist.is_mpi_available(),
    reason="expects a CPU-only torch build without MPI",
)


class FakeModel(ComputationModel):
    """A model whose availability and context are class attributes a test sets."""

    name: ClassVar[str] = "fake-dist"
    backends: ClassVar[tuple[str, ...]] = ("fakebk",)
    available: ClassVar[bool] = True
    context: ClassVar[bool] = False
    adoptable: ClassVar[bool] = True

    @classmethod
    def is_available(cls) -> bool:
        return cls.available

    @classmethod
    def has_context(cls) -> bool:
        return cls.context

    @classmethod
    def from_context(cls) -> Any:
        return cls() if cls.context and cls.adoptable else None

    @classmethod
    def from_backend(cls, backend: str, **kwargs: Any) -> Any:
        return cls()

    @classmethod
    def spawn(
        cls,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs_dict: Mapping[str, Any],
        nproc_per_node: int,
        **kwargs: Any,
    ) -> list[Any]:
        return []

    def is_current(self) -> bool:
        return type(self).context

    def backend(self) -> str | None:
        return self.backends[0]

    def get_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 1

    def get_local_rank(self) -> int:
        return 0

    def get_nproc_per_node(self) -> int:
        return 1

    def get_nnodes(self) -> int:
        return 1

    def get_node_rank(self) -> int:
        return 0

    def device(self) -> torch.device:
        return torch.device("cpu")

    def finalize(self) -> None:
        pass

    def _collective_device(self) -> torch.device:
        return torch.device("cpu")

    def _do_all_reduce(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        return tensor

    def _do_all_gather(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        return tensor.clone()

    def _do_broadcast(self, tensor: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        return tensor

    def _do_barrier(self, group: Any) -> None:
        pass

    def _make_group(self, ranks: tuple[int, ...], **kwargs: Any) -> Any:
        return list(ranks)

    def _check_group(self, group: object) -> None:
        raise TypeError("no group objects")

    def _group_size(self, group: Any) -> int:
        return 1

    def _group_rank(self, group: Any) -> int:
        return 0

    def _group_members(self, group: Any) -> tuple[int, ...]:
        return (0,)


def make_model(
    cls_name: str,
    name: str,
    backends: tuple[str, ...],
    priority: int = 0,
    *,
    available: bool = True,
    context: bool = False,
    adoptable: bool = True,
) -> type[FakeModel]:
    attrs = {
        "name": name,
        "backends": backends,
        "priority": priority,
        "available": available,
        "context": context,
        "adoptable": adoptable,
    }
    return type(cls_name, (FakeModel,), attrs)


@pytest.fixture
def reg() -> Registry:
    """An empty registry that never loads plug-ins."""
    r = Registry()
    r._plugins_loaded = True
    return r


@pytest.fixture
def global_model() -> Iterator[type[FakeModel]]:
    """A fake model registered in distbridge's own registry for the test's duration."""
    model = make_model("GlobalFake", "global-fake", ("globalbk",))
    registry.register(model)
    yield model
    if model in registry._models:
        registry.unregister(model)
    reset_state()


# ---- register ---------------------------------------------------------------------------------


def test_register_and_unregister(reg: Registry) -> None:
    a = make_model("A", "a", ("a1", "a2"))
    reg.register(a)
    assert reg.models() == (a,)
    assert reg.known_backends() == ("a1", "a2")
    reg.unregister(a)
    assert reg.models() == ()


def test_unregister_unknown_model(reg: Registry) -> None:
    a = make_model("Lonely", "a", ("a1",))
    with pytest.raises(ValueError, match=r"Lonely is not registered\."):
        reg.unregister(a)


def test_same_name_is_refused(reg: Registry) -> None:
    first = make_model("First", "same", ("x",))
    second = make_model("Second", "same", ("y",))
    reg.register(first)
    with pytest.raises(
        ValueError,
        match=r"Cannot register Second \(name 'same', backends \('y',\)\): already taken by "
        r"First \(same: x\)\. Pass replace=True to override\.",
    ):
        reg.register(second)
    assert reg.models() == (first,)


def test_overlapping_backend_is_refused(reg: Registry) -> None:
    first = make_model("First", "first", ("x", "shared"))
    second = make_model("Second", "second", ("shared", "z"))
    reg.register(first)
    with pytest.raises(ValueError, match=r"already taken by First \(first: x, shared\)"):
        reg.register(second)
    assert reg.models() == (first,)


def test_builtin_backend_clash_is_refused() -> None:
    fresh = Registry()
    fresh._plugins_loaded = True
    for model in BUILTIN_MODELS:
        fresh.register(model)
    rival = make_model("RivalGloo", "rival", ("gloo",))
    with pytest.raises(ValueError, match=r"already taken by NativeModel \(native-dist: nccl, gloo"):
        fresh.register(rival)


def test_replace_removes_every_clashing_model(reg: Registry) -> None:
    a = make_model("A", "a", ("a1",))
    b = make_model("B", "b", ("b1",))
    c = make_model("C", "c", ("c1",))
    reg.register(a)
    reg.register(b)
    reg.register(c)
    both = make_model("Both", "a", ("b1", "new"))
    reg.register(both, replace=True)
    assert set(reg.models()) == {both, c}
    assert reg.for_backend("new") is both
    assert reg.for_backend("b1") is both


def test_replace_without_clash_just_adds(reg: Registry) -> None:
    a = make_model("A", "a", ("a1",))
    b = make_model("B", "b", ("b1",))
    reg.register(a)
    reg.register(b, replace=True)
    assert set(reg.models()) == {a, b}


def test_priority_order_highest_first(reg: Registry) -> None:
    low = make_model("Low", "low", ("l",), priority=-3)
    high = make_model("High", "high", ("h",), priority=10)
    mid = make_model("Mid", "mid", ("m",), priority=5)
    mid_too = make_model("MidToo", "mid2", ("m2",), priority=5)
    for model in (low, mid, high, mid_too):
        reg.register(model)
    assert reg.models() == (high, mid, mid_too, low)  # ties keep registration order
    assert reg.known_backends() == ("h", "m", "m2", "l")


def test_builtin_order() -> None:
    models = registry.models()
    assert NativeModel in models
    assert models[-1] is SerialModel  # lowest priority: the fallback


# ---- for_backend ------------------------------------------------------------------------------


def test_for_backend_finds_the_model(reg: Registry) -> None:
    a = make_model("A", "a", ("a1", "a2"))
    b = make_model("B", "b", ("b1",))
    reg.register(a)
    reg.register(b)
    assert reg.for_backend("a2") is a
    assert reg.for_backend("b1") is b


def test_for_backend_gloo_is_native() -> None:
    assert registry.for_backend("gloo") is NativeModel


@CPU_ONLY
def test_unknown_backend_suggests_the_closest() -> None:
    with pytest.raises(BackendUnavailableError) as info:
        registry.for_backend("ncl")
    available = ", ".join(registry.available_backends())
    assert str(info.value) == (
        f"Unknown backend 'ncl'. Available backends: {available}. Backend should be one of "
        "them. Did you mean 'nccl'?"
    )
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, DistributedError)


def test_unknown_backend_without_close_match() -> None:
    with pytest.raises(
        BackendUnavailableError, match=r"^Unknown backend 'zzzz'\. Available backends: "
    ) as info:
        registry.for_backend("zzzz")
    assert "Did you mean" not in str(info.value)


@CPU_ONLY
def test_nccl_unavailable_on_a_cpu_machine_says_why() -> None:
    with pytest.raises(
        BackendUnavailableError, match=r"^Backend 'nccl' is not available: "
    ) as info:
        registry.for_backend("nccl")
    message = str(info.value)
    assert "no NCCL" in message or "CUDA" in message
    assert message.endswith(f"available backends: {', '.join(registry.available_backends())}.")


@CPU_ONLY
def test_mpi_unavailable_says_built_without_mpi() -> None:
    with pytest.raises(BackendUnavailableError, match=r"torch was built without MPI") as info:
        registry.for_backend("mpi")
    assert str(info.value).endswith(
        f"Backend should be one of the available backends: "
        f"{', '.join(registry.available_backends())}."
    )


def test_unavailable_fake_model_gives_the_default_reason(reg: Registry) -> None:
    here = make_model("Here", "here", ("herebk",))
    gone = make_model("Gone", "gone", ("gonebk",), available=False)
    reg.register(here)
    reg.register(gone)
    assert reg.available_backends() == ("herebk",)
    with pytest.raises(
        BackendUnavailableError,
        match=r"^Backend 'gonebk' is not available: Gone is unavailable\. Backend should be one of "
        r"the available backends: herebk\.$",
    ):
        reg.for_backend("gonebk")


def test_no_backend_available_says_none(reg: Registry) -> None:
    with pytest.raises(BackendUnavailableError, match=r"Available backends: none\. Backend should"):
        reg.for_backend("gloo")


@pytest.mark.parametrize("backend", [None, 1, b"gloo"])
def test_backend_must_be_a_str(backend: Any) -> None:
    with pytest.raises(TypeError, match=r"backend must be a str such as 'gloo', got "):
        registry.for_backend(backend)


# ---- detect -----------------------------------------------------------------------------------


def test_detect_without_context_is_none(reg: Registry) -> None:
    reg.register(make_model("A", "a", ("a1",)))
    assert reg.detect() is None
    assert registry.detect() is None  # no process group in this test process


def test_detect_adopts_a_fake_context(reg: Registry) -> None:
    idle = make_model("Idle", "idle", ("i",), priority=5)
    live = make_model("Live", "live", ("l",), context=True)
    reg.register(idle)
    reg.register(live)
    found = reg.detect()
    assert type(found) is live


def test_detect_follows_priority(reg: Registry) -> None:
    low = make_model("Low", "low", ("l",), priority=-1, context=True)
    high = make_model("High", "high", ("h",), priority=1, context=True)
    reg.register(low)
    reg.register(high)
    assert type(reg.detect()) is high


def test_detect_skips_a_context_that_cannot_be_adopted(reg: Registry) -> None:
    refusing = make_model("Refusing", "refusing", ("r",), priority=9, context=True, adoptable=False)
    live = make_model("Live", "live", ("l",), context=True)
    reg.register(refusing)
    reg.register(live)
    assert type(reg.detect()) is live


def test_probes_follow_registration(reg: Registry) -> None:
    live = make_model("Live", "live", ("l",), context=True)
    idle = make_model("Idle", "idle", ("i",))
    reg.register(live)
    reg.register(SerialModel)  # no backends: nothing to probe
    assert reg.probes == (live.has_context,)
    assert SerialModel(reg).is_current() is False
    reg.register(idle)
    assert set(reg.probes) == {live.has_context, idle.has_context}
    reg.unregister(live)
    assert reg.probes == (idle.has_context,)
    assert SerialModel(reg).is_current() is True


# ---- registered_computation_models ------------------------------------------------------------


def test_registered_computation_models_is_a_live_view(global_model: type[FakeModel]) -> None:
    view = idist.registered_computation_models
    assert isinstance(view, RegisteredModels)
    assert isinstance(view, Sequence)
    assert global_model in view
    assert list(view) == list(registry.models())
    assert len(view) == len(registry.models())
    assert view[-1] is SerialModel
    assert tuple(view[:]) == registry.models()
    assert "GlobalFake" in repr(view)
    registry.unregister(global_model)
    assert global_model not in view  # the same object, without re-import
    assert "GlobalFake" not in repr(view)


def test_registered_computation_models_builtins() -> None:
    view = idist.registered_computation_models
    assert NativeModel in view
    assert SerialModel in view
    assert view.index(SerialModel) == len(view) - 1


def test_reset_state_keeps_models_registered_by_hand(global_model: type[FakeModel]) -> None:
    reset_state()
    assert global_model in registry.models()


# ---- entry-point plug-ins ---------------------------------------------------------------------

_PLUGIN_SOURCE = """
from typing import ClassVar

from tests.unit.test_registry import FakeModel


class {cls}(FakeModel):
    name: ClassVar[str] = {name!r}
    backends: ClassVar[tuple[str, ...]] = {backends!r}
    priority: ClassVar[int] = 7
"""


def _plugin(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    body: str,
    cls: str = "PluginModel",
    entry: str = "fake",
) -> str:
    """Install a fake distribution with one entry point in ``tmp_path``; return its module."""
    module = f"fakeplugin_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{module}.py").write_text(body, encoding="utf-8")
    info = tmp_path / "fakeplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakeplugin\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{entry} = {module}:{cls}\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return module


def _seeded() -> Registry:
    fresh = Registry()
    for model in BUILTIN_MODELS:
        fresh.register(model)
    return fresh


def test_plugin_is_loaded_from_an_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISTBRIDGE_DISABLE_PLUGINS", raising=False)
    body = _PLUGIN_SOURCE.format(cls="PluginModel", name="plugin-dist", backends=("plugbk",))
    module = _plugin(tmp_path, monkeypatch, body)
    fresh = _seeded()
    models = fresh.models()
    (plugin,) = [m for m in models if m.name == "plugin-dist"]
    assert plugin.__name__ == "PluginModel"
    assert plugin.__module__ == module
    assert set(BUILTIN_MODELS) < set(models)
    assert fresh.for_backend("plugbk") is plugin
    assert "plugbk" in fresh.available_backends()
    fresh.models()  # loaded once: a second query neither reloads nor duplicates
    assert fresh.models().count(plugin) == 1


def test_plugin_is_loaded_by_for_backend_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISTBRIDGE_DISABLE_PLUGINS", raising=False)
    body = _PLUGIN_SOURCE.format(cls="PluginModel", name="plugin-dist", backends=("plugbk",))
    _plugin(tmp_path, monkeypatch, body)
    assert _seeded().for_backend("plugbk").__name__ == "PluginModel"


def test_plugin_that_raises_on_import_is_skipped_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISTBRIDGE_DISABLE_PLUGINS", raising=False)
    _plugin(tmp_path, monkeypatch, "raise ImportError('missing libfoo.so')\n", entry="broken")
    fresh = _seeded()
    with pytest.warns(RuntimeWarning, match=r"skipped computation model plug-in 'broken'") as rec:
        models = fresh.models()
    assert models == tuple(sorted(BUILTIN_MODELS, key=lambda m: -m.priority))
    message = str(rec[0].message)
    assert "ImportError: missing libfoo.so" in message
    assert "DISTBRIDGE_DISABLE_PLUGINS=1" in message
    assert fresh.for_backend("gloo") is NativeModel  # distbridge keeps working


def test_plugin_that_clashes_is_skipped_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISTBRIDGE_DISABLE_PLUGINS", raising=False)
    body = _PLUGIN_SOURCE.format(cls="Rival", name="rival", backends=("gloo",))
    _plugin(tmp_path, monkeypatch, body, cls="Rival", entry="rival")
    fresh = _seeded()
    with pytest.warns(RuntimeWarning, match=r"plug-in 'rival' .*ValueError: Cannot register Rival"):
        fresh.models()
    assert fresh.for_backend("gloo") is NativeModel


def test_a_plugins_context_is_probed_without_another_query_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISTBRIDGE_DISABLE_PLUGINS", raising=False)
    body = _PLUGIN_SOURCE.format(cls="PluginModel", name="plugin-dist", backends=("plugbk",))
    body += "    context: ClassVar[bool] = True\n"
    _plugin(tmp_path, monkeypatch, body)
    fresh = _seeded()
    assert SerialModel(fresh).is_current() is False  # a context exists: serial is stale
    assert type(fresh.detect()).__name__ == "PluginModel"


def test_disable_plugins_skips_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = _PLUGIN_SOURCE.format(cls="PluginModel", name="plugin-dist", backends=("plugbk",))
    module = _plugin(tmp_path, monkeypatch, body)
    monkeypatch.setenv("DISTBRIDGE_DISABLE_PLUGINS", "1")
    fresh = _seeded()
    assert set(fresh.models()) == set(BUILTIN_MODELS)
    assert module not in sys.modules
    with pytest.raises(BackendUnavailableError, match=r"Unknown backend 'plugbk'"):
        fresh.for_backend("plugbk")


def test_disable_plugins_zero_means_enabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = _PLUGIN_SOURCE.format(cls="PluginModel", name="plugin-dist", backends=("plugbk",))
    _plugin(tmp_path, monkeypatch, body)
    monkeypatch.setenv("DISTBRIDGE_DISABLE_PLUGINS", "0")
    assert "plugbk" in _seeded().known_backends()


def test_reset_plugins_reloads_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISTBRIDGE_DISABLE_PLUGINS", raising=False)
    body = _PLUGIN_SOURCE.format(cls="PluginModel", name="plugin-dist", backends=("plugbk",))
    _plugin(tmp_path, monkeypatch, body)
    fresh = _seeded()
    assert "plugbk" in fresh.known_backends()
    fresh._reset_plugins()
    assert fresh._models == [m for m in fresh._models if m in BUILTIN_MODELS]
    assert "plugbk" in fresh.known_backends()
