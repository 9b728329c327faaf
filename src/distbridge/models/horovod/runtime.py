"""Horovod's side of the environment: loading ``horovod.torch`` lazily, why it cannot run,
and the variables ``hvd.init()`` reads, set only while it runs."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import torch

from distbridge.models._engine_state import engines

__all__ = [
    "DYNAMIC_VAR",
    "hvd_module",
    "mpi_outlives_shutdown",
    "set_init_environ",
    "unavailable",
]


def hvd_module() -> Any:
    """The ``horovod.torch`` module (imported on first use)."""
    return importlib.import_module("horovod.torch")


@functools.cache
def unavailable() -> str | None:
    """Why Horovod cannot run here, or None; computed once (it imports horovod.torch)."""
    spec = importlib.util.find_spec("horovod")
    if spec is None:
        return (
            "horovod is not installed: build Horovod 0.28.1 from source against this torch "
            "with `bash ci/build_horovod.sh` in a distbridge checkout (or `nox -s horovod`, "
            "which also runs its tests); a plain `pip install horovod` fails to build with "
            "torch >= 2.1 (C++17), see docs/backends/horovod.md"
        )
    folders = [Path(p) / "torch" for p in spec.submodule_search_locations or ()]
    if not any(any(f.glob("mpi_lib_v2*")) for f in folders):
        return (
            "horovod is installed without its PyTorch extension (horovod/torch/mpi_lib_v2 is "
            "missing); rebuild it with torch installed and HOROVOD_WITH_PYTORCH=1: "
            "`DISTBRIDGE_HOROVOD_REBUILD=1 bash ci/build_horovod.sh` in a distbridge checkout "
            "does it (see docs/backends/horovod.md)"
        )
    try:
        hvd_module()
    except Exception as err:  # a broken build must not break distbridge
        return (
            f"horovod.torch does not load ({type(err).__name__}: {err}); rebuild Horovod "
            f"against this torch {torch.__version__}: `DISTBRIDGE_HOROVOD_REBUILD=1 bash "
            "ci/build_horovod.sh` in a distbridge checkout (see docs/backends/horovod.md)"
        )
    return None


def mpi_outlives_shutdown(hvd: Any) -> bool:
    """Under mpirun, with Horovod built with MPI: start MPI through mpi4py before hvd.init().

    Horovod finalizes MPI at hvd.shutdown() when it started MPI itself, and MPI cannot start
    twice in a process (a second hvd.init() aborts it). Started by mpi4py, MPI outlives
    hvd.shutdown(). Returns whether MPI will outlive the next shutdown.
    """
    launched = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))
    if not launched or os.environ.get("HOROVOD_CONTROLLER") == "gloo" or not hvd.mpi_built():
        return True  # the Gloo controller, or no MPI at all
    try:
        mpi = importlib.import_module("mpi4py.MPI")  # initializes MPI (thread level multiple)
    except ImportError:
        return False
    return not bool(mpi.Is_finalized())


DYNAMIC_VAR = "HOROVOD_DYNAMIC_PROCESS_SETS"


def set_init_environ() -> dict[str, str | None]:
    """Set the variables for hvd.init() and return what they were (None: unset), for
    `restore_env` right after it: dynamic process sets, so new_group() can add sets later;
    under horovodrun's Gloo rendezvous also a host name new to each initialization in this
    process, because the rendezvous server keeps the per-host keys of an earlier one (its
    cleanup of finished scopes loses some), which would point a re-initialization at
    closed ports. Every rank on a host initializes as often, so they agree on the name."""
    values = {DYNAMIC_VAR: "1"}
    if os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") and not os.environ.get("HOROVOD_ELASTIC"):
        host = os.environ.get("HOROVOD_HOSTNAME", "localhost")
        values["HOROVOD_HOSTNAME"] = f"{host}.distbridge{engines.horovod_initializations}"
    engines.horovod_initializations += 1
    previous = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    return previous
