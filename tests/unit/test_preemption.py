"""StopGuard and resume in one process (no distributed context): real signals, real files."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

import distbridge as idist
from distbridge.environments.slurm import requeue_job_id


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(step))
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()


def _train(run_dir: Path, total: int, signal_at: int | None = None) -> tuple[torch.nn.Module, int]:
    """Train to ``total`` under a guard; SIGUSR2 to this process after ``signal_at``.
    Returns the model and the step it stopped at (``total`` when it finished)."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    start = idist.resume(run_dir, model, optimizer)["step"]
    with idist.StopGuard(run_dir, check_every=100) as stop:
        for step in range(start + 1, total + 1):
            _step(model, optimizer, step)
            if step == signal_at:
                os.kill(os.getpid(), signal.SIGUSR2)
            if stop.should_stop(step):
                with pytest.raises(SystemExit) as exited:
                    stop.checkpoint_and_exit(step, model, optimizer, {"note": "hi"})
                assert exited.value.code == 0
                return model, step
    return model, total


def test_one_process_stops_at_once_and_resumes_exactly(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGUSR2)
    _, stopped = _train(tmp_path, 12, signal_at=4)
    assert stopped == 4  # serially: the step of the signal, whatever check_every says
    assert signal.getsignal(signal.SIGUSR2) is before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000004.pt"]

    resumed, _ = _train(tmp_path, 12)
    straight, _ = _train(tmp_path / "straight", 12)
    assert torch.equal(resumed.weight, straight.weight)
    assert torch.equal(resumed.bias, straight.bias)


def test_resume_without_checkpoint_is_a_fresh_start(tmp_path: Path) -> None:
    (tmp_path / "step-000000009.pt.incomplete").write_bytes(b"half")
    assert idist.resume(tmp_path / "missing", _model()) == {"step": 0}
    assert idist.resume(tmp_path, _model()) == {"step": 0}


def test_resume_returns_extra_and_restores_rng(tmp_path: Path) -> None:
    model = _model()
    with idist.StopGuard(tmp_path) as stop:
        torch.manual_seed(7)
        stop.checkpoint(3, model, extra={"epoch": 2})
        expected = torch.rand(3)
    torch.manual_seed(99)
    assert idist.resume(tmp_path, model) == {"epoch": 2, "step": 3}
    assert torch.equal(torch.rand(3), expected)


