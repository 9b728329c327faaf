"""Preemption under spawn, 2 gloo ranks: a signal that reaches one rank stops both at the same
step, one complete checkpoint is written, and a second spawn resumes to the parameters of an
uninterrupted run. Then the faults: a signal before the first step, two in a row, during a
checkpoint's write, a rank dying inside a write or inside the agreed checkpoint, a time budget.

What the ranks run is tests/distributed/preemption_targets.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import distbridge as idist
from distbridge.errors import WorkerFailedError
from tests.distributed.preemption_targets import records, train

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

TOTAL = 20


def _spawn(run_dir: Path, *args: Any, **kwargs: Any) -> None:
    idist.spawn("gloo", train, args=(str(run_dir), TOTAL, *args), kwargs_dict=kwargs,
                nproc_per_node=2, job_timeout=150)  # fmt: skip


def _complete(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.suffix == ".pt")


def _runs(run_dir: Path) -> list[list[dict[str, Any]]]:
    """Per rank, its records (one per run)."""
    return [records(run_dir, rank) for rank in (0, 1)]


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Each rank's record of an uninterrupted run."""
    run_dir = tmp_path_factory.mktemp("straight")
    _spawn(run_dir)
    return [runs[0] for runs in _runs(run_dir)]


def _check_resumed(run_dir: Path, straight: list[dict[str, Any]], stop: int) -> None:
    """A second spawn starts at ``stop`` and ends with the uninterrupted run's parameters
    and, step by step, its losses."""
    _spawn(run_dir)
    for rank, runs in enumerate(_runs(run_dir)):
        assert runs[-1]["start"] == stop
        assert runs[-1]["stop"] is None
        assert runs[-1]["params"] == straight[rank]["params"]
        losses = {**runs[-2]["losses"], **runs[-1]["losses"]}
        assert losses == straight[rank]["losses"]


def test_a_signal_to_one_rank_stops_both_at_one_step(tmp_path: Path, straight: Any) -> None:
    _spawn(tmp_path, 7)  # rank 1 sends itself SIGUSR2 after step 7; they agree at step 10
    first = [runs[0] for runs in _runs(tmp_path)]
    assert [r["stop"] for r in first] == [10, 10]
    assert _complete(tmp_path) == ["step-000000010.pt"]
    assert not list(tmp_path.glob("*.incomplete*"))
    _check_resumed(tmp_path, straight, 10)


def test_a_signal_before_the_first_step(tmp_path: Path, straight: Any) -> None:
    _spawn(tmp_path, 0, 0, "SIGTERM")  # rank 0, before step 1: the first agreement stops
    assert [runs[0]["stop"] for runs in _runs(tmp_path)] == [5, 5]
    _check_resumed(tmp_path, straight, 5)


def test_two_signals_in_a_row_stop_once(tmp_path: Path, straight: Any) -> None:
    _spawn(tmp_path, 11, fault="twice")
    assert [runs[0]["stop"] for runs in _runs(tmp_path)] == [15, 15]
    assert _complete(tmp_path) == ["step-000000015.pt"]
    _check_resumed(tmp_path, straight, 15)


def test_a_signal_during_a_checkpoint_write(tmp_path: Path, straight: Any) -> None:
    """SIGUSR2 inside rank 0's torch.save of the step-4 checkpoint: the write completes, the
    ranks stop at the next agreement (step 5) and checkpoint there."""
    _spawn(tmp_path, check_every=5, save_every=4, fault="write")
    assert [runs[0]["stop"] for runs in _runs(tmp_path)] == [5, 5]
    assert _complete(tmp_path) == ["step-000000004.pt", "step-000000005.pt"]
    _check_resumed(tmp_path, straight, 5)


