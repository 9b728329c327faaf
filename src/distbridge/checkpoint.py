"""Checkpoints of a model and its optimizer that load under any strategy and world size.

Under torch.distributed the state dicts go through ``torch.distributed.checkpoint.state_dict``
(``get_model_state_dict`` / ``get_optimizer_state_dict`` and their ``set_*``), which gather
FSDP2's sharded DTensor parameters into full tensors and name every entry by its parameter's
path in the model, without DDP's ``module.`` prefix. So a file saved by an FSDP2 job on four
ranks loads into a DDP job on two, or into the plain model in one process. One file, written
and read by rank 0 (the full state dicts are gathered to rank 0 on the CPU, and only there).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from distbridge import _api, _collectives
from distbridge.objects import broadcast_object

__all__ = ["full_state_dict", "load_checkpoint", "save_checkpoint"]


def full_state_dict(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """``{"model": ..., "optimizer": ...}`` with full (unsharded) CPU tensors on rank 0.

    Keys are the parameters' paths in the unwrapped model (no ``module.`` prefix); the
    optimizer's state is keyed by the same paths. Under torch.distributed every rank must call
    it (it gathers the shards) and the other ranks get empty dicts.

    Note:
        Without a distributed context it is the model's (and optimizer's) state dicts in the
        same path-keyed form.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    model = _unwrapped(model)
    native = _api.model_name() == "native-dist"  # else no process group: nothing to gather
    options = StateDictOptions(full_state_dict=native, cpu_offload=native)
    state: dict[str, Any] = {"model": get_model_state_dict(model, options=options)}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer, options=options)
    return state


def save_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write ``full_state_dict(model, optimizer)`` (and rank 0's ``extra``: epoch, loss, ...,
    plain data) to ``path`` from rank 0; every rank calls it and returns once the file is
    written. The file is written beside ``path`` and renamed, never left half-written.

    Note:
        Without a distributed context it writes the file (this process is rank 0).
    """
    state = full_state_dict(model, optimizer)
    if _api.get_rank() == 0:
        if extra is not None:
            state["extra"] = dict(extra)
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        torch.save(state, partial)
        os.replace(partial, target)
    _collectives.barrier()


def load_checkpoint(
    path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """Load a file of ``save_checkpoint`` into ``model`` (and ``optimizer``) on every rank;
    returns the ``extra`` it was saved with (``{}`` without), on every rank.

    Rank 0 reads the file (``torch.load(weights_only=True)``: tensors and plain data only)
    and the values reach the other ranks through the backend; each rank keeps its shard
    under FSDP2. Every rank calls it.

    Raises:
        FileNotFoundError: there is no file at ``path`` (on every rank).
        ValueError: the file holds no optimizer state but ``optimizer`` was given.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    model = _unwrapped(model)
    rank0 = _api.get_rank() == 0
    found = rank0 and Path(path).is_file()
    state = torch.load(Path(path), map_location="cpu", weights_only=True) if found else {}
    # what rank 0 found, in one broadcast: every rank raises alike, before any state is sent
    meta = (found, "optimizer" in state, state.get("extra", {})) if rank0 else None
    found, has_optimizer, extra = broadcast_object(meta, src=0)
    if not found:
        raise FileNotFoundError(
            f"load_checkpoint(): rank 0 finds no file at {str(path)!r}; pass the path "
            "save_checkpoint wrote (rank 0 reads it)."
        )
    if optimizer is not None and not has_optimizer:
        raise ValueError(
            f"load_checkpoint({str(path)!r}) got an optimizer, but the file holds no optimizer "
            "state; save it with save_checkpoint(path, model, optimizer), or pass no optimizer."
        )
    native = _api.model_name() == "native-dist"
    if not native and _api.get_world_size() > 1:  # Horovod, XLA: rank 0's values, sent
        state = broadcast_object(state if rank0 else None, src=0)
    options = StateDictOptions(full_state_dict=native, broadcast_from_rank0=native)
    set_model_state_dict(model, state.get("model", {}), options=options)
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, state.get("optimizer", {}), options=options)
    return dict(extra)


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DataParallel (the state-dict helpers strip DDP's prefix themselves)."""
    return model.module if isinstance(model, torch.nn.DataParallel) else model
