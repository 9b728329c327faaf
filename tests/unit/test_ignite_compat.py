"""ignite.distributed compatibility: names, signatures, submodules and barrier's options."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import distbridge as idist

# ---- the reference: ignite.distributed 0.5.x signatures, bodies elided -----------------------
# Written from ignite's ignite/distributed/{utils,auto,launcher}.py; only the parameter lists
# matter (names, kinds, defaults, order).


def _backend() -> None: ...
def _broadcast(tensor: Any, src: int = 0, safe_mode: bool = False) -> None: ...
def _spawn(
    backend: Any,
    fn: Any,
    args: Any,
    kwargs_dict: Any = None,
    nproc_per_node: int = 1,
    **kwargs: Any,
) -> None: ...
def _initialize(backend: Any, **kwargs: Any) -> None: ...
def _set_local_rank(index: Any) -> None: ...
def _all_reduce(tensor: Any, op: str = "SUM", group: Any = None) -> None: ...
def _all_gather(tensor: Any, group: Any = None) -> None: ...
def _barrier(*args: Any, **kwargs: Any) -> None: ...
def _sync(temporary: bool = False) -> None: ...
def _one_rank_only(rank: int = 0, with_barrier: bool = False) -> None: ...
def _new_group(ranks: Any, **kwargs: Any) -> None: ...
def _one_rank_first(rank: int = 0, local: bool = False) -> None: ...
def _with_shapes(tensor: Any, shapes: Any, group: Any = None) -> None: ...
def _parallel(
    backend: Any = None,
    nproc_per_node: Any = None,
    nnodes: Any = None,
    node_rank: Any = None,
    master_addr: Any = None,
    master_port: Any = None,
    init_method: Any = None,
    **spawn_kwargs: Any,
) -> None: ...
def _auto_dataloader(dataset: Any, **kwargs: Any) -> None: ...
def _auto_model(model: Any, sync_bn: bool = False, **kwargs: Any) -> None: ...
def _auto_optim(optimizer: Any, **kwargs: Any) -> None: ...
def _proxy_sampler(sampler: Any, num_replicas: Any = None, rank: Any = None) -> None: ...


_NO_ARGS = [
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
    "finalize",
    "show_config",
    "hostname",
]
IGNITE: dict[str, Callable[..., None]] = {
    **dict.fromkeys(_NO_ARGS, _backend),
    "broadcast": _broadcast,
    "spawn": _spawn,
    "initialize": _initialize,
    "set_local_rank": _set_local_rank,
    "all_reduce": _all_reduce,
    "all_gather": _all_gather,
    "barrier": _barrier,
    "sync": _sync,
    "one_rank_only": _one_rank_only,
    "new_group": _new_group,
    "one_rank_first": _one_rank_first,
    "all_gather_tensors_with_shapes": _with_shapes,
    "Parallel": _parallel,
    "auto_dataloader": _auto_dataloader,
    "auto_model": _auto_model,
    "auto_optim": _auto_optim,
    "DistributedProxySampler": _proxy_sampler,
}
IGNITE_VALUES = (
    "has_xla_support",
    "has_native_dist_support",
    "has_hvd_support",
    "registered_computation_models",
)
#: Where ignite takes ``*args`` / ``**kwargs`` and hands them to the backend, distbridge names
#: the parameters instead (a misspelt one is a TypeError, not silently ignored). Every call
#: ignite's backends document must bind to our signature.
NARROWED: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    # torch.distributed.barrier(group, async_op, device_ids), on ignite's native model
    "barrier": [
        ((), {}),
        ((None,), {}),
        ((None, False), {}),
        ((None, False, [0]), {}),
        ((), {"group": None, "async_op": True, "device_ids": [0]}),
    ],
}

_P = inspect.Parameter


def _check_signature(ours: inspect.Signature, ref: inspect.Signature, name: str) -> None:
    ours_params = list(ours.parameters.values())
    positional = [p for p in ref.parameters.values() if p.kind is _P.POSITIONAL_OR_KEYWORD]
    assert len(ours_params) >= len(positional), name
    for mine, theirs in zip(ours_params, positional, strict=False):
        assert (mine.name, mine.kind) == (theirs.name, theirs.kind), name
        if theirs.default is not _P.empty:
            assert mine.default == theirs.default, (name, mine.name)
            assert type(mine.default) is type(theirs.default), (name, mine.name)
    for theirs in ref.parameters.values():
        if theirs.kind is _P.KEYWORD_ONLY:
            mine = ours.parameters[theirs.name]
            assert mine.kind in (_P.KEYWORD_ONLY, _P.POSITIONAL_OR_KEYWORD), (name, mine.name)
            assert mine.default == theirs.default, (name, mine.name)
        elif theirs.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) and name not in NARROWED:
            same = [p.name for p in ours_params if p.kind is theirs.kind]
            assert same == [theirs.name], (name, theirs.name)
    for extra in ours_params[len(positional) :]:  # our additions: optional, after ignite's
        assert extra.kind in (_P.VAR_KEYWORD, _P.VAR_POSITIONAL) or extra.default is not _P.empty
    for args, kwargs in NARROWED.get(name, []):
        ours.bind(*args, **kwargs)  # TypeError if a documented call of ignite's does not bind


def test_every_ignite_name_is_exported() -> None:
    for name in (*IGNITE, *IGNITE_VALUES):
        assert name in idist.__all__, name
        assert hasattr(idist, name), name


def test_every_exported_name_exists() -> None:
    missing = [name for name in idist.__all__ if not hasattr(idist, name)]
    assert missing == []
    assert len(set(idist.__all__)) == len(idist.__all__)


@pytest.mark.parametrize("name", sorted(IGNITE))
def test_signature_matches_ignite(name: str) -> None:
    _check_signature(inspect.signature(getattr(idist, name)), inspect.signature(IGNITE[name]), name)


def test_the_signature_check_catches_drift() -> None:
    def renamed(tensor: Any, operation: str = "SUM", group: Any = None) -> None: ...
    def no_kwargs(backend: Any) -> None: ...
    def new_kw_default(*args: Any, flag: int = 1) -> None: ...
    def ref_kw(*args: Any, flag: int = 2) -> None: ...
    def only_group(group: Any = None) -> None: ...

    sig = inspect.signature
    with pytest.raises(AssertionError):
        _check_signature(sig(renamed), sig(_all_reduce), "all_reduce")
    with pytest.raises(AssertionError):
        _check_signature(sig(no_kwargs), sig(_initialize), "initialize")
    with pytest.raises(AssertionError):
        _check_signature(sig(new_kw_default), sig(ref_kw), "x")
    with pytest.raises(TypeError):
        _check_signature(sig(only_group), sig(_barrier), "barrier")  # (None, False) won't bind


def test_our_additions_to_ignite_signatures() -> None:
    sig = inspect.signature
    assert list(sig(idist.all_reduce).parameters) == ["tensor", "op", "group"]
    assert list(sig(idist.broadcast).parameters) == ["tensor", "src", "safe_mode", "group"]
    assert sig(idist.broadcast).parameters["group"].default is None
    barrier = sig(idist.barrier).parameters
    assert list(barrier) == ["group", "async_op", "device_ids", "timeout", "name"]
    assert barrier["timeout"].kind is _P.KEYWORD_ONLY
    assert sig(idist.spawn).parameters["args"].default == ()


def test_ignite_keyword_calls_work() -> None:
    t = torch.ones(1)
    assert idist.all_reduce(tensor=t) is t
    assert idist.all_gather(tensor=1) == [1]
    assert idist.broadcast(tensor=1.5, src=0) == 1.5
    assert idist.sync(temporary=True) is None


# ---- barrier's torch.distributed options ------------------------------------------------------


def test_barrier_options_serial() -> None:
    assert idist.barrier(None, False, [0]) is None
    assert idist.barrier(device_ids=[0, 1]) is None
    work = idist.barrier(async_op=True)
    assert work.wait() is True
    assert work.is_completed() and work.is_success()
    assert idist.barrier([0], True).wait()  # a group of ranks, positionally


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"async_op": 10}, TypeError, r"async_op must be a bool, got 10; .*barrier\(timeout=10\)"),
        ({"async_op": "yes"}, TypeError, r"async_op must be a bool, got 'yes'\.$"),
        ({"device_ids": 0}, TypeError, r"device_ids must be a list .* got 0\."),
        ({"device_ids": [True]}, TypeError, r"got \[True\]"),
        ({"device_ids": [-1]}, ValueError, r"non-negative device indices, got \[-1\]"),
        ({"async_op": True, "timeout": 5}, ValueError, r"async_op=True\) cannot have a timeout"),
    ],
)
def test_barrier_options_are_validated(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        idist.barrier(**kwargs)


def test_barrier_rejects_other_backends_options() -> None:
    with pytest.raises(TypeError, match="process_set"):
        idist.barrier(process_set=None)  # type: ignore[call-overload]


def test_barrier_timeout_is_keyword_only() -> None:
    # The positional slot after group is torch's async_op now.
    with pytest.raises(TypeError, match=r"barrier\(timeout=5\.0\)"):
        idist.barrier(None, 5.0)  # type: ignore[call-overload]


# ---- submodules: one import change ------------------------------------------------------------

_NOT_IN_UTILS = (
    "Parallel",
    "DistributedProxySampler",
    "auto_dataloader",
    "auto_model",
    "auto_optim",
)
#: ignite submodule -> distbridge module, and the names code imports from it
SUBMODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ignite.distributed.utils": (
        "distbridge.utils",
        (*(n for n in IGNITE if n not in _NOT_IN_UTILS), *IGNITE_VALUES),
    ),
    "ignite.distributed.auto": (
        "distbridge.auto",
        ("auto_dataloader", "auto_model", "auto_optim", "DistributedProxySampler"),
    ),
    "ignite.distributed.launcher": ("distbridge.launcher", ("Parallel",)),
    "ignite.distributed.comp_models": ("distbridge.comp_models", IGNITE_VALUES),
}


@pytest.mark.parametrize("ignite_name", sorted(SUBMODULES))
def test_submodule_mirrors_ignite(ignite_name: str) -> None:
    module_name, names = SUBMODULES[ignite_name]
    module = importlib.import_module(module_name)
    assert ignite_name in (module.__doc__ or ""), "the docstring says what it mirrors"
    for name in names:
        assert getattr(module, name) is getattr(idist, name), (module_name, name)
    assert set(names) <= set(module.__all__)
    assert all(getattr(module, n) is getattr(idist, n) for n in module.__all__)


def test_support_flags_are_bools() -> None:
    assert idist.has_native_dist_support is dist.is_available()
    assert idist.has_xla_support is (importlib.util.find_spec("torch_xla") is not None)
    assert idist.has_hvd_support is (importlib.util.find_spec("horovod") is not None)


def test_import_never_pulls_in_xla_or_horovod(tmp_path: Path) -> None:
    # Importable stand-ins that fail loudly if anything imports them.
    for package in ("torch_xla", "horovod"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(
            f"raise RuntimeError('{package} was imported')\n", encoding="utf-8"
        )
    code = (
        "import sys, distbridge, distbridge.comp_models, distbridge.utils, distbridge.launcher\n"
        "import distbridge.compat.detectron2\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch_xla', 'horovod')))\n"
        "print(distbridge.has_xla_support, distbridge.has_hvd_support)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "True True"]
