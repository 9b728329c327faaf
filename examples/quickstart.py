"""Quick start: train a small model on synthetic data in two gloo processes.

Run it with:  python examples/quickstart.py  [--nproc 2] [--backend gloo] [--steps 30]

Each rank trains on its own shard of the data; gradients are averaged with
``idist.all_reduce`` after every step, so the weights stay identical. At the end
every rank's weights are gathered and compared.
"""

from __future__ import annotations

import argparse

import torch

import distbridge as idist


def train(local_rank: int, steps: int) -> float:
    rank, world = idist.get_rank(), idist.get_world_size()
    torch.manual_seed(0)  # same initial weights everywhere
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model.to(idist.device())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    data = torch.Generator().manual_seed(1234 + rank)  # a different shard per rank
    true_w = torch.arange(8, dtype=torch.float32) / 8
    loss = torch.tensor(0.0)
    for _ in range(steps):
        x = torch.randn(64, 8, generator=data)
        y = (x @ true_w).unsqueeze(1)
        loss = torch.nn.functional.mse_loss(model(x.to(idist.device())), y.to(idist.device()))
        optimizer.zero_grad()
        loss.backward()
        for p in model.parameters():
            assert p.grad is not None
            idist.all_reduce(p.grad, op="AVG")
        optimizer.step()

    mean_loss = idist.all_reduce(loss.item(), op="AVG")
    print(
        f"rank {rank}/{world}: local loss {loss.item():.4f}, mean loss {mean_loss:.4f}", flush=True
    )

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = idist.all_gather(flat.unsqueeze(0))
    identical = all(torch.equal(every[0], row) for row in every)
    if not identical:
        raise RuntimeError(f"rank {rank}: the weights differ across ranks")
    return mean_loss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    losses = idist.spawn(args.backend, train, args=(args.steps,), nproc_per_node=args.nproc)
    print(f"weights identical on all {args.nproc} ranks; mean loss per rank: {losses}")


if __name__ == "__main__":
    main()