def test_rank_0_dying_inside_a_write_leaves_no_complete_checkpoint(
    tmp_path: Path, straight: Any
) -> None:
    """Rank 0 ends inside torch.save of step 4: spawn fails, the half-written file is never
    taken for complete, and the next run starts afresh."""
    with pytest.raises(WorkerFailedError) as failed:
        _spawn(tmp_path, save_every=4, fault="die_writing")
    assert failed.value.rank == 0
    assert _complete(tmp_path) == []
    assert list(tmp_path.glob("step-000000004.pt.incomplete*"))
    _spawn(tmp_path)
    for rank, runs in enumerate(_runs(tmp_path)):
        assert runs[-1]["start"] == 0
        assert runs[-1]["params"] == straight[rank]["params"]


def test_a_rank_dying_in_the_agreed_checkpoint(tmp_path: Path, straight: Any) -> None:
    """The ranks agree at step 10; rank 1 dies while the checkpoint of step 10 is taken. Spawn
    fails together; step 10 is not complete, and the next run resumes from step 8's."""
    with pytest.raises(WorkerFailedError) as failed:
        _spawn(tmp_path, 7, save_every=8, fault="die_in_stop")
    assert failed.value.rank == 1
    assert _complete(tmp_path) == ["step-000000008.pt"]
    _spawn(tmp_path)
    for rank, runs in enumerate(_runs(tmp_path)):
        assert runs[-1]["start"] == 8
        assert runs[-1]["params"] == straight[rank]["params"]


def test_a_time_budget_stops_both_at_one_step(tmp_path: Path) -> None:
    """No signal: a 1 s budget, steps of 20 ms; each rank's clock runs out at its own step,
    and they stop together at an agreement."""
    idist.spawn("gloo", train, args=(str(tmp_path), 100_000), nproc_per_node=2, job_timeout=150,
                kwargs_dict={"time_budget": 1.0, "sleep": 0.02})  # fmt: skip
    stops = [runs[0]["stop"] for runs in _runs(tmp_path)]
    assert stops[0] == stops[1] and stops[0] % 5 == 0
    assert _complete(tmp_path) == [f"step-{stops[0]:09d}.pt"]


def test_fsdp2_stops_together_and_resumes_under_ddp(tmp_path: Path, straight: Any) -> None:
    """The agreed checkpoint of an FSDP2 job (sharded parameters, gathered by
    save_checkpoint) resumes under DDP and ends where the uninterrupted DDP run ends."""
    _spawn(tmp_path, 7, strategy="fsdp")
    assert [(runs[0]["stop"], runs[0]["sharded"]) for runs in _runs(tmp_path)] == [(10, True)] * 2
    assert _complete(tmp_path) == ["step-000000010.pt"]
    _spawn(tmp_path)
    for rank, runs in enumerate(_runs(tmp_path)):
        assert runs[-1]["start"] == 10
        want = straight[rank]["params"]
        assert runs[-1]["params"] == [pytest.approx(p, rel=1e-5, abs=1e-6) for p in want]


def test_agreements_too_far_apart_for_the_launcher_s_kill_are_said_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Steps of 20 ms, an agreement every 5 (0.1 s), and a launcher that kills 0.1 s after
    SIGTERM: rank 0 says so, once; with the default 30 s nobody does."""
    said = "the launcher kills 0.1 s after SIGTERM (kill_after)"
    _spawn(tmp_path, sleep=0.02, kill_after=0.1)
    err = capfd.readouterr().err
    assert err.count(said) == 1 and "rank 0: the ranks agree every" in err
    (tmp_path / "default").mkdir()
    _spawn(tmp_path / "default", sleep=0.02)
    assert "the ranks agree every" not in capfd.readouterr().err


def test_under_parallel(tmp_path: Path, straight: Any) -> None:
    """ignite's Parallel spawning the workers: the same agreement as spawn's."""
    with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
        parallel.run(train, str(tmp_path), TOTAL, 7)  # rank 1 signals itself after step 7
    assert [runs[0]["stop"] for runs in _runs(tmp_path)] == [10, 10]
    assert _complete(tmp_path) == ["step-000000010.pt"]
    _check_resumed(tmp_path, straight, 10)
