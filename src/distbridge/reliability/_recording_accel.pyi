"""The collective ledger's recording step in C (``_recording_accel.c``, CPython 3.11)."""

from collections.abc import Callable
from typing import Any

def record_call(
    spec: tuple[Callable[..., Any], str, bool, str, int],
    self: Any,
    a0: Any,
    a1: Any,
    a2: Any,
    a3: Any,
    rest: tuple[Any, ...],
    kwargs: dict[str, Any],
    /,
) -> Any: ...
def configure(
    not_given: object,
    inside: dict[str, bool],
    classify: Callable[[str], bool],
    tensor: type,
    group_log: type,
    /,
) -> None: ...

class Recorded:
    """A model's public collective, recorded in its ledger (a method descriptor)."""

    spec: tuple[Callable[..., Any], str, bool, str, int]
    bound: Callable[..., Any]
    def __init__(
        self, spec: tuple[Callable[..., Any], str, bool, str, int], bound: Callable[..., Any]
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: object, kind: type | None = None) -> Any: ...
