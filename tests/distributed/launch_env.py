"""The environment a test gives a launcher it starts (torchrun, mpirun, a script)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["REPO", "launcher_free_env"]

REPO = Path(__file__).resolve().parents[2]


def launcher_free_env() -> dict[str, str]:
    """This environment without any launcher's variables, with the repository importable."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
            "MASTER_PORT", "GROUP_WORLD_SIZE")  # fmt: skip
    prefixes = ("OMPI_", "PMIX_", "PMI_", "SLURM_", "HOROVOD_", "JSM_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(prefixes)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return env
