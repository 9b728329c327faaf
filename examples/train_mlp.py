"""Train a small MLP on synthetic data with auto_dataloader / auto_model / auto_optim,
checkpoint on rank 0 and resume from the checkpoint.

How to run it (CPU, gloo, 2 processes by default; well under a minute on 2 cores):

    python examples/train_mlp.py                        # spawns 2 gloo workers itself
    python examples/train_mlp.py --resume --epochs 5    # continue from the checkpoint
    torchrun --standalone --nproc-per-node 2 examples/train_mlp.py --launcher torchrun
    horovodrun -np 2 python examples/train_mlp.py --launcher horovodrun   # needs Horovod
    python examples/train_mlp.py --launcher serial      # one process, no distributed context
    python examples/train_mlp.py --epochs 1 --telemetry # and rank 0's table of collectives
    python examples/train_mlp.py --strategy fsdp        # FSDP2: parameters sharded over ranks
    python examples/train_mlp.py --strategy fsdp --compile   # and the model's forward compiled

The same ``training`` function runs in every case: ``idist.Parallel`` spawns the workers
(``--launcher spawn``), initializes the context a launcher prepared (torchrun: ``gloo`` or
``--backend nccl``; horovodrun: ``horovod``), or runs it in this process (``serial``).

``--batch-size`` is the GLOBAL batch size: auto_dataloader gives each of the W processes
``batch_size // W`` samples per step. A progress bar (tqdm, when installed) or one line
per epoch is shown by rank 0 only. ``idist.save_checkpoint`` writes ``--checkpoint`` from
rank 0 after every epoch (full state dicts, gathered from the shards under FSDP2);
``--resume`` reads it with ``idist.load_checkpoint`` on rank 0, which sends it to the other
ranks (no shared file system needed), and continues with the epoch after the saved one. A
checkpoint of either strategy resumes under the other.
``--strategy fsdp`` shards the model with FSDP2 (``auto_model(model, strategy="fsdp")``);
``--compile`` runs the model through ``torch.compile`` (a C++ compiler is needed on the CPU).
``--telemetry`` records every collective of the training on each rank (the facade's and
DDP's gradient all-reduces, `distbridge.testing.telemetry`) and prints rank 0's table.
"""

from __future__ import annotations

import argparse
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
    net = idist.auto_model(make_model(), strategy=config["strategy"])
    if recording is not None and isinstance(net, nn.parallel.DistributedDataParallel):
        recording.watch_ddp(net)
    optimizer = idist.auto_optim(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
    model = torch.compile(net) if config["compile"] else net  # checkpoints hold net's names
    criterion = nn.CrossEntropyLoss()

    start = 1
    checkpoint = Path(config["checkpoint"])
    if config["resume"]:
        saved = idist.load_checkpoint(checkpoint, net, optimizer)  # rank 0 reads, sends
        start = saved["epoch"] + 1
        if main:
            print(f"resumed from epoch {saved['epoch']} (loss {saved['loss']:.4f})", flush=True)

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
        idist.save_checkpoint(
            checkpoint, net, optimizer, extra={"epoch": epoch, "loss": loss_value}
        )

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
    parser.add_argument(
        "--strategy", choices=["ddp", "fsdp"], default="ddp", help="auto_model's strategy"
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = parser.parse_args()

    config = {
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "checkpoint": str(args.checkpoint),
        "resume": args.resume,
        "telemetry": args.telemetry,
        "strategy": args.strategy,
        "compile": args.compile,
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
