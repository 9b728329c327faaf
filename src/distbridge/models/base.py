"""ComputationModel: the public algorithm of every collective, written once.

A backend subclasses it and supplies only the primitives of ``BackendPrimitives``, so every
model validates, converts and fails the same way. ``collective``, the wrapper of every
public collective (the ledger's entry, failure translation), is here too: a repeated
``idist.all_reduce`` then runs in three files (the facade, this one, the backend's), which
is why the module is longer than most.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from types import FunctionType
from typing import Any, Final, TypeVar

import torch
from typing_extensions import Self

from distbridge._frames import SEEN, outside
from distbridge._types import Group
from distbridge.algorithms import all_to_all as _all_to_all
from distbridge.algorithms import (
    carriers,
    codec,
    object_collectives,
    reduce_gather_scatter,
    traceable,
    values,
)
from distbridge.algorithms.checks import check_dense, check_reducible, divide_, write_back
from distbridge.models._primitives import NOT_A_MEMBER, BackendPrimitives
from distbridge.reliability import debug, fail_together
from distbridge.reliability.hang.ledger import Entry
from distbridge.reliability.timed_barrier import CompletedBarrier, check_barrier_options

__all__ = ["COLLECTIVES", "NOT_A_MEMBER", "ComputationModel", "collective"]

_compiling = torch.compiler.is_compiling  # True while torch.compile traces (Dynamo knows it)
# Dynamo folds this to True while it traces; eager it is a plain `return False`
_dynamo_compiling = torch.compiler.is_dynamo_compiling
_getframe = sys._getframe
_seen = SEEN.get  # file name -> whether it is distbridge's own; None: not asked yet
_Tensor = torch.Tensor
_Method = TypeVar("_Method", bound=Callable[..., Any])
_NO: Final = object()  # a positional slot of the ledger's wrapper that the caller left empty


def collective(
    op: str, x_at: int, group_at: int, compared: bool = True
) -> Callable[[_Method], _Method]:
    """Decorate a model's public collective ``op``. Each call is recorded in ``self.ledger``
    (a sequence number in its group's log, the op, the payload's dtype and shape or type,
    the caller's code position outside distbridge) and marked passed or raised; in debug
    mode the group's members compare it before it runs. An engine error that a failed peer
    or a hang explains is raised as what `fail_together.peer_failure` makes of it. Under
    torch.compile (Dynamo tracing) the call goes to the method as it is.

    ``x_at``: the payload's position after ``self`` (0, or -1: none); ``group_at``: the
    position of ``group``; ``compared``: False where the method runs the debug mode's
    comparison itself (barrier: untimed calls only). The method stays reachable as
    ``__wrapped__``.
    """

    def decorate(method: _Method) -> _Method:
        signature = inspect.signature(method)
        params = list(signature.parameters)  # the model's ("self"), the payload's, ...
        x_name = params[1] if x_at == 0 else ""

        def compare(self: Any, given: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            """Debug mode: the members of the group compare this call before it runs, and
            raise `CollectiveMismatch` when they differ (``reliability/debug.py``). They see
            every argument but ``group`` by name, defaults filled in, the payload as ``x``."""
            try:
                bound = signature.bind(self, *given, **kwargs)
            except TypeError:  # the method raises its own error
                return
            bound.apply_defaults()
            named = bound.arguments
            del named[params[0]]
            named["x"] = named.pop(x_name)
            self._debug_checker.check(self, op, named.pop("group"), named)

        def call(self: Any, given: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            """``method`` with the slots that were given (a prefix of them), then the rest;
            an eager call in debug mode is compared first."""
            end = 0
            while end < len(given) and given[end] is not _NO:
                end += 1
            if self._debug and compared and not _compiling():
                compare(self, given[:end], kwargs)
            return method(self, *given[:end], **kwargs)

        # Up to four positional arguments arrive in positional-only slots and are passed on
        # as they came: a third of the cost of packing them into ``*args``.
        @functools.wraps(method)
        def wrapper(
            self: ComputationModel,
            a0: Any = _NO,
            a1: Any = _NO,
            a2: Any = _NO,
            a3: Any = _NO,
            /,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            if _dynamo_compiling():  # the graph traces the collective: nothing to record
                return call(self, (a0, a1, a2, a3, *args), kwargs)
            group = a2 if group_at == 2 else a1 if group_at == 1 else a0 if group_at == 0 else a3
            if group is _NO:
                group = kwargs.get("group") if kwargs else None
            ledger = self.ledger
            log = ledger.world if group is None else ledger.log_of(group)
            if log is None:  # not a member, or not a group: the collective says so itself
                return call(self, (a0, a1, a2, a3, *args), kwargs)
            # The caller: the facade, whose caller is the user's code most often, or the user.
            frame = _getframe(1)
            code = frame.f_code
            inside = _seen(code.co_filename)
            if inside:
                back = frame.f_back
                if back is not None:
                    frame, code = back, back.f_code
                    inside = _seen(code.co_filename) is not False
            if inside is not False:  # distbridge's, or a file not seen yet
                frame = outside(frame)
                code = frame.f_code
            log.seq = seq = log.seq + 1
            x = a0 if x_name else None
            if x is _NO:
                x = kwargs.get(x_name) if kwargs else None
            entry: Entry
            if x.__class__ is _Tensor:
                entry = (seq, op, x.dtype, x.shape, code, frame.f_lasti)
            else:
                entry = (seq, op, x.__class__, None, code, frame.f_lasti)
            log.ring[seq % log.capacity] = entry
            try:
                if args or kwargs or a3 is not _NO or self._debug:
                    result = call(self, (a0, a1, a2, a3, *args), kwargs)
                elif a1 is _NO:
                    result = method(self) if a0 is _NO else method(self, a0)
                elif a2 is _NO:
                    result = method(self, a0, a1)
                else:
                    result = method(self, a0, a1, a2)
            except BaseException as err:
                failure = fail_together.peer_failure(op, err, self)
                log.passed = log.seq
                log.raised[seq % log.capacity] = seq
                if failure is None:
                    raise
                raise failure from err
            log.passed = log.seq
            return result

        return wrapper  # type: ignore[return-value]

    return decorate


class ComputationModel(BackendPrimitives):
    """A distributed backend: the public algorithm of every collective, written once.

    Subclass it, implement the abstract methods of ``BackendPrimitives`` and register
    the class to add a backend. Everything here is the same for every backend; what the
    code below the models may use of it is ``ModelContract``'s.
    """

    def __init__(self) -> None:
        super().__init__()
        self._debug = debug.enabled_by_env()  # read by `collective`'s wrapper and barrier
        self._debug_checker = debug.CollectiveChecker()
        # op as given -> canonical name, for the usual spellings ("sum", "Sum", "AVERAGE")
        self._op_names = codec.op_spellings(self.reduce_ops)
        # (op as given, dtype, device, layout) -> (the op the backend runs, the divisor of an
        # average it does not do itself, else 0), for world all-reduces of contiguous tensors
        # that the engine reduces as they are: the checks of the first such call stand.
        self._fast_reduce: dict[
            tuple[str, torch.dtype, torch.device, torch.layout], tuple[str, int]
        ] = {}

    # ---- public collectives ------------------------------------------------------------------

    @collective("all_reduce", 0, 2)
    def all_reduce(self, x: Any, op: str = "SUM", group: Group | None = None) -> Any:
        """Reduce ``x`` across ranks; see ``distbridge.all_reduce``."""
        if self.functional_collectives and _compiling() and isinstance(x, torch.Tensor):
            return traceable.all_reduce(self, x, op, group)
        if not isinstance(x, torch.Tensor):
            return self._reduce_number(x, op, group)
        key = (op, x.dtype, x.device, x.layout) if group is None and type(op) is str else None
        fast = None if key is None else self._fast_reduce.get(key)
        if fast is None or not x.is_contiguous():  # the checks, once per kind of tensor
            name = self._op_names.get(op) if type(op) is str else None
            if name is None:
                name = codec.canonical_op(op, self.reduce_ops, self.name)
            check_reducible(x, name)
            resolved = None if group is None else self.groups.resolve(group)
            if resolved is NOT_A_MEMBER:
                return x
            device = self._placement(x)
            direct = (
                device == x.device
                and x.is_contiguous()
                and x.dtype not in self.uncarried_dtypes
                and (name not in ("MIN", "MAX") or x.dtype not in carriers.ORDERED_FLOATS)
            )
            if not direct:  # a copy on the device, or a carrier
                return self._reduce_tensor(x, name, resolved, device)
            divided = name == "AVG" and not self._native_avg()
            fast = ("SUM", self._group_size(resolved)) if divided else (name, 0)
            if key is not None:
                self._fast_reduce[key] = fast
            group = resolved
        engine_op, divisor = fast
        out = self._do_all_reduce(x, engine_op, group)
        if divisor:
            divide_(out, divisor)
        return x if out is x else write_back(x, out)

    @collective("all_gather", 0, 1)
    def all_gather(self, x: Any, group: Group | None = None) -> Any:
        """Gather ``x`` from every rank; see ``distbridge.all_gather``."""
        if self.functional_collectives and _compiling() and isinstance(x, torch.Tensor):
            return traceable.all_gather(self, x, group)
        resolved = self.groups.resolve(group)
        if isinstance(x, torch.Tensor):
            check_dense(x, "all_gather")
            if resolved is NOT_A_MEMBER:
                return x
            return self.gather_tensor(x.unsqueeze(0) if x.dim() == 0 else x, resolved)
        if resolved is NOT_A_MEMBER:  # as for tensors, and as ignite: the input back
            return x
        return values.gather_values(self, x, resolved)

    @collective("broadcast", 0, 3)
    def broadcast(
        self, x: Any, src: int = 0, safe_mode: bool = False, group: Group | None = None
    ) -> Any:
        """Send ``x`` from rank ``src`` to every rank; see ``distbridge.broadcast``."""
        traced = self.functional_collectives and _compiling()
        if traced and isinstance(x, torch.Tensor) and not safe_mode:
            return traceable.broadcast(self, x, src, group)
        resolved = self.groups.resolve(group)
        self.check_root("src", src, resolved)
        member = resolved is not NOT_A_MEMBER  # a rank outside the group checks as one in it
        is_src = member and self.get_rank() == src
        if isinstance(x, torch.Tensor) and not safe_mode:
            check_dense(x, "broadcast")
            return self.broadcast_tensor(x, src, resolved) if member else x
        if x is None and (is_src or not safe_mode):
            error = ValueError(
                f"Source data can not be None: broadcast got None on the source rank (src={src})."
                if is_src
                else "Argument safe_mode should be True if None is passed for non src rank: "
                f"broadcast got None on rank {self.get_rank()} (src={src}). Pass "
                "safe_mode=True to let non-source ranks pass None."
            )
            if is_src and safe_mode:  # the others wait for a header: tell them, then raise
                values.broadcast_failure(self, error, src, resolved)
            raise error
        if not member:
            return x
        return values.broadcast_value(self, x if is_src else None, src, resolved)

    @collective("barrier", -1, 0, compared=False)
    def barrier(
        self,
        group: Group | None = None,
        timeout: float | timedelta | None = None,
        name: str | None = None,
        *,
        async_op: bool = False,
        device_ids: list[int] | None = None,
    ) -> Any:
        """Wait until every rank of ``group`` arrives; see ``distbridge.barrier``."""
        seconds, ids = check_barrier_options(timeout, name, async_op, device_ids)
        if self._debug and seconds is None:  # a timed barrier names missing ranks itself
            self._debug_checker.check(self, "barrier", group, {})
        resolved = self.groups.resolve(group)
        done = CompletedBarrier() if async_op else None
        if resolved is NOT_A_MEMBER:
            return done
        if seconds is None:
            return self._do_barrier_with(resolved, async_op, ids)
        members = self._group_members(resolved)
        if len(members) == 1:
            return done
        timed = self.timed_barriers()
        if timed is not None:
            timed.wait(members, seconds, name)
        elif math.isinf(seconds):
            self._do_barrier(resolved)
        else:
            raise NotImplementedError(
                f"barrier(timeout={timeout!r}) needs a coordination store, and the "
                f"{self.name} model has none; call barrier() without a timeout."
            )
        return done

    def new_group(self, ranks: Sequence[int], **kwargs: Any) -> Any:
        """A group of ``ranks``, created once per distinct rank set and options, then reused."""
        return self.groups.get(ranks, **kwargs)

    @collective("all_gather_tensors_with_shapes", 0, 2)
    def all_gather_tensors_with_shapes(
        self, tensor: torch.Tensor, shapes: Sequence[Sequence[int]], group: Group | None = None
    ) -> list[torch.Tensor]:
        """Gather tensors whose shapes (number of dims too) differ across ranks; ``shapes[i]``
        is group rank i's; see ``distbridge.all_gather_tensors_with_shapes``."""
        return reduce_gather_scatter.all_gather_with_shapes(self, tensor, shapes, group)

    @collective("reduce", 0, 3)
    def reduce(self, x: Any, dst: int = 0, op: str = "SUM", group: Group | None = None) -> Any:
        """Reduce onto ``dst``; see ``distbridge.reduce``."""
        if self.functional_collectives and _compiling() and isinstance(x, torch.Tensor):
            return traceable.reduce(self, x, dst, op, group)
        return reduce_gather_scatter.reduce(self, x, dst, op, group)

    @collective("gather", 0, 2)
    def gather(
        self, x: Any, dst: int = 0, group: Group | None = None, same_shape: bool = False
    ) -> list[Any]:
        """Collect every rank's ``x`` on ``dst``; see ``distbridge.gather``."""
        if self.functional_collectives and _compiling() and isinstance(x, torch.Tensor):
            return traceable.gather(self, x, dst, group)
        fast = group is None and same_shape is True and type(x) is torch.Tensor
        if fast and self.fast_gather.knows(x):  # a tensor like it passed the checks
            got = reduce_gather_scatter.gather_known(self, x, dst)  # None: a bad dst
            if got is not None:
                return got
        return reduce_gather_scatter.gather(self, x, dst, group, same_shape)

    @collective("scatter", 0, 2)
    def scatter(
        self, tensors: Any, src: int = 0, group: Group | None = None, out: Any = None
    ) -> Any:
        """Give rank r ``tensors[r]`` from ``src``; see ``distbridge.scatter``."""
        if self.functional_collectives and _compiling():
            return traceable.scatter(self, tensors, src, group, out)
        if group is None and type(out) is torch.Tensor and self.fast_scatter.knows(out):
            sent = reduce_gather_scatter.scatter_known(self, tensors, src, out)
            if sent is not None:  # None: not plainly right
                return sent
        return reduce_gather_scatter.scatter(self, tensors, src, group, out)

    @collective("reduce_scatter", 0, 2)
    def reduce_scatter(self, tensor: Any, op: str = "SUM", group: Group | None = None) -> Any:
        """Reduce, then give rank r chunk r; see ``distbridge.reduce_scatter``."""
        if self.functional_collectives and _compiling() and isinstance(tensor, torch.Tensor):
            return traceable.reduce_scatter(self, tensor, op, group)
        return reduce_gather_scatter.reduce_scatter(self, tensor, op, group)

    @collective("all_to_all", 0, 1)
    def all_to_all(
        self, tensors: Any, group: Group | None = None, same_shape: bool = False
    ) -> list[torch.Tensor] | torch.Tensor:
        """Send ``tensors[j]`` to rank j; see ``distbridge.all_to_all``."""
        if self.functional_collectives and _compiling():
            return traceable.all_to_all(self, tensors, group)
        if group is None and type(tensors) is torch.Tensor and type(same_shape) is bool:
            if self.fast_all_to_all.knows(tensors):  # a tensor like it passed the checks
                return self._do_all_to_all_even(tensors, None)
        elif group is None and same_shape is True and type(tensors) is list:
            got = _all_to_all.chunks_known(self, tensors)  # x.chunk(n) of a known x
            if got is not None:
                return got
        return _all_to_all.all_to_all(self, tensors, group, same_shape)

    # The object collectives are algorithms/object_collectives.py's functions, recorded.
    all_gather_object = collective("all_gather_object", 0, 1)(object_collectives.all_gather_object)
    gather_object = collective("gather_object", 0, 2)(object_collectives.gather_object)
    broadcast_object = collective("broadcast_object", 0, 2)(object_collectives.broadcast_object)
    scatter_object = collective("scatter_object", 0, 2)(object_collectives.scatter_object)

    # ---- debug mode --------------------------------------------------------------------------

    def _set_debug(self, flag: bool | None) -> Self:
        """Turn the debug mode on or off (None: keep what ``DISTBRIDGE_DEBUG`` said)."""
        if flag is not None:
            self._debug = flag
        return self

    # ---- all_reduce's own steps ---------------------------------------------------------------

    def _reduce_number(self, x: Any, op: str, group: Group | None) -> Any:
        """All-reduce Python number ``x``: in a tensor made where the backend reduces it, in
        a dtype it carries; the result in ``x``'s type (a float for an average)."""
        name = codec.canonical_op(op, self.reduce_ops, self.name)
        kind = codec.kind_of(x)
        if kind not in codec.NUMBER_KINDS:
            raise TypeError(
                f"Unhandled input type {type(x).__name__}: all_reduce takes a tensor or a "
                f"Python number (int, float, bool), got {x!r}."
            )
        if kind == codec.KIND_FLOAT and name in ("AND", "OR"):
            raise TypeError(f"Reduction {name} needs an int or bool, got float {x!r}.")
        resolved = self.groups.resolve(group)
        if resolved is NOT_A_MEMBER:
            return x
        dtype = torch.float64 if kind == codec.KIND_FLOAT or name == "AVG" else torch.int64
        value = float(x) if dtype is torch.float64 else codec.encode_number(x, kind)
        tensor = torch.tensor([value], dtype=dtype, device=self._number_device(dtype))
        result = self._number_value(self._reduce_tensor(tensor, name, resolved, tensor.device))
        if name == "AVG" or kind == codec.KIND_FLOAT:
            return float(result)
        if kind == codec.KIND_BOOL and name in ("AND", "OR", "MIN", "MAX"):
            return bool(result)
        return int(result)

    def _reduce_tensor(
        self, x: torch.Tensor, op: str, group: Any, device: torch.device
    ) -> torch.Tensor:
        """All-reduce tensor ``x`` in place with canonical ``op`` (AVG as SUM and a division
        where the backend does not average), through ``device`` (its placement) and a carrier
        where the backend cannot reduce its dtype as it is (MIN / MAX of a float: IEEE's,
        through integer keys)."""
        work, back = carriers.reduction_carrier(
            self.to_placement(x, device), op, self.uncarried_dtypes, in_place=True
        )
        try:
            if op == "AVG" and not self._native_avg():
                out = divide_(self._do_all_reduce(work, "SUM", group), self._group_size(group))
            else:
                out = self._do_all_reduce(work, op, group)
        except BaseException:
            if back is not None:
                with contextlib.suppress(Exception):
                    back(work)  # the carrier may have made float MIN / MAX keys in x: x again
            raise
        return write_back(x, out if back is None else back(out))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(backend={self.backend()!r}, rank={self.get_rank()}, "
            f"world_size={self.get_world_size()})"
        )


#: The public collectives of every model, in the order the class defines them: the methods
#: `collective` records (the testing layers intercept these).
COLLECTIVES: Final[tuple[str, ...]] = tuple(
    name
    for name, method in vars(ComputationModel).items()
    if isinstance(method, FunctionType) and hasattr(method, "__wrapped__")  # not classmethods
)
