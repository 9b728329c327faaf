"""What mypy infers for the facade's overloaded calls: checked by ``nox -s typecheck``
(``mypy --strict`` on this file), never run. A user's annotations rely on these types."""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import assert_type

import distbridge as idist


def _inferred(t: torch.Tensor) -> None:
    assert_type(idist.barrier(), None)
    assert_type(idist.barrier(async_op=True), Any)
    assert_type(idist.all_reduce(t), torch.Tensor)
    assert_type(idist.all_reduce(1.5), float)
    assert_type(idist.all_reduce(3), int)
    assert_type(idist.broadcast(t, src=0), torch.Tensor)
