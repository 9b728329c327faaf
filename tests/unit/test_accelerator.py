"""Devices and backends from torch's own tables (torch.accelerator, Backend.backend_capability,
get_default_backend_for_device), and the device NCCL binds at start-up (``device_id``)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import distbridge as idist
from distbridge.models import _accelerator as acc
from distbridge.models._layout import Layout
from distbridge.models.native import backends as native_backends
from distbridge.models.native import model as native_model
from distbridge.models.native.init import bound_device


def _device_types() -> list[str]:
    """The device types in torch's default map that torch.device takes (torch_xla 2.9
    registers ``devices="xla"``, a string, so its letters land in the map as device types)."""
    kept = []
    for name in sorted(dist.Backend.default_device_backend_map):
        try:
            torch.device(name)
        except RuntimeError:
            continue
        kept.append(name)
    return kept


@pytest.mark.parametrize("device_type", _device_types())
def test_the_default_backend_is_torch_s(device_type: str) -> None:
    assert acc.default_backend(device_type) == dist.get_default_backend_for_device(device_type)


def test_the_default_backend_here_is_that_of_this_process_s_accelerator() -> None:
    here = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    want = dist.get_default_backend_for_device(here.type if here is not None else "cpu")
    assert acc.default_backend() == want


@pytest.mark.parametrize("backend", sorted(dist.Backend.backend_capability))
def test_backend_device_types_are_torch_s_capabilities(backend: str) -> None:
    assert acc.backend_device_types(backend) == tuple(dist.Backend.backend_capability[backend])


def test_nccl_and_xccl_take_accelerator_tensors_only() -> None:
    assert not acc.takes_cpu_tensors("nccl") and not acc.takes_cpu_tensors("xccl")
    assert acc.takes_cpu_tensors("gloo") and acc.takes_cpu_tensors("mpi")


def test_the_accelerator_is_torch_s_and_the_serial_device_follows_it() -> None:
    available = torch.accelerator.is_available()
    assert acc.accelerator_type() == (
        torch.accelerator.current_accelerator().type if available else None  # type: ignore[union-attr]
    )
    assert acc.accelerator_count() == (torch.accelerator.device_count() if available else 0)
    assert idist.device() == acc.local_device()
    if not available:
        assert acc.local_device() == torch.device("cpu")


def test_torch_s_backends_are_not_plug_ins() -> None:
    assert acc.registered_backends() == ()  # nothing registered in this process


@pytest.mark.parametrize(
    ("backend", "local_rank", "want"),
    [
        ("nccl", 3, torch.device("cuda", 3)),
        ("xccl", 1, torch.device("xpu", 1)),
        ("nccl", None, None),  # unknown before the rendezvous: torch binds lazily
        ("gloo", 0, None),
        ("mpi", 2, None),
    ],
)
def test_the_device_bound_at_start_up(
    backend: str, local_rank: int | None, want: torch.device | None
) -> None:
    assert bound_device(backend, local_rank) == want


def _layout(local_rank: int, nproc: int) -> Layout:
    return Layout(rank=local_rank, world_size=nproc, local_rank=local_rank,
                  nproc_per_node=nproc, nnodes=1, node_rank=0)  # fmt: skip


@pytest.mark.parametrize(
    ("accelerator", "backend", "want"),
    [
        ("cuda", "gloo", "cuda:1"),  # as ignite: gloo on a CUDA machine computes on CUDA
        ("cuda", "nccl", "cuda:1"),
        ("xpu", "xccl", "xpu:1"),
        ("xpu", "gloo", "cpu"),  # gloo cannot take XPU tensors
        ("mps", "gloo", "cpu"),
        (None, "gloo", "cpu"),
    ],
)
def test_a_backend_computes_on_the_accelerator_it_takes(
    monkeypatch: pytest.MonkeyPatch, accelerator: str | None, backend: str, want: str
) -> None:
    monkeypatch.setattr(native_backends, "accelerator_type", lambda: accelerator)
    monkeypatch.setattr(native_backends, "accelerator_count", lambda: 2 if accelerator else 0)
    assert str(native_backends.device_for(backend, _layout(1, 2))) == want


def test_the_native_backends_are_torch_s_then_registered_ones() -> None:
    assert native_model.NativeModel.backends[:3] == ("nccl", "gloo", "mpi")
    assert "gloo" in idist.available_backends()
    assert "xccl" not in idist.available_backends() or dist.is_xccl_available()
