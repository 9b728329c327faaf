"""Train a small model that survives a preemption or a time limit: a signal that reaches any
rank stops every rank at the same step, one checkpoint is written, and the next run of the
same command resumes from it (on SLURM the job requeues itself).

How to run it (CPU, gloo, 2 processes by default; a few seconds):

    python examples/train_preemptible.py --preempt-at 25   # rank 1 gets SIGUSR2 after step 25
    python examples/train_preemptible.py                   # resumes at step 30 and finishes
    python examples/train_preemptible.py --time-budget 60  # stops by itself after 60 s
    torchrun --standalone --nproc-per-node 2 --signals-to-handle SIGTERM,SIGUSR2 \\
        examples/train_preemptible.py --launcher torchrun
    sbatch -N2 --ntasks-per-node 1 --requeue --signal=USR2@90 \\
        --wrap "srun python examples/train_preemptible.py --launcher srun"

Every rank wraps its loop in ``idist.StopGuard``: SIGUSR2 or SIGTERM only sets a flag, and
every ``--check-every`` steps the ranks agree on it (one all_reduce). ``idist.resume`` loads
the newest complete checkpoint of ``--run-dir`` (none: a fresh start). See docs/preemption.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

import distbridge as idist

DEFAULT_RUN_DIR = Path(tempfile.gettempdir()) / "distbridge-train_preemptible"


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each rank's batch of ``step``: the same after a resume as in an uninterrupted run."""
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1000 * step + rank))
    return x, x[:, :2].sum(1, keepdim=True)


def training(local_rank: int, config: dict[str, Any]) -> None:
    rank = idist.get_rank()
    torch.manual_seed(0)
    model = idist.auto_model(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    start = idist.resume(config["run_dir"], model, optimizer)["step"]
    guard = idist.StopGuard(
        config["run_dir"], check_every=config["check_every"], time_budget=config["time_budget"]
    )
    loss = torch.tensor(float("nan"))
    with guard as stop:
        for step in range(start + 1, config["steps"] + 1):
            x, y = batch(step, rank)
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step == config["preempt_at"] and rank == min(1, idist.get_world_size() - 1):
                os.kill(os.getpid(), signal.SIGUSR2)  # as `scancel --signal=USR2` would
            if step % 10 == 0 and rank == 0:
                print(f"step {step}: loss {loss.item():.5f}", flush=True)
            if stop.should_stop(step):
                stop.checkpoint_and_exit(step, model, optimizer)  # every rank; ends the process
    loss = idist.all_reduce(loss.detach()) / idist.get_world_size()
    if rank == 0:
        print(f"finished {config['steps']} steps (from step {start}); loss {loss.item():.5f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launcher", choices=["spawn", "torchrun", "srun", "serial"],
                        default="spawn", help="spawn: start --nproc workers here")  # fmt: skip
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    parser.add_argument("--check-every", type=int, default=10)
    parser.add_argument("--time-budget", type=float, default=None, help="seconds")
    parser.add_argument("--preempt-at", type=int, default=None, help="signal rank 1 there")
    args = parser.parse_args()
    config = {
        "steps": args.steps,
        "run_dir": str(args.run_dir),
        "check_every": args.check_every,
        "time_budget": args.time_budget,
        "preempt_at": args.preempt_at,
    }
    if args.launcher == "spawn":
        parallel = idist.Parallel(backend="gloo", nproc_per_node=args.nproc)
    else:
        parallel = idist.Parallel(backend=None if args.launcher == "serial" else "gloo")
    with parallel:
        parallel.run(training, config)


if __name__ == "__main__":
    main()
