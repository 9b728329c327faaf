"""A lost connection that no failure note explains keeps the backend's error type and gains the
hang verdict (`fail_together.peer_failure`, which every public collective asks). The real
case, Horovod's engine shutting down on the survivors of a SIGKILLed rank, runs in
tests/distributed/test_horovod_hang.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from distbridge.reliability.fail_together import peer_failure

VERDICT = "Hang in all_reduce #4 of the world (train.py:21): ranks 0, 1 are waiting in it."


class ShutDownError(RuntimeError):
    """As Horovod's HorovodInternalError: a RuntimeError made from one message."""


class TwoArgumentError(RuntimeError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Rank:
    """Rank 0 of 2 without a store (so no failure note can come), whose collective raises
    ``error``, and whose verdict is ``VERDICT``. It fails together, and is its own part in
    it (``together``)."""

    def __init__(self, error: RuntimeError) -> None:
        self.together = self
        self.error = error
        self.asked: list[float] = []
        self.aborted = 0

    def get_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 2

    def known_failure(self) -> None:
        return None

    def store_of(self) -> None:
        return None

    def abort_communicator(self) -> None:
        self.aborted += 1

    def verdict(self, notes: Mapping[int, str], wait: float) -> str | None:
        self.asked.append(wait)
        return VERDICT

    def _do_all_reduce(self, tensor: Any) -> Any:
        """What a public collective does with its engine's error."""
        try:
            raise self.error
        except RuntimeError as err:
            failure = peer_failure("all_reduce", err, self)  # type: ignore[arg-type]
            if failure is None:
                raise
            raise failure from err


def test_a_lost_peer_keeps_the_error_type_and_gains_the_verdict() -> None:
    cause = ShutDownError("Horovod has been shut down. This was caused by an exception.")
    rank = _Rank(cause)
    with pytest.raises(ShutDownError) as info:
        rank._do_all_reduce(None)
    text = str(info.value)
    assert text.startswith("Horovod has been shut down. This was caused by an exception.\n")
    assert "A peer's connection was lost and it left no note" in text
    assert text.endswith(VERDICT)
    assert info.value.__cause__ is cause
    assert rank.asked == [1.0]


def test_an_error_type_that_takes_more_than_a_message_stays_as_it_was() -> None:
    cause = TwoArgumentError("Connection closed by peer [127.0.0.1]:4242", 104)
    with pytest.raises(TwoArgumentError) as info:
        _Rank(cause)._do_all_reduce(None)
    assert info.value is cause


def test_another_error_is_not_explained() -> None:
    cause = RuntimeError("Tensors must be contiguous")
    rank = _Rank(cause)
    with pytest.raises(RuntimeError) as info:
        rank._do_all_reduce(None)
    assert info.value is cause and rank.asked == []
