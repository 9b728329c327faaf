"""FSDP2 for ``auto_model(model, strategy="fsdp")``: which submodules to shard, and the call.

``torch.distributed.fsdp.fully_shard`` is applied to the chosen submodules first (deepest
first), then to the root, as torch's FSDP2 documentation advises: each submodule becomes one
unit whose parameters are gathered for its forward and backward and freed after, and the root
holds what is left.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

import torch

__all__ = [
    "SHARD_OPTIONS",
    "ShardModules",
    "check_shard_options",
    "fully_shard_model",
    "was_replaced",
]

#: What ``shard_modules`` accepts: None (the root's children that hold parameters), a module
#: class or a tuple of classes (every submodule of that class, e.g. a transformer block), or
#: the submodules themselves.
ShardModules = type[torch.nn.Module] | tuple[type[torch.nn.Module], ...] | Iterable[torch.nn.Module]

# Parameters fully_shard replaced with sharded ones: an optimizer built on them before
# auto_model would step tensors the model no longer uses (auto_optim refuses it).
# Keyed by id (a tensor's == is elementwise, so no WeakSet); an entry leaves with its tensor.
_REPLACED: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()


#: fully_shard's keyword arguments in this torch (mesh, reshard_after_forward, mp_policy, ...).
SHARD_OPTIONS: tuple[str, ...] = ()
with suppress(ImportError):  # a torch without FSDP2 (before 2.6) has none
    from torch.distributed.fsdp import fully_shard

    SHARD_OPTIONS = tuple(n for n in inspect.signature(fully_shard).parameters if n != "module")


def check_shard_options(kwargs: dict[str, Any]) -> None:
    """TypeError naming any keyword argument that ``fully_shard`` does not take."""
    unknown = sorted(set(kwargs) - set(SHARD_OPTIONS))
    if unknown:
        raise TypeError(
            f"auto_model(strategy='fsdp') got keyword arguments {unknown} that "
            f"torch.distributed.fsdp.fully_shard does not take; it takes "
            f"{', '.join(SHARD_OPTIONS) or 'nothing in this torch (no FSDP2: torch >= 2.6)'}."
        )


def chosen_submodules(model: torch.nn.Module, shard_modules: ShardModules | None) -> list[str]:
    """The qualified names of the submodules to shard on their own, deepest first.

    Raises:
        TypeError: ``shard_modules`` is not a class, a tuple of classes or modules.
        ValueError: a module given is the root or not a submodule of ``model``.
    """
    names = {id(m): name for name, m in model.named_modules() if name}
    if shard_modules is None:
        chosen = [n for n, child in model.named_children() if any(True for _ in child.parameters())]
    elif isinstance(shard_modules, type) or (
        isinstance(shard_modules, tuple) and all(isinstance(c, type) for c in shard_modules)
    ):
        chosen = [
            name for name, m in model.named_modules() if name and isinstance(m, shard_modules)
        ]
    else:
        one = isinstance(shard_modules, torch.nn.Module)
        one = one and not isinstance(shard_modules, torch.nn.ModuleList)  # a list: its items
        given = [shard_modules] if one else list(shard_modules)
        bad = [m for m in given if not isinstance(m, torch.nn.Module) or id(m) not in names]
        if bad:
            raise ValueError(
                f"shard_modules must hold submodules of the model, got {bad[0]!r} which is "
                f"{'the model itself' if bad[0] is model else 'not one of them'}; pass the "
                "submodules to shard on their own (the root is always sharded last)."
            )
        chosen = [names[id(m)] for m in given]
    return sorted(dict.fromkeys(chosen), key=lambda name: -name.count("."))


def fully_shard_model(
    model: torch.nn.Module, chosen: list[str], kwargs: dict[str, Any]
) -> torch.nn.Module:
    """``fully_shard`` on the submodules named ``chosen`` (`chosen_submodules`' names,
    deepest first), then on ``model``; returns ``model`` (its class is now an FSDP subclass
    of the original). ``kwargs`` passed `check_shard_options`."""
    from torch.distributed.fsdp import fully_shard

    before = list(model.parameters())
    for name in chosen:
        fully_shard(model.get_submodule(name), **kwargs)
    fully_shard(model, **kwargs)
    after = {id(p) for p in model.parameters()}
    for p in before:
        if id(p) not in after:
            _REPLACED[id(p)] = p
    return model


def was_replaced(parameter: torch.Tensor) -> bool:
    """Whether ``auto_model(strategy="fsdp")`` replaced this parameter with a sharded one."""
    return _REPLACED.get(id(parameter)) is parameter
