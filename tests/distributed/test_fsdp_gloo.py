"""auto_model(strategy="fsdp") on 2 and 4 gloo ranks against one process on the whole batch.

Each rank trains on its share of every batch (mean squared error); FSDP2 averages the
gradients across the ranks, so the sharded model must end where the plain model ends after
the same steps on the whole batch. float32, compared with atol 1e-6 and rtol 1e-5 (sums in a
different order). The checkpoint the job saves loads into the plain model in this process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distbridge.checkpoint import load_checkpoint
from tests.distributed import fsdp_targets, warm
from tests.distributed.fsdp_targets import Training

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

ATOL, RTOL = 1e-6, 1e-5
MAX_DIFF: list[float] = []  # every comparison's largest absolute difference (printed with -s)


def trainings(world: int) -> st.SearchStrategy[Training]:
    return st.builds(
        Training,
        widths=st.lists(st.integers(1, 9), min_size=2, max_size=4).map(tuple),
        batch=st.integers(1, 3).map(lambda k: k * world),
        optimizer=st.sampled_from(["SGD", "Adam"]),
        lr=st.sampled_from([1e-3, 1e-2, 0.1]),
        steps=st.integers(1, 3),
        seed=st.integers(0, 2**16),
    )


def _check(run: Training, world: int, folder: Path) -> None:
    path = folder / f"fsdp-{world}.pt"
    results = warm.call(fsdp_targets.train_sharded, world_size=world, args=(run, str(path)))
    assert all(r["sharded"] for r in results), "every parameter is a DTensor"
    assert {r["type"] for r in results} == {"FSDPSequential"}
    want = fsdp_targets.reference(run)
    got = results[0]["state"]
    assert list(got) == list(want)
    for name, value in want.items():
        MAX_DIFF.append(float((got[name] - value).abs().max()) if value.numel() else 0.0)
        torch.testing.assert_close(got[name], value, atol=ATOL, rtol=RTOL, msg=name)
    plain = run.model()
    load_checkpoint(path, plain, run.optimizer_for(plain))
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(value, got[name], atol=0, rtol=0, msg=name)


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp_steps_equal_one_process_on_the_whole_batch(world: int, tmp_path: Path) -> None:
    @settings(
        max_examples=6 if world == 2 else 4,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(run=trainings(world))
    def check(run: Training) -> None:
        _check(run, world, tmp_path)

    MAX_DIFF.clear()
    check()
    print(
        f"\nFSDP2 on {world} gloo ranks: max abs diff {max(MAX_DIFF):.3g} "
        f"over {len(MAX_DIFF)} tensors"
    )


@pytest.mark.parametrize("world", [1, 2])
def test_an_optimizer_built_before_sharding_is_refused(world: int) -> None:
    for result in warm.call(fsdp_targets.stale_optimizer, world_size=world):
        assert result["world"] == world
        assert "replaced with sharded ones" in str(result["refused"])
        assert "4 parameter(s)" in str(result["refused"])
        assert result["late_kept"]
        assert result["units"] == ["", "0", "2"], "the root and each child with parameters"
