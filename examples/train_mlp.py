"""Train a small MLP on synthetic data with auto_dataloader / auto_model / auto_optim,
checkpoint on rank 0 and resume from the checkpoint.

How to run it (CPU, gloo, 2 processes by default; well under a minute on 2 cores):

    python examples/train_mlp.py                        # spawns 2 gloo workers itself
    python examples/train_mlp.py --resume --epochs 5    # continue from the checkpoint
    torchrun --standalone --nproc-per-node 2 examples/train_mlp.py --launcher torchrun
    horovodrun -np 2 python examples/train_mlp.py --launcher horovodrun   # needs Horovod
    python examples/train_mlp.py --launcher serial      # one process, no distributed context
    python examples/train_mlp.py --epochs 1 --telemetry # and rank 0's table of collectives

The same ``training`` function runs in every case: ``idist.Parallel`` spawns the workers
(``--launcher spawn``), initializes the context a launcher prepared (torchrun: ``gloo`` or
``--backend nccl``; horovodrun: ``horovod``), or runs it in this process (``serial``).

``--batch-size`` is the GLOBAL batch size: auto_dataloader gives each of the W processes
``batch_size // W`` samples per step. A progress bar (tqdm, when installed) or one line
per epoch is shown by rank 0 only. Rank 0 writes ``--checkpoint`` after every epoch;
``--resume`` reads it on rank 0, sends it to the other ranks with ``broadcast_object`` (no
shared file system needed) and continues with the epoch after the saved one.
``--telemetry`` records every collective of the training on each rank (the facade's and
DDP's gradient all-reduces, `distbridge.testing.telemetry`) and prints rank 0's table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset
from torch.utils.data.distributed import DistributedSampler

import distbridge as idist
from distbridge.testing import telemetry

try:
    from tqdm import tqdm
except ImportError:  # plain prints instead of a progress bar
    tqdm = None

DEFAULT_CHECKPOINT = Path(tempfile.gettempdir()) / "distbridge-train_mlp.pt"
FEATURES, CLASSES, SAMPLES = 20, 4, 2048


def make_dataset() -> TensorDataset:
    """The same synthetic classification data in every process: labels from a fixed teacher."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=gen)
    teacher = torch.randn(FEATURES, CLASSES, generator=gen)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # DDP and Horovod start every rank from rank 0's weights anyway
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside a DistributedDataParallel (or DataParallel) wrapper."""
    return model.module if idist.is_module_wrapper(model) else model  # type: ignore[return-value]


@idist.one_rank_only(with_barrier=True)  # rank 0 writes; everyone waits until it is written
def save_checkpoint(path: Path, model: nn.Module, optimizer: Any, epoch: int, loss: float) -> None:
    state = {
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
        "loss": loss,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # never a half-written checkpoint


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Rank 0 reads the file; every rank gets its contents (the others need no access to it)."""
    state = None
    if idist.is_main_process():
        if not path.exists():
            raise FileNotFoundError(f"--resume: no checkpoint at {path}; train without --resume.")
        state = torch.load(path, map_location="cpu", weights_only=True)
    return idist.broadcast_object(state, src=0)


def training(local_rank: int, config: dict[str, Any]) -> dict[str, Any]:
    if not config.get("telemetry"):
        return train(config, None)
    with telemetry.record(keep_calls=False) as recording:
        result = train(config, recording)
    if idist.is_main_process():
        print(f"collectives of rank 0:\n{recording.summary()}", flush=True)
    return result


def train(config: dict[str, Any], recording: telemetry.Recording | None) -> dict[str, Any]:
    """The training loop of every rank; ``recording`` also watches DDP's gradients."""
    rank, world = idist.get_rank(), idist.get_world_size()
    main = idist.is_main_process()
    if main:
        print(
            f"{idist.model_name()} backend={idist.backend()} world={world} "
            f"device={idist.device()}; global batch {config['batch_size']}",
            flush=True,
        )

    loader = idist.auto_dataloader(make_dataset(), batch_size=config["batch_size"], shuffle=True)
    model = idist.auto_model(make_model())
    if recording is not None and isinstance(model, nn.parallel.DistributedDataParallel):
        recording.watch_ddp(model)
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    criterion = nn.CrossEntropyLoss()

    start = 1
    checkpoint = Path(config["checkpoint"])
    if config["resume"]:
        state = load_checkpoint(checkpoint)
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        if main:
            print(f"resumed from epoch {state['epoch']} (loss {state['loss']:.4f})", flush=True)

    device = idist.device()
    loss_value = float("nan")
    for epoch in range(start, config["epochs"] + 1):
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, the same after resuming
        model.train()
        started = time.perf_counter()
        batches = loader
        if main and tqdm is not None:
            batches = tqdm(loader, desc=f"epoch {epoch} (rank {rank})", leave=False)
        totals = {"loss": 0.0, "correct": 0, "samples": 0}
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = criterion(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            totals["loss"] += loss.item() * len(y)
            totals["correct"] += int((logits.argmax(dim=1) == y).sum())
            totals["samples"] += len(y)
        totals = idist.all_reduce_dict(totals)  # summed over ranks, in one collective
        loss_value = totals["loss"] / totals["samples"]
        accuracy = totals["correct"] / totals["samples"]
        if main:
            print(
                f"epoch {epoch}/{config['epochs']}: loss {loss_value:.4f}, "
                f"accuracy {accuracy:.3f}, {totals['samples']} samples on {world} rank(s), "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )
        save_checkpoint(checkpoint, model, optimizer, epoch, loss_value)

    if main and start <= config["epochs"]:
        print(f"checkpoint: {checkpoint}", flush=True)
    return {"rank": rank, "loss": loss_value}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--launcher",
        choices=["spawn", "torchrun", "horovodrun", "serial"],
        default="spawn",
        help="spawn: start --nproc workers here; torchrun / horovodrun: they started us",
    )
    parser.add_argument(
        "--backend", default=None, help="gloo (default) or nccl; horovod under horovodrun"
    )
    parser.add_argument("--nproc", type=int, default=2, help="workers to spawn (--launcher spawn)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument(
        "--telemetry", action="store_true", help="print rank 0's table of collectives"
    )
    args = parser.parse_args()

    config = {
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "checkpoint": str(args.checkpoint),
        "resume": args.resume,
        "telemetry": args.telemetry,
    }
    backend = args.backend or ("horovod" if args.launcher == "horovodrun" else "gloo")
    if args.launcher == "spawn":
        parallel = idist.Parallel(backend=backend, nproc_per_node=args.nproc)
    elif args.launcher == "serial":
        parallel = idist.Parallel(backend=None)
    else:
        parallel = idist.Parallel(backend=backend)  # the launcher's environment says who we are
    with parallel:
        results = parallel.run(training, config)
    if args.launcher == "spawn":
        print(f"final loss per rank: {[round(r['loss'], 4) for r in results]}")


if __name__ == "__main__":
    main()
