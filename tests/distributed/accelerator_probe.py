"""Installed as ``sitecustomize`` by test_fork_safety.py: replaces torch's accelerator queries
with ones that record each call (process, name, caller) in a file of their own, then answer.

Every interpreter of the job loads it at start-up (the parent, the warm starter's server, each
worker), so the test can tell who asked what. Only the queries are replaced: a CPU torch
answers them as before (no accelerator)."""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable
from typing import Any

import torch

#: The queries that ask the accelerator's driver (CUDA's device count starts its threads and
#: makes every later fork unable to use CUDA), by module.
QUERIES = {
    "torch.cuda": (
        "is_available", "device_count", "current_device", "get_device_name",
        "get_device_properties", "get_device_capability", "set_device", "init", "_lazy_init",
        "mem_get_info", "synchronize",
    ),
    "torch.accelerator": (
        "is_available", "device_count", "current_accelerator", "current_device_index",
        "current_device_idx", "set_device_index", "set_device_idx", "synchronize",
    ),
    "torch._C": ("_cuda_getDeviceCount",),
}  # fmt: skip


def _recording(where: str, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    log = os.path.join(os.environ["DISTBRIDGE_PROBE_DIR"], "calls.log")

    @functools.wraps(call)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        caller = "; ".join(
            f"{frame.filename}:{frame.lineno} {frame.name}"
            for frame in traceback.extract_stack(limit=8)[:-1]
        )
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\t{where}.{name}\t{caller}\n")
        return call(*args, **kwargs)

    return recorded


def install() -> None:
    """Replace every query in `QUERIES` that this torch has."""
    modules = {"torch.cuda": torch.cuda, "torch._C": torch._C}
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        modules["torch.accelerator"] = accelerator
    for where, names in QUERIES.items():
        module = modules.get(where)
        for name in names:
            call = getattr(module, name, None) if module is not None else None
            if callable(call):
                setattr(module, name, _recording(where, name, call))


if os.environ.get("DISTBRIDGE_PROBE_DIR"):
    install()
