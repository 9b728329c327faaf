"""Every script in examples/ runs as a user would run it: a subprocess, 2 gloo processes."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")


def run(*command: str | Path, timeout: float = 120, stderr: bool = False) -> str:
    """Run ``command`` from the repository root; its stdout (then its stderr, with ``stderr``),
    or a failure showing its output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [str(part) for part in command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
        )
    return proc.stdout + proc.stderr if stderr else proc.stdout


def epoch_losses(stdout: str) -> dict[int, float]:
    """``{epoch: loss}`` from train_mlp.py's per-epoch lines."""
    return {
        int(e): float(loss) for e, loss in re.findall(r"epoch (\d+)/\d+: loss ([\d.]+)", stdout)
    }


def test_quickstart() -> None:
    out = run(sys.executable, EXAMPLES / "quickstart.py", "--nproc", "2", "--steps", "10")
    assert "weights identical on all 2 ranks" in out


def test_train_mlp_checkpoint_resume_and_torchrun(tmp_path: Path) -> None:
    script = EXAMPLES / "train_mlp.py"
    checkpoint = tmp_path / "mlp.pt"
    first = run(sys.executable, script, "--epochs", "2", "--checkpoint", checkpoint, stderr=True)
    assert "native-dist backend=gloo world=2" in first
    if importlib.util.find_spec("tqdm") is not None:  # the [test] extra installs it
        assert "epoch 1 (rank 0)" in first  # tqdm's bar, on stderr
        assert "(rank 1)" not in first  # rank 0 only
    assert sorted(epoch_losses(first)) == [1, 2]
    assert checkpoint.exists()

    resumed = run(sys.executable, script, "--epochs", "3", "--checkpoint", checkpoint, "--resume")
    assert "resumed from epoch 2" in resumed
    assert sorted(epoch_losses(resumed)) == [3]  # only the epoch after the checkpoint

    # The same three epochs in one go, started by torchrun: the resumed run continued exactly.
    straight = run(
        *TORCHRUN, script, "--launcher", "torchrun", "--checkpoint", tmp_path / "straight.pt"
    )
    assert "native-dist backend=gloo world=2" in straight
    losses = epoch_losses(straight)
    assert sorted(losses) == [1, 2, 3]
    assert losses[3] == pytest.approx(epoch_losses(resumed)[3], abs=2e-3)
    assert losses[3] < losses[1]  # it learns
    assert losses[3] < 0.3

    evaluated = run(sys.executable, EXAMPLES / "evaluate.py", "--checkpoint", checkpoint)
    found = re.search(r"equal the single-process evaluation; accuracy ([\d.]+)", evaluated)
    assert found is not None, evaluated
    assert float(found.group(1)) > 0.85  # the trained weights, not a fresh init (about 0.25)


@pytest.mark.timeout(600)
def test_train_mlp_fsdp_compiled_resumes_under_ddp(tmp_path: Path) -> None:
    """FSDP2 and a compiled model on 2 gloo ranks: its first epoch's loss is DDP's (the same
    data, seed and averaged gradients), and its checkpoint resumes under DDP."""
    script = EXAMPLES / "train_mlp.py"
    checkpoint = tmp_path / "fsdp.pt"
    fsdp = run(
        sys.executable, script, "--strategy", "fsdp", "--compile", "--epochs", "1",
        "--checkpoint", checkpoint, timeout=400,
    )  # fmt: skip
    assert "native-dist backend=gloo world=2" in fsdp
    ddp = run(sys.executable, script, "--epochs", "1", "--checkpoint", tmp_path / "ddp.pt")
    assert epoch_losses(fsdp)[1] == pytest.approx(epoch_losses(ddp)[1], abs=2e-3)

    resumed = run(sys.executable, script, "--epochs", "2", "--checkpoint", checkpoint, "--resume")
    assert "resumed from epoch 1" in resumed
    assert epoch_losses(resumed)[2] < epoch_losses(fsdp)[1]  # it goes on learning


def test_evaluate_spawn() -> None:
    out = run(sys.executable, EXAMPLES / "evaluate.py")
    assert "1001 predictions gathered from 2 rank(s) equal the single-process evaluation" in out
    assert "shard sizes: [501, 501]" in out


def test_evaluate_under_torchrun() -> None:
    out = run(*TORCHRUN, EXAMPLES / "evaluate.py", "--launcher", "torchrun")
    assert "1001 predictions gathered from 2 rank(s) equal the single-process evaluation" in out


@pytest.mark.parametrize("script", ["quickstart.py", "train_mlp.py", "evaluate.py"])
def test_help_shows_the_whole_description(script: str) -> None:
    path = EXAMPLES / script
    docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    assert docstring is not None
    out = run(sys.executable, path, "--help", timeout=60)
    first_paragraph = docstring.split("\n\n")[0]
    assert first_paragraph in out  # as written, not cut after its first line
    assert docstring.rstrip().splitlines()[-1] in out
