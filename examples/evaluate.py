"""Sharded evaluation: every rank predicts its shard, gather_results puts the dataset back
together, and rank 0 checks the result against a single-process evaluation.

How to run it (CPU, gloo, 2 processes by default; a few seconds on 2 cores):

    python examples/evaluate.py                         # spawns 2 gloo workers itself
    python examples/evaluate.py --nproc 3               # any number of workers
    torchrun --standalone --nproc-per-node 2 examples/evaluate.py --launcher torchrun
    python examples/evaluate.py --checkpoint /tmp/distbridge-train_mlp.pt   # train_mlp's weights

auto_dataloader(shuffle=False) gives rank r the samples r, r + W, r + 2W, ... through a
``DistributedSampler(shuffle=False)``, which repeats the first samples so that every rank
gets as many (here 1001 samples on 2 ranks: 501 each, one duplicate).
``idist.gather_results(preds, total=len(dataset), dst=0)`` undoes the striding and drops
the duplicates, so rank 0 gets exactly one prediction per sample, in dataset order.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset
from torch.utils.data.distributed import DistributedSampler

import distbridge as idist

FEATURES, CLASSES, SAMPLES = 20, 4, 1001  # an odd size: the sampler pads the last shard


def make_dataset() -> TensorDataset:
    """Held-out samples labelled by train_mlp.py's teacher, the same in every process; the
    first tensor is each sample's index."""
    gen = torch.Generator().manual_seed(0)
    torch.randn(2048, FEATURES, generator=gen)  # train_mlp.py's training inputs: skipped
    teacher = torch.randn(FEATURES, CLASSES, generator=gen)
    x = torch.randn(SAMPLES, FEATURES, generator=gen)  # new inputs
    return TensorDataset(torch.arange(SAMPLES), x, (x @ teacher).argmax(dim=1))


def make_model(checkpoint: str | None) -> nn.Module:
    """The same weights in every process: train_mlp.py's checkpoint, or a seeded init."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    if checkpoint is not None:
        state = None
        if idist.is_main_process():  # one reader; the others get it over the wire
            state = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
        model.load_state_dict(idist.broadcast_object(state))
    return model.eval()


@torch.no_grad()
def evaluate(local_rank: int, batch_size: int, checkpoint: str | None) -> dict[str, Any]:
    rank, world = idist.get_rank(), idist.get_world_size()
    dataset = make_dataset()
    model = make_model(checkpoint).to(idist.device())

    # batch_size is global: each of the W ranks loads batch_size // W samples per step.
    loader = idist.auto_dataloader(dataset, batch_size=batch_size, shuffle=False)
    if world > 1 and not isinstance(loader.sampler, DistributedSampler):
        raise RuntimeError(f"expected a DistributedSampler, got {type(loader.sampler)}")

    # One entry per sample, in the order this rank saw them: (index, predicted class, label).
    mine: list[tuple[int, int, int]] = []
    for index, x, y in loader:
        predicted = model(x.to(idist.device())).argmax(dim=1).cpu()
        mine += zip(index.tolist(), predicted.tolist(), y.tolist(), strict=True)
    print(f"rank {rank}/{world}: {len(mine)} predictions", flush=True)

    results = idist.gather_results(mine, total=len(dataset), dst=0)  # [] except on rank 0
    if not idist.is_main_process():
        return {"rank": rank, "shard": len(mine)}

    # Rank 0: the gathered predictions must be exactly the single-process evaluation.
    indices, x_all, _ = dataset.tensors
    expected = model(x_all.to(idist.device())).argmax(dim=1).cpu().tolist()
    if [i for i, _, _ in results] != indices.tolist():
        raise RuntimeError("gather_results did not give back every sample once, in order")
    if [p for _, p, _ in results] != expected:
        raise RuntimeError("the sharded predictions differ from the single-process ones")
    accuracy = sum(p == y for _, p, y in results) / len(results)
    print(
        f"rank 0: {len(results)} predictions gathered from {world} rank(s) equal the "
        f"single-process evaluation; accuracy {accuracy:.3f}",
        flush=True,
    )
    return {"rank": rank, "shard": len(mine), "accuracy": accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--launcher",
        choices=["spawn", "torchrun", "serial"],
        default="spawn",
        help="spawn: start --nproc workers here; torchrun: it started us",
    )
    parser.add_argument("--backend", default="gloo", help="gloo (default) or nccl")
    parser.add_argument("--nproc", type=int, default=2, help="workers to spawn (--launcher spawn)")
    parser.add_argument("--batch-size", type=int, default=100, help="global batch size")
    parser.add_argument("--checkpoint", type=Path, default=None, help="train_mlp.py's checkpoint")
    args = parser.parse_args()

    checkpoint = None if args.checkpoint is None else str(args.checkpoint)
    if args.launcher == "spawn":
        parallel = idist.Parallel(backend=args.backend, nproc_per_node=args.nproc)
    elif args.launcher == "serial":
        parallel = idist.Parallel(backend=None)
    else:
        parallel = idist.Parallel(backend=args.backend)
    with parallel:
        results = parallel.run(evaluate, args.batch_size, checkpoint)
    if args.launcher == "spawn":
        print(
            f"shard sizes: {[r['shard'] for r in results]}; accuracy {results[0]['accuracy']:.3f}"
        )


if __name__ == "__main__":
    main()
