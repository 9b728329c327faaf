"""A native initialize that fails after torch made the default group (the layout unreadable,
NCCL without this rank's GPU) leaves no group behind, and the next initialize works."""

from __future__ import annotations

import pytest
import torch.distributed as dist

import distbridge as idist
from distbridge.models.native import init
from tests.ports import free_port


def _free() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def test_a_failure_after_the_group_was_made_destroys_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the layout could not be read")

    with monkeypatch.context() as patched:
        patched.setattr(init, "layout_from_env", unreadable)
        with pytest.raises(RuntimeError, match="the layout could not be read"):
            idist.initialize("gloo", init_method=_free(), rank=0, world_size=1)
    assert not dist.is_initialized()
    idist.initialize("gloo", init_method=_free(), rank=0, world_size=1)
    try:
        assert idist.all_reduce(3) == 3
    finally:
        idist.finalize()
