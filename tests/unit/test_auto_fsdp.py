"""auto_model(strategy="fsdp") and the checkpoint helpers without a distributed context.

The sharded runs are in tests/distributed/test_fsdp_gloo.py; here: the choice of submodules,
the errors, and the world of one (the model unwrapped, checkpoints in the same format).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge._sharding import SHARD_OPTIONS, chosen_submodules
from distbridge.checkpoint import full_state_dict


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.inner(x))


def _net() -> torch.nn.Sequential:
    return torch.nn.Sequential(Block(3), torch.nn.ReLU(), Block(3), torch.nn.Linear(3, 1))


def test_fsdp_without_a_context_is_the_model_on_the_device_unwrapped() -> None:
    model = _net()
    assert idist.auto_model(model, strategy="fsdp", reshard_after_forward=False) is model
    assert next(model.parameters()).device == idist.device()


def test_the_default_units_are_the_children_that_hold_parameters() -> None:
    assert chosen_submodules(_net(), None) == ["0", "2", "3"]


def test_a_class_picks_every_submodule_of_it_deepest_first() -> None:
    outer = torch.nn.Sequential(_net(), Block(3))
    assert chosen_submodules(outer, Block) == ["0.0", "0.2", "1"]
    assert chosen_submodules(outer, (Block, torch.nn.LayerNorm)) == [
        "0.0.norm", "0.2.norm", "0.0", "0.2", "1.norm", "1",
    ]  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_modules_given_are_sharded_children_before_parents(data: st.DataObject) -> None:
    outer = torch.nn.Sequential(_net(), Block(3))
    named = dict(outer.named_modules())
    names = data.draw(st.lists(st.sampled_from(sorted(n for n in named if n)), unique=True))
    chosen = chosen_submodules(outer, [named[n] for n in names])
    assert sorted(chosen) == sorted(names)
    for i, name in enumerate(chosen):  # no unit after one of its own submodules
        assert not any(later.startswith(name + ".") for later in chosen[i + 1 :])


def test_a_module_list_gives_its_items() -> None:
    blocks = torch.nn.ModuleList([Block(2), Block(2)])
    holder = torch.nn.Module()
    holder.blocks = blocks
    assert chosen_submodules(holder, blocks) == ["blocks.0", "blocks.1"]
    assert chosen_submodules(holder, blocks[1]) == ["blocks.1"]


def test_modules_outside_the_model_or_the_root_are_refused() -> None:
    model = _net()
    with pytest.raises(ValueError, match="not one of them"):
        idist.auto_model(model, strategy="fsdp", shard_modules=[torch.nn.Linear(1, 1)])
    with pytest.raises(ValueError, match="the model itself"):
        chosen_submodules(model, [model])


def test_unknown_strategy_and_misplaced_options_are_refused() -> None:
    with pytest.raises(ValueError, match=r"strategy='zero3'.*'ddp', 'fsdp'"):
        idist.auto_model(_net(), strategy="zero3")
    with pytest.raises(TypeError, match="shard_modules with strategy='ddp'"):
        idist.auto_model(_net(), shard_modules=Block)
    with pytest.raises(TypeError, match=r"\['find_unused_parameters'\].*fully_shard"):
        idist.auto_model(_net(), strategy="fsdp", find_unused_parameters=True)


def test_fsdp_options_are_fully_shards_keywords() -> None:
    assert {"mesh", "reshard_after_forward", "mp_policy", "offload_policy"} <= set(SHARD_OPTIONS)
    assert "module" not in SHARD_OPTIONS


def test_auto_optim_keeps_an_optimizer_of_an_unsharded_model() -> None:
    model = idist.auto_model(_net(), strategy="fsdp")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert idist.auto_optim(optimizer) is optimizer


def test_a_checkpoint_round_trips_in_a_world_of_one(tmp_path: Path) -> None:
    model = _net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    idist.save_checkpoint(tmp_path / "ckpt.pt", model, optimizer)
    saved = full_state_dict(model, optimizer)
    assert set(saved["optimizer"]["state"]) == {n for n, _ in model.named_parameters()}

    torch.manual_seed(1)
    again = _net()
    again_optimizer = torch.optim.Adam(again.parameters(), lr=0.1)
    idist.load_checkpoint(tmp_path / "ckpt.pt", again, again_optimizer)
    for name, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], value), name
    assert str(again_optimizer.state_dict()) == str(optimizer.state_dict())


def test_loading_an_optimizer_from_a_file_without_one_is_refused(tmp_path: Path) -> None:
    model = _net()
    idist.save_checkpoint(tmp_path / "model.pt", model)
    with pytest.raises(ValueError, match="holds no optimizer state"):
        idist.load_checkpoint(tmp_path / "model.pt", model, torch.optim.SGD(model.parameters()))
