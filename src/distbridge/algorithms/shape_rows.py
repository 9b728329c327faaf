"""Shape rows: a tensor described as a short row of ints, exchanged before moving data.

A row holds a dtype code, the number of dims and the dims padded with zeros. Ranks
all-gather their rows when shapes may differ across ranks, the number of dims included (a
0-dim tensor on one rank, a 3-dim one on another): each row carries its own. A rank that
cannot describe its tensor sends a "bad" row instead of raising at once, so every rank
raises together (``decode``) rather than some waiting forever. Used by ``reduce_gather_scatter``
(gather, scatter) and ``all_to_all``, with the argument checks they and reduce_scatter share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distbridge.algorithms import codec

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "BAD",
    "MAX_DIMS",
    "WIDTH",
    "WRONG",
    "check_equal_chunks",
    "check_flag",
    "decode",
    "exchange",
    "row",
    "why_bad",
]

MAX_DIMS = 8
WIDTH = 2 + MAX_DIMS  # a shape row: dtype code, ndim, dims padded with zeros
BAD = -1  # a tensor that cannot be sent: every rank raises TypeError
WRONG = -2  # arguments that do not fit (scatter's list on src): every rank raises ValueError


def row(tensor: object) -> list[int]:
    """``tensor``'s shape row, or a row of ``BAD`` when it cannot be sent."""
    if not isinstance(tensor, torch.Tensor) or why_bad(tensor, "") is not None:
        return [BAD] * WIDTH
    dims = [*tensor.shape, *[0] * (MAX_DIMS - tensor.dim())]
    return [codec.dtype_code(tensor.dtype), tensor.dim(), *dims]


def why_bad(tensor: object, what: str) -> str | None:
    """Why ``tensor`` (named ``what``) cannot be sent (gets a ``BAD`` row); None if it can."""
    if not isinstance(tensor, torch.Tensor):
        return f"{what} must be a torch.Tensor, got {type(tensor).__name__}: {tensor!r}."
    if tensor.layout != torch.strided:
        return f"{what} must be a dense (strided) tensor, got layout {tensor.layout}."
    if tensor.dim() > MAX_DIMS:
        return f"{what} has {tensor.dim()} dimensions; at most {MAX_DIMS} are supported."
    if not codec.can_send(tensor.dtype):
        return f"{what} has dtype {tensor.dtype}, which cannot be sent."
    return None


def decode(rows: np.ndarray[Any, Any]) -> tuple[torch.dtype, list[tuple[int, ...]]]:
    """The common dtype and every shape of a table of rows, in row order (each shape with its
    own number of dims); raises on every rank alike when a row is bad or the dtypes differ."""
    flat = rows.reshape(-1, WIDTH)
    if (flat[:, 0] == WRONG).any():
        raise ValueError("The source rank's arguments do not fit (see that rank's error).")
    if (flat[:, 0] == BAD).any():
        raise TypeError("A rank passed a tensor that cannot be sent (see that rank's error).")
    dtypes = {int(c) for c in flat[:, 0]}
    if len(dtypes) > 1:
        names = sorted(str(codec.dtype_from_code(c)) for c in dtypes)
        raise TypeError(f"Every rank must pass the same dtype; got {', '.join(names)}.")
    shapes = [tuple(int(d) for d in r[2 : 2 + r[1]]) for r in flat]
    return codec.dtype_from_code(dtypes.pop()), shapes


def exchange(model: ModelContract, rows: list[list[int]], group: Any) -> np.ndarray[Any, Any]:
    """All-gather every rank's rows: an array of shape (group size, len(rows), width)."""
    local = torch.tensor(rows, dtype=torch.int64, device=model._collective_device())
    out = model._do_all_gather(local.reshape(-1), group).cpu().numpy()
    return out.reshape(-1, len(rows), WIDTH)


def check_flag(name: str, value: object) -> None:
    """TypeError unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}.")


def check_equal_chunks(what: str, tensor: torch.Tensor, size: int, other_way: str) -> None:
    """ValueError unless dim 0 of ``tensor`` splits into ``size`` equal chunks."""
    if tensor.dim() == 0:
        found = "got a 0-dim tensor, which has no dim 0"
    elif tensor.shape[0] % size:
        found = f"dim 0 has size {tensor.shape[0]}; pad it to a multiple of {size}"
    else:
        return
    raise ValueError(f"{what} splits dim 0 into {size} equal chunks, but {found}{other_way}.")
