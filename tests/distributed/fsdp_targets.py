"""Per-rank functions of the FSDP2 tests (tests/distributed/test_fsdp_gloo.py), and the
single-process reference they are compared with."""

from __future__ import annotations

from dataclasses import dataclass

import torch

import distbridge as idist
from distbridge.checkpoint import full_state_dict, save_checkpoint

__all__ = ["Training", "reference", "train_sharded"]


@dataclass(frozen=True)
class Training:
    """One generated training run: an MLP, its optimizer and the whole batch of every step."""

    widths: tuple[int, ...]  # in, hidden..., out
    batch: int  # samples per step in all (divides by the world size)
    optimizer: str  # "SGD" or "Adam"
    lr: float
    steps: int
    seed: int

    def model(self) -> torch.nn.Sequential:
        torch.manual_seed(self.seed)
        layers: list[torch.nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(self.widths, self.widths[1:], strict=False)):
            layers += ([torch.nn.Tanh()] if i else []) + [torch.nn.Linear(n_in, n_out)]
        return torch.nn.Sequential(*layers)

    def data(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(self.seed + 1)
        return [
            (torch.randn(self.batch, self.widths[0], generator=g),
             torch.randn(self.batch, self.widths[-1], generator=g))
            for _ in range(self.steps)
        ]  # fmt: skip

    def optimizer_for(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        kind = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam}[self.optimizer]
        return kind(model.parameters(), lr=self.lr)


def _train(model: torch.nn.Module, run: Training, share: tuple[int, int]) -> torch.optim.Optimizer:
    """``run.steps`` steps of mean squared error on this rank's share of each batch."""
    rank, world = share
    optimizer = idist.auto_optim(run.optimizer_for(model))
    for x, y in run.data():
        optimizer.zero_grad()
        x, y = x.chunk(world)[rank], y.chunk(world)[rank]
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return optimizer


def reference(run: Training) -> dict[str, torch.Tensor]:
    """The plain model after the same steps on the whole batch, in this process."""
    model = run.model()
    _train(model, run, (0, 1))
    return model.state_dict()


def train_sharded(_local_rank: int, run: Training, path: str) -> dict[str, object]:
    """FSDP2 through auto_model on this rank's share; rank 0 returns the full parameters
    (and checks they are DTensors), the checkpoint is written to ``path``."""
    model = idist.auto_model(run.model(), strategy="fsdp")
    sharded = all(type(p).__name__ == "DTensor" for p in model.parameters())
    optimizer = _train(model, run, (idist.get_rank(), idist.get_world_size()))
    state = full_state_dict(model)["model"]
    save_checkpoint(path, model, optimizer)
    return {"sharded": sharded, "state": state, "type": type(model).__name__}


def stale_optimizer(_local_rank: int) -> dict[str, object]:
    """An optimizer built before auto_model(strategy="fsdp") is refused; one built after is
    returned as is. Also: the units fully_shard made, and the model's class."""
    from torch.distributed.fsdp import FSDPModule

    model = Training(widths=(3, 4, 2), batch=2, optimizer="SGD", lr=0.1, steps=1, seed=0).model()
    early = torch.optim.SGD(model.parameters(), lr=0.1)
    model = idist.auto_model(model, strategy="fsdp")
    try:
        idist.auto_optim(early)
        refused = ""
    except ValueError as err:
        refused = str(err)
    late = torch.optim.SGD(model.parameters(), lr=0.1)
    return {
        "refused": refused,
        "late_kept": idist.auto_optim(late) is late,
        "units": [name for name, m in model.named_modules() if isinstance(m, FSDPModule)],
        "world": idist.get_world_size(),
    }
