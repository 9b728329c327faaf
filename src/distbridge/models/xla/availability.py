"""Is torch_xla usable here? Judged without importing it (the import takes seconds and starts
a runtime), and the import itself, done once on first use."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
from pathlib import Path
from typing import Any

import torch

from distbridge.errors import BackendUnavailableError

__all__ = ["BACKEND", "IMPORT_FAILURE", "import_modules", "install_problem"]

BACKEND = "xla-tpu"

IMPORT_FAILURE: dict[str, str] = {}  # filled once when importing torch_xla fails


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])  # "2.9.0+cu128": (2, 9)


@functools.cache
def install_problem() -> str | None:
    """Why torch_xla cannot run here, judged without importing it; None when it looks usable."""
    try:
        spec = importlib.util.find_spec("torch_xla")
    except (ImportError, ValueError) as err:
        return f"importlib cannot look up torch_xla ({type(err).__name__}: {err})"
    if spec is None:
        return "torch_xla is not installed; e.g. pip install torch==2.9.0 torch_xla==2.9.0"
    site = Path(spec.origin).parent.parent if spec.origin else None  # _XLAC*.so lies beside it
    if site is None or not any(site.glob("_XLAC*")):
        return f"torch_xla at {spec.origin} lacks its _XLAC extension; reinstall torch_xla"
    try:
        version = importlib.metadata.version("torch_xla")
    except importlib.metadata.PackageNotFoundError:
        return None  # a source checkout: no release to compare
    if _release(version) != _release(torch.__version__):
        wanted = ".".join(map(str, _release(version)))
        return (
            f"torch_xla {version} needs torch {wanted}.*, but torch {torch.__version__} is "
            f"installed; install a matching pair, e.g. pip install torch=={wanted}.0 "
            f"torch_xla=={wanted}.0"
        )
    return None


def import_modules() -> tuple[Any, Any, Any]:
    """``(torch_xla, torch_xla.core.xla_model, torch_xla.runtime)``, imported on first use."""
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr
    except Exception as err:  # a broken install fails in many ways (OSError, RuntimeError, ...)
        reason = f"importing torch_xla failed ({type(err).__name__}: {err}); reinstall it"
        IMPORT_FAILURE.setdefault("reason", reason)
        raise BackendUnavailableError(f"Backend {BACKEND!r} is not available: {reason}.") from err
    return torch_xla, xm, xr
