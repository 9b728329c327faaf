"""Run under SLURM by tests/distributed/test_slurm.py; writes this process's view as JSON.

Usage: ``python slurm_script.py OUT_DIR [MODE]``, MODE one of:

- ``srun`` (default), as an srun task: records the rank queries before ``initialize()``,
  initializes with nothing but the backend, records the layout, an all_reduce and an
  all_gather, and writes ``OUT_DIR/rank<N>.json``;
- ``shell``, as an sbatch script's own process (no srun): records what distbridge detects
  and warns, without initializing, into ``OUT_DIR/shell.json``;
- ``spawn``, as the one srun task of its node: ``idist.spawn`` starts 2 workers here, with
  ``nnodes`` and ``node_rank`` from SLURM's variables; each worker writes its rank file.
"""

import json
import os
import sys
import warnings
from typing import Any

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import distbridge as idist
    from distbridge import environments

    launch = environments.detect()


def _view() -> dict[str, Any]:
    """What this process knows before any process group exists."""
    return {
        "launcher": None if launch is None else launch.launcher,
        "master_addr": None if launch is None else launch.master_addr,
        "master_port": None if launch is None else launch.master_port,
        "warnings": [str(w.message) for w in caught],
        "slurm": {k: v for k, v in os.environ.items() if k.startswith(("SLURM_", "SLURMD_"))},
        "before": {
            "rank": idist.get_rank(),
            "local_rank": idist.get_local_rank(),
            "world_size": idist.get_world_size(),
            "nproc_per_node": idist.get_nproc_per_node(),
            "nnodes": idist.get_nnodes(),
            "node_rank": idist.get_node_rank(),
            "rank_zero_only": idist.rank_zero_only(lambda: True)(),
        },
    }


def _layout() -> dict[str, Any]:
    """The live context's layout and two collectives' results."""
    return {
        "rank": idist.get_rank(),
        "local_rank": idist.get_local_rank(),
        "world_size": idist.get_world_size(),
        "nproc_per_node": idist.get_nproc_per_node(),
        "nnodes": idist.get_nnodes(),
        "node_rank": idist.get_node_rank(),
        "sum": idist.all_reduce(idist.get_rank() + 1),
        "nodes": idist.all_gather(os.environ["SLURMD_NODENAME"]),
        # The ranks on this machine, whatever the placement (cyclic, uneven).
        "local_group_ranks": idist.all_gather_object(
            idist.get_rank(), group=idist.get_local_group()
        ),
    }


def _write(out_dir: str, info: dict[str, Any]) -> None:
    # One file per rank: srun merges the tasks' stdout, where lines can interleave.
    with open(os.path.join(out_dir, f"rank{info['rank']}.json"), "w") as out:
        json.dump(info, out)


def _spawned(local_rank: int, out_dir: str) -> None:
    _write(out_dir, {**_view(), **_layout(), "local_rank_arg": local_rank})


def main() -> None:
    out_dir, mode = sys.argv[1], (sys.argv[2:] or ["srun"])[0]
    if mode == "shell":
        with open(os.path.join(out_dir, "shell.json"), "w") as out:
            json.dump(_view(), out)
    elif mode == "spawn":
        idist.spawn(
            "gloo", _spawned, args=(out_dir,), nproc_per_node=2,
            nnodes=int(os.environ["SLURM_NNODES"]), node_rank=int(os.environ["SLURM_NODEID"]),
            master_addr=os.environ["MASTER_ADDR"], master_port=int(os.environ["MASTER_PORT"]),
        )  # fmt: skip
    else:
        info = _view()
        idist.initialize("gloo")
        info.update(_layout())
        idist.finalize()
        _write(out_dir, info)


if __name__ == "__main__":
    main()
