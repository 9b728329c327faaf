"""DeviceMesh dimensions as ``group=`` on 4 real gloo ranks (``mesh_targets``)."""

from __future__ import annotations

import pytest

from distbridge.testing import run_distributed
from tests.distributed import mesh_targets

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


def test_mesh_dimensions_are_groups() -> None:
    per_rank = run_distributed(
        mesh_targets.run_mesh_checks, backend="gloo", world_size=4, args=([1, 2, 3],), timeout=90
    )
    problems = [f"rank {r}: {p}" for r, found in enumerate(per_rank) for p in found]
    assert not problems, "\n".join(problems)
