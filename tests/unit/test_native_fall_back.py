"""The native model's fall-back: where the backend refuses torch's own reduce_scatter or
all_to_all ("does not support", as MPI and some plug-in backends answer, before
communicating), the base class's emulation answers, and torch is not asked again; any other
error of torch's reaches the caller. On a real gloo world of one, torch's op replaced by one
that refuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist

import distbridge as idist
from distbridge.models.native import ops


def _refusing(message: str, asked: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> None:
        asked.append(message)
        raise RuntimeError(message)

    return refuse


def _reduce_scatter() -> None:
    x = torch.arange(4.0)
    assert torch.equal(idist.reduce_scatter(x), x)


def _all_to_all() -> None:
    got = idist.all_to_all([torch.arange(3.0)])
    assert len(got) == 1 and torch.equal(got[0], torch.arange(3.0))


def _all_to_all_same_shape() -> None:
    got = idist.all_to_all([torch.arange(3.0)], same_shape=True)
    assert len(got) == 1 and torch.equal(got[0], torch.arange(3.0))


CASES = [
    (ops, "reduce_scatter_single", _reduce_scatter),
    (dist, "all_to_all_single", _all_to_all),
    (dist, "all_to_all_single", _all_to_all_same_shape),
]


@pytest.mark.parametrize(("module", "name", "collective"), CASES)
def test_a_refused_op_is_emulated_from_then_on(
    gloo_world_of_one: None,
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    name: str,
    collective: Callable[[], None],
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(module, name, _refusing("ProcessGroupX does not support it", asked))
    collective()
    assert len(asked) == 1  # torch was asked, and refused
    collective()
    assert len(asked) == 1  # not asked again: the emulation answers


@pytest.mark.parametrize(("module", "name", "collective"), CASES)
def test_another_error_of_torch_reaches_the_caller(
    gloo_world_of_one: None,
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    name: str,
    collective: Callable[[], None],
) -> None:
    asked: list[str] = []
    # An error that names no lost peer and no timeout: it reaches the caller at once.
    monkeypatch.setattr(module, name, _refusing("Gloo op failed: invalid argument", asked))
    for _ in range(2):  # not taken for a refusal: torch is asked each time
        with pytest.raises(RuntimeError, match="Gloo op failed: invalid argument"):
            collective()
    assert len(asked) == 2
