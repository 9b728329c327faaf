"""``values.gather_values`` on two ranks: values gather together when every rank sends a
number, every rank a str or Path, or every rank an object; any other mix raises (on every
rank alike, since every rank sees the same header table). The other rank is simulated: its
header is what ``gather_values`` sends for its value (short values: one collective)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from distbridge.algorithms import values


class _Rank:
    """Just enough of a model for ``gather_values``: an all-gather of this rank's header and
    the other rank's (``theirs``; None: a world of one, which records what it sent)."""

    def __init__(self, theirs: torch.Tensor | None = None) -> None:
        self.theirs, self.sent = theirs, torch.empty(0)

    def _collective_device(self) -> torch.device:
        return torch.device("cpu")

    def _do_all_gather(self, x: torch.Tensor, group: Any) -> torch.Tensor:
        self.sent = x.clone()
        return x if self.theirs is None else torch.cat([x, self.theirs])


def gathered(mine: object, theirs: object) -> list[Any]:
    other = _Rank()
    values.gather_values(other, theirs, None)  # type: ignore[arg-type]
    return values.gather_values(_Rank(other.sent), mine, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [(1, 2.5), (True, 3), ("a", Path("/x")), ({"a": 1}, [2])],
)
def test_values_of_one_category_gather(mine: object, theirs: object) -> None:
    assert gathered(mine, theirs) == [mine, theirs]
    assert [type(v) for v in gathered(mine, theirs)] == [type(mine), type(theirs)]


@pytest.mark.parametrize(("mine", "theirs"), [(1, "a"), ("a", {"a": 1}), ({"a": 1}, 2.5)])
def test_a_mix_of_categories_raises(mine: object, theirs: object) -> None:
    with pytest.raises(TypeError, match="different kinds across ranks"):
        gathered(mine, theirs)
