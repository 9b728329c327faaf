"""What the ranks run in the preemption tests: a small deterministic training under a StopGuard.

`train` is a spawn target; as a script (``python preemption_targets.py RUN_DIR TOTAL
[options]``) it initializes gloo from its launcher's environment (srun, torchrun) and trains.
Each rank appends one JSON line per run to ``RUN_DIR/rank<r>.jsonl``: the step it started
from, its loss after every step, the step it stopped at (None: it finished) and its final
parameters. The batches depend on (step, rank) only, so a resumed run sees what an
uninterrupted one would have.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch

import distbridge as idist


class Bomb:
    """A value whose pickling (inside torch.save, on rank 0) sends a signal or ends the process."""

    def __init__(self, action: str) -> None:
        self.action = action

    def __reduce__(self) -> tuple[Any, ...]:
        if self.action == "die":
            os._exit(3)
        os.kill(os.getpid(), signal.Signals[self.action])
        return (int, (0,))


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 4, generator=gen)
    return x, x.sum(1, keepdim=True) * 0.5


def train(
    local_rank: int,
    run_dir: str,
    total: int,
    kill_at: int | None = None,
    kill_rank: int = 1,
    signame: str = "SIGUSR2",
    check_every: int = 5,
    fault: str = "",
    time_budget: float | None = None,
    sleep: float = 0.0,
    save_every: int = 0,
    strategy: str = "ddp",
    kill_after: float = 30.0,
) -> dict[str, Any]:
    """Train to ``total`` steps (resuming from ``run_dir``); rank ``kill_rank`` sends itself
    ``signame`` after step ``kill_at`` (0: before the first step) in a fresh run only.

    ``fault``: ``twice`` (two signals in a row), ``write`` (the signal arrives during the
    periodic checkpoint's write at ``save_every``), ``die_writing`` (rank 0 dies inside that
    write), ``die_in_stop`` (rank ``kill_rank`` dies in the agreed checkpoint).
    ``strategy``: auto_model's (``ddp`` or ``fsdp``).
    """
    rank = idist.get_rank()
    torch.manual_seed(0)
    model = idist.auto_model(torch.nn.Linear(4, 1), strategy=strategy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = idist.resume(run_dir, model, optimizer)["step"]
    record: dict[str, Any] = {"rank": rank, "start": start, "losses": {}, "stop": None}
    mine = rank == kill_rank and start == 0 and kill_at is not None
    record["sigterm"] = [_owner(signal.SIGTERM)]  # whose handler: before, in, after the guard
    try:
        guard = idist.StopGuard(
            run_dir, check_every=check_every, time_budget=time_budget, kill_after=kill_after
        )
        with guard as stop:
            record["sigterm"].append(_owner(signal.SIGTERM))
            if mine and kill_at == 0:
                os.kill(os.getpid(), signal.Signals[signame])
            for step in range(start + 1, total + 1):
                x, y = _batch(step, rank)
                loss = torch.nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                record["losses"][step] = loss.item()
                if step == start + 1:  # for a test that signals the launcher once all train
                    (Path(run_dir) / f"training{rank}").touch()
                time.sleep(sleep)
                if mine and step == kill_at:
                    for _ in range(2 if fault == "twice" else 1):
                        os.kill(os.getpid(), signal.Signals[signame])
                if save_every and step % save_every == 0:
                    bomb = fault.removesuffix("_writing") if start == 0 else ""
                    action = {"write": signame, "die": "die"}.get(bomb)
                    extra = {"bomb": Bomb(action)} if action else {}
                    stop.checkpoint(step, model, optimizer, extra)
                if stop.should_stop(step):
                    record["stop"] = step
                    # written now: on SLURM rank 0's requeue ends every task, maybe before
                    # another rank's `finally` ran
                    _write(record, model, run_dir)
                    if fault == "die_in_stop" and rank == kill_rank and start == 0:
                        _die_in_state_dict(model)
                    stop.checkpoint_and_exit(step, model, optimizer)
        record["sigterm"].append(_owner(signal.SIGTERM))
    finally:
        if "params" not in record:
            _write(record, model, run_dir)
    return record


def _write(record: dict[str, Any], model: torch.nn.Module, run_dir: str) -> None:
    """Append ``record``, with the model's parameters, to this rank's JSON lines."""
    record["sharded"] = all(hasattr(p, "full_tensor") for p in model.parameters())
    full = [getattr(p, "full_tensor", p.detach)() for p in model.parameters()]  # FSDP2
    record["params"] = [p.detach().flatten().tolist() for p in full]
    with (Path(run_dir) / f"rank{record['rank']}.jsonl").open("a") as out:
        out.write(json.dumps(record) + "\n")


def _owner(signum: int) -> str:
    """The module of the handler of ``signum`` (or the disposition's name)."""
    handler = signal.getsignal(signum)
    return str(getattr(handler, "__module__", None) or handler)


def _die_in_state_dict(model: torch.nn.Module) -> None:
    """End this process when the checkpoint reads the model's state dict."""
    inner = model.module if hasattr(model, "module") else model
    inner.register_state_dict_pre_hook(lambda *args, **kwargs: os._exit(4))


def records(run_dir: Path, rank: int) -> list[dict[str, Any]]:
    """Rank ``rank``'s records, one per run, oldest first."""
    lines = (run_dir / f"rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("total", type=int)
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--signal", default="SIGUSR2")
    parser.add_argument("--check-every", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--backend", default="gloo")
    args = parser.parse_args()
    idist.initialize(args.backend)
    try:
        train(0, args.run_dir, args.total, args.kill_at, args.kill_rank, args.signal,
              args.check_every, sleep=args.sleep)  # fmt: skip
    finally:
        idist.finalize()


if __name__ == "__main__":
    main()
