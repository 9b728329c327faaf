"""Skip a test on every rank when some ranks cannot run it: ``skip_if_any_rank``."""

from __future__ import annotations

from distbridge._collectives import all_gather
from distbridge.reliability.hang.engine_trace import ranks_text

__all__ = ["skip_if_any_rank"]


def skip_if_any_rank(condition: bool, reason: str) -> None:
    """Skip the test on every rank (``pytest.skip``) when ``condition`` is true on any rank.

    Every rank must call it (it is a collective: the ranks exchange their conditions), so
    they all skip together and the warm world stays up. The reason says which ranks asked:
    ``"no GPU (ranks 1, 3 of 4)"``. In a world of one rank (or without a distributed
    context) it is ``pytest.skip(reason)`` when ``condition`` is true.

    Raises:
        TypeError: ``condition`` is not a bool or ``reason`` is not a non-empty str.
    """
    if not isinstance(condition, bool):
        raise TypeError(
            f"condition must be True or False, got {condition!r}: pass bool(...) of it."
        )
    if not isinstance(reason, str) or not reason:
        raise TypeError(f"reason must be a non-empty str, got {reason!r}: say why it skips.")
    import pytest  # only the tests that call it need pytest

    asked = all_gather(reason if condition else "")
    by_reason: dict[str, list[int]] = {}
    for rank, why in enumerate(asked):
        if why:
            by_reason.setdefault(why, []).append(rank)
    if len(asked) == 1 and condition:  # one rank: nothing to say about ranks
        pytest.skip(reason)
    if by_reason:
        pytest.skip(
            "; ".join(
                f"{why} ({ranks_text(ranks)} of {len(asked)})" for why, ranks in by_reason.items()
            )
        )
