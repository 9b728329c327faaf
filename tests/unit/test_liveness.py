"""`while_current` follows the model's context and never keeps the model alive."""

from __future__ import annotations

import gc

from distbridge.reliability.hang.stacks import while_current


class _Model:
    def __init__(self) -> None:
        self.live = True

    def is_current(self) -> bool:
        return self.live


def test_true_while_the_context_is_live_then_false() -> None:
    model = _Model()
    alive = while_current(model.is_current)
    assert alive() is True
    model.live = False
    assert alive() is False


def test_the_model_is_held_weakly() -> None:
    model = _Model()
    alive = while_current(model.is_current)
    del model
    gc.collect()
    assert alive() is False