def test_keeps_the_newest_k_and_drops_incomplete_files(tmp_path: Path) -> None:
    model = _model()
    (tmp_path / "step-000000001.pt.incomplete.partial").write_bytes(b"half")
    with idist.StopGuard(tmp_path, keep=2) as stop:
        for step in (10, 20, 30):
            stop.checkpoint(step, model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000020.pt", "step-000000030.pt"]
    assert idist.resume(tmp_path, model)["step"] == 30


def test_steps_past_nine_digits_stay_the_newest(tmp_path: Path) -> None:
    """Before: the names were sorted as text, so step 10**9 ('step-1000000000.pt') came
    before step 999999999: keep=1 deleted the checkpoint just written, and resume took the old."""
    model = _model()
    with idist.StopGuard(tmp_path, keep=1) as stop:
        for step in (999_999_999, 1_000_000_000):
            stop.checkpoint(step, model)
    assert [p.name for p in tmp_path.iterdir()] == ["step-1000000000.pt"]
    assert idist.resume(tmp_path, model)["step"] == 1_000_000_000


def test_the_previous_handler_is_chained_and_restored(tmp_path: Path) -> None:
    seen: list[int] = []

    def previous(signum: int, frame: object) -> None:
        seen.append(signum)

    old = signal.signal(signal.SIGUSR2, previous)
    try:
        with idist.StopGuard(tmp_path) as stop:
            os.kill(os.getpid(), signal.SIGUSR2)
            os.kill(os.getpid(), signal.SIGUSR2)  # two in a row: one stop
            assert stop.should_stop(1) and stop.should_stop(2)
            assert stop.stop_step == 1
        assert seen == [signal.SIGUSR2, signal.SIGUSR2]
        assert signal.getsignal(signal.SIGUSR2) is previous
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_a_time_budget_stops_without_a_signal(tmp_path: Path) -> None:
    with idist.StopGuard(tmp_path, time_budget=1e-9, signals=()) as stop:
        assert stop.should_stop(1)


def test_no_request_no_stop(tmp_path: Path) -> None:
    with idist.StopGuard(tmp_path, time_budget=3600) as stop:
        assert not any(stop.should_stop(step) for step in range(1, 50))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"check_every": 0}, "check_every=0"),
        ({"keep": 0}, "keep=0"),
        ({"time_budget": -1}, "time_budget=-1"),
        ({"signals": ("SIGNOPE",)}, "'SIGNOPE'"),
        # before: TypeError from '>' or '/' without the value (kill_after: at the first check)
        ({"time_budget": "3600"}, r"time_budget='3600'\): pass seconds > 0 or None"),
        ({"kill_after": "30"}, r"kill_after='30'\): pass seconds > 0"),
        ({"kill_after": 0}, r"kill_after=0\): pass seconds > 0"),
        ({"max_timeout_requeues": -1}, r"max_timeout_requeues=-1\): pass an int >= 0"),
        ({"keep": True}, r"keep=True\): pass an int >= 1"),
    ],
)
def test_bad_arguments_name_the_value(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        idist.StopGuard(tmp_path, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"signals": (signal.SIGTERM,)},
            r"names signals by str, e.g. 'SIGUSR2', got <Signals.SIGTERM: 15>",
        ),
        ({"signals": "SIGTERM"}, r"StopGuard\(signals='SIGTERM'\): pass a list of signal names"),
        ({"timeout_signals": "SIGUSR2"}, r"StopGuard\(timeout_signals='SIGUSR2'\): pass a list"),
    ],
)
def test_signals_of_another_type_name_the_value(tmp_path: Path, kwargs: dict, message: str) -> None:
    """Before: an enum member raised AttributeError ('startswith'), and one str was taken
    letter by letter ("unknown signal 'S'")."""
    with pytest.raises(TypeError, match=message):
        idist.StopGuard(tmp_path, **kwargs)


def test_a_malformed_restart_count_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "two")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    with idist.StopGuard(tmp_path) as stop:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop.should_stop(1)
        with pytest.raises(ValueError, match=r"SLURM_RESTART_COUNT='two' is not an integer"):
            stop.checkpoint_and_exit(1, _model())


def test_requeue_job_id_is_array_aware() -> None:
    assert requeue_job_id({}) is None
    assert requeue_job_id({"SLURM_JOB_ID": "42"}) == "42"
    both = {"SLURM_JOB_ID": "45", "SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "3"}
    assert requeue_job_id(both) == "42_3"


def test_outside_slurm_it_says_how_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    with idist.StopGuard(tmp_path) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.should_stop(5)
        with pytest.raises(SystemExit):
            stop.checkpoint_and_exit(5, _model())
    err = capsys.readouterr().err
    assert "SIGTERM arrived" in err
    assert "every rank stops after step 5 (a preemption)" in err
    assert "run the same command to resume" in err


@pytest.mark.parametrize(
    ("signum", "restarts", "said"),
    [
        (signal.SIGUSR2, "3", "not requeued: job 4242 was restarted 3 times already"),
        (signal.SIGTERM, "3", "scontrol is not on PATH; requeue job 4242 by hand"),
    ],
)
def test_timeouts_requeue_a_bounded_number_of_times(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    signum: int,
    restarts: str,
    said: str,
) -> None:
    """A SLURM job (its variables; no scontrol on PATH) restarted 3 times: a time limit is not
    requeued again, a preemption is (here: tried, and said that it cannot be)."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", restarts)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    with idist.StopGuard(tmp_path, max_timeout_requeues=3) as stop:
        os.kill(os.getpid(), signum)
        assert stop.should_stop(1)
        with pytest.raises(SystemExit):
            stop.checkpoint_and_exit(1, _model())
    assert said in capsys.readouterr().err
