"""Argument checks of the native model that must fail on every rank alike, before torch sees
the arguments (torch fails on some ranks only, or with a RuntimeError)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch.distributed as dist

__all__ = ["check_group_options", "optional_argument"]


def _available() -> tuple[str, ...]:
    from distbridge.models.native import NativeModel  # here: native imports this module

    return NativeModel.available_backends()


def optional_argument(name: str, value: object, kind: type, least: int) -> Any:
    """``value`` when it is None or a ``kind`` (an int at least ``least``); TypeError or
    ValueError naming it otherwise, before torch sees it."""
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"initialize(): {name} must be a {kind.__name__}, got {value!r}.")
    if isinstance(value, int) and value < least:
        raise ValueError(f"initialize(): {name} must be at least {least}, got {value!r}.")
    return value


def check_group_options(options: Mapping[str, Any]) -> None:
    """TypeError for an option ``torch.distributed.new_group`` does not take; ValueError for a
    ``backend`` option that cannot run here. Checked on every rank alike, before any rank
    calls torch (which would fail on some ranks only)."""
    known = set(inspect.signature(dist.new_group).parameters) - {"ranks"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"new_group() got unexpected keyword arguments {unknown}; torch.distributed."
            f"new_group takes {', '.join(sorted(known))}."
        )
    backend = options.get("backend")
    if backend is not None and str(backend).lower() not in _available():
        raise ValueError(
            f"new_group(backend={backend!r}): not a backend that can run here; available: "
            f"{', '.join(_available())}."
        )
