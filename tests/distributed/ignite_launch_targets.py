"""Worker functions and process bodies for ``test_ignite_launch.py``: the launch paths ignite
users rely on, run for real with ``ignite.distributed`` and with distbridge."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import ignite.distributed as ignite_dist
import torch

import distbridge as idist

__all__ = ["hand_set_rank", "node", "report", "report_to"]

LIBS: dict[str, ModuleType] = {"ignite": ignite_dist, "distbridge": idist}


def report(lib: ModuleType) -> dict[str, Any]:
    """What a rank sees: its place, the rendezvous variables, and a sum over the ranks."""
    return {
        "rank": lib.get_rank(),
        "world": lib.get_world_size(),
        "local_rank": lib.get_local_rank(),
        "backend": lib.backend(),
        "master": (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")),
        "sum": lib.all_reduce(torch.tensor([lib.get_rank() + 1.0])).item(),
    }


def report_to(local_rank: int, lib_name: str, folder: str) -> dict[str, Any]:
    """A spawned worker's `report`, also written to ``folder`` (ignite's spawn drops results)."""
    seen = report(LIBS[lib_name])
    Path(folder, f"{seen['rank']}.json").write_text(json.dumps(seen))
    return seen


def hand_set_rank(file_prefix: str) -> None:
    """One process of a job whose RANK / LOCAL_RANK / WORLD_SIZE were set by hand: with each
    library, and with env:// (the environment's MASTER_ADDR / MASTER_PORT) then file://
    (``file_prefix`` + the library's name), initialize, `report`, finalize; prints
    ``{"ignite env": report, ...}`` as JSON."""
    seen = {}
    for name, lib in LIBS.items():
        for rendezvous in ("env", "file"):
            kwargs = {} if rendezvous == "env" else {"init_method": f"file://{file_prefix}{name}"}
            lib.initialize("gloo", **kwargs)
            try:
                seen[f"{name} {rendezvous}"] = report(lib)
            finally:
                lib.finalize()
    print(json.dumps(seen))


def node(node_rank: int, port: int, timeout: float, nproc: int = 2) -> None:
    """One node of a 2-node ``Parallel`` job on loopback, ``nproc`` workers each; prints the
    results as JSON, or the error as ``ERROR <type>: <message>`` (exit code 3)."""
    try:
        with idist.Parallel(
            backend="gloo",
            nproc_per_node=nproc,
            nnodes=2,
            node_rank=node_rank,
            master_addr="127.0.0.1",
            master_port=str(port),  # as argparse gives it
            timeout=timedelta(seconds=timeout),
        ) as parallel:
            print(json.dumps(parallel.run(_node_report)))
    except Exception as err:  # the test reads what each node said
        print(f"ERROR {type(err).__name__}: {err}")
        sys.exit(3)


def _node_report(local_rank: int) -> dict[str, Any]:
    return {**report(idist), "node": idist.get_node_rank(), "nnodes": idist.get_nnodes()}
