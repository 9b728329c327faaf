"""Where am I? Each launcher's environment variables, read by a pure function of a mapping.

Detection order (first match wins):

1. torchelastic: torchrun, ``torch.distributed.launch`` and ``distbridge.spawn`` workers
   all set RANK / WORLD_SIZE / LOCAL_RANK, the most specific description of a process.

Schedulers (SLURM, MPI, LSF, horovodrun) are added after it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from distbridge.environments import torchelastic
from distbridge.environments.base import LaunchEnvironment

__all__ = ["DETECTORS", "LaunchEnvironment", "detect"]

DETECTORS: tuple[Callable[[Mapping[str, str]], LaunchEnvironment | None], ...] = (
    torchelastic.detect,
)


def detect(env: Mapping[str, str] | None = None) -> LaunchEnvironment | None:
    """Return the first launcher environment found in ``env`` (default: ``os.environ``)."""
    env = os.environ if env is None else env
    for detector in DETECTORS:
        found = detector(env)
        if found is not None:
            return found
    return None
