"""Scenarios the XLA tests run in a fresh interpreter: ``python -m tests.distributed.xla_targets
SCENARIO OUT TMP`` writes the per-check results as JSON to OUT.

- ``initialize``: ``idist.initialize("xla-tpu")`` in a plain process (or under torchrun);
- ``parallel``: ``with idist.Parallel(backend="xla-tpu")``, which initializes and finalizes;
- ``xmp``: code already running under ``xmp.spawn``, adopted without initialize;
- ``pg``: a torch.distributed process group with the ``xla`` backend, adopted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch

import distbridge as idist
from tests.distributed import xla_checks

# ---- functions idist.spawn("xla-tpu", ...) runs in its replicas ------------------------------


def layout(local_rank: int, base: int, *, scale: int = 1) -> dict[str, Any]:
    """Where the replica is, and a tensor left on the XLA device (it comes back on the CPU)."""
    return {
        "local_rank_arg": local_rank,
        "model": idist.model_name(),
        "rank": idist.get_rank(),
        "world_size": idist.get_world_size(),
        "device": str(idist.device()),
        "value": base * scale + idist.get_rank(),
        "tensor": idist.all_reduce(torch.ones(2, device=idist.device())),
    }


def fail_on_rank(local_rank: int, bad_rank: int) -> None:
    if idist.get_rank() == bad_rank:
        raise ValueError(f"boom from rank {bad_rank}")
    idist.barrier()  # the others wait in a collective that rank never joins
    time.sleep(60)


def hard_exit(local_rank: int, code: int) -> None:
    os._exit(code)


def exit_cleanly(local_rank: int) -> None:
    sys.exit(0)


def sleep(local_rank: int, seconds: float) -> None:
    time.sleep(seconds)


def unpicklable(local_rank: int) -> Any:
    return lambda: None


def run_all(local_rank: int, tmp: str, full: bool = True) -> dict[str, str]:
    return xla_checks.run_all(local_rank, tmp, full)


# ---- scenarios in a fresh interpreter -----------------------------------------------------


def _write(out: str, results: dict[str, Any]) -> None:
    with open(out, "w", encoding="utf-8") as f:
        json.dump(results, f)


def _adopted(out: str, tmp: str) -> None:
    """Run every check in a context distbridge did not create."""
    assert idist.model_name() == "xla-dist", idist.model_name()
    _write(out, {"adopted": idist.model_name(), **xla_checks.run_all(0, tmp, False)})
    idist.finalize()


def _xmp_replica(index: int, out: str, tmp: str) -> None:
    _adopted(out, tmp)


def main(scenario: str, out: str, tmp: str) -> None:
    if scenario == "initialize":
        import torch.distributed as dist

        idist.initialize("xla-tpu")
        group = dist.get_backend() if dist.is_initialized() else None  # torchrun: "xla"
        made = {"initialized": idist.model_name(), "group": group}
        _write(out, {**made, **xla_checks.run_all(0, tmp, False)})
        idist.finalize()
    elif scenario == "parallel":
        with idist.Parallel(backend="xla-tpu") as parallel:
            info = parallel.run(layout, 10, scale=2)
        info["tensor"] = info["tensor"].cpu().tolist()
        _write(out, {**info, "after": idist.model_name()})
    elif scenario == "xmp":
        import torch_xla.distributed.xla_multiprocessing as xmp

        xmp.spawn(_xmp_replica, args=(out, tmp), nprocs=1)
    elif scenario == "pg":
        import torch.distributed as dist
        from torch.distributed import HashStore
        from torch_xla.distributed import xla_backend  # noqa: F401  (registers "xla")

        dist.init_process_group("xla", store=HashStore(), rank=0, world_size=1)
        try:
            idist.initialize("xla-tpu")  # the group is adopted first: already initialized
        except idist.DistributedError as err:
            assert "already initialized with backend 'xla-tpu'" in str(err), err
        else:
            raise AssertionError("initialize() over a live xla group must raise")
        from distbridge.models import XlaModel

        try:
            XlaModel.from_backend("xla-tpu")  # below the facade: the model refuses too
        except idist.DistributedError as err:
            assert "torch.distributed is already initialized (backend 'xla')" in str(err), err
        else:
            raise AssertionError("XlaModel.from_backend over a live group must raise")
        _adopted(out, tmp)
        assert not dist.is_initialized(), "finalize() destroys the adopted group, as for gloo"
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
