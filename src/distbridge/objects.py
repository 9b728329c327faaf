"""Object collectives and the data helpers of detectron2, vis4d and virtex.

Object collectives pickle what they send and **unpickle what other ranks send: unpickling
runs code chosen by the sender**. Use them only within your own job, or pass ``serializer=``
(an object with ``dumps(obj) -> bytes`` and ``loads(bytes) -> obj``) to avoid pickle. What
comes back, and how it travels, is in docs/objects.md.
"""

from __future__ import annotations

import numbers
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import numpy as np
import torch

from distbridge._collectives import all_gather, all_reduce, broadcast, reduce
from distbridge._state import current
from distbridge._types import Group
from distbridge.algorithms.object_collectives import Serializer

__all__ = [
    "Serializer",
    "all_gather_object",
    "all_reduce_dict",
    "average_across_processes",
    "broadcast_object",
    "gather_object",
    "gather_results",
    "reduce_dict",
    "scatter_object",
    "shared_random_seed",
]

T = TypeVar("T")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_REFUSED = -1  # a header's count of float values from a rank whose dict _flatten refused


def all_gather_object(
    obj: Any, group: Group | None = None, serializer: Serializer | None = None
) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank.

    Note:
        Without a distributed context, returns ``[copy of obj]`` (it is serialized and
        rebuilt, so an object that cannot travel fails here too).

    Example:
        >>> idist.all_gather_object({"rank": idist.get_rank()})
        [{'rank': 0}, {'rank': 1}]   # on each of 2 ranks
    """
    return current().all_gather_object(obj, group, serializer)


def gather_object(
    obj: Any, dst: int = 0, group: Group | None = None, serializer: Serializer | None = None
) -> list[Any]:
    """Every rank's ``obj`` on rank ``dst`` (a list in rank order); ``[]`` on the others,
    as detectron2's ``comm.gather``.

    Example:
        >>> idist.gather_object(idist.get_rank() * 10)
        [0, 10]   # on rank 0 of 2; [] on rank 1
    """
    return current().gather_object(obj, dst, group, serializer)


def broadcast_object(
    obj: Any, src: int = 0, group: Group | None = None, serializer: Serializer | None = None
) -> Any:
    """Rank ``src``'s ``obj`` on every rank (the other ranks' ``obj`` is ignored; pass None).

    Returns:
        On ``src``, ``obj`` itself; elsewhere a rebuilt copy.

    Example:
        >>> idist.broadcast_object({"lr": 0.1} if idist.get_rank() == 0 else None)
        {'lr': 0.1}   # on every rank
    """
    return current().broadcast_object(obj, src, group, serializer)


def scatter_object(
    objs: Sequence[Any] | None,
    src: int = 0,
    group: Group | None = None,
    serializer: Serializer | None = None,
) -> Any:
    """Group rank r gets ``objs[r]`` from rank ``src``; ``objs`` is read on ``src`` only.

    Example:
        >>> idist.scatter_object(["a", "b"] if idist.get_rank() == 0 else None)
        'a'   # on rank 0; 'b' on rank 1
    """
    return current().scatter_object(objs, src, group, serializer)


# ---- dictionaries of metrics ------------------------------------------------------------------


def _flatten(
    d: Mapping[str, Any],
) -> tuple[list[str], list[tuple[str, str]], torch.Tensor, torch.Tensor]:
    """Sorted keys; each with what its value is ("int", "float" or "float tensor of shape
    (2, 3)"); and every value flattened into a float64 and an int64 vector."""
    if not isinstance(d, Mapping):
        raise TypeError(f"Expected a dict of str keys to values, got {type(d).__name__}.")
    odd = [k for k in d if not isinstance(k, str)]
    if odd:
        raise TypeError(f"Every key must be a str (they are sorted across ranks), got {odd[0]!r}.")
    keys = sorted(d)
    described: list[tuple[str, str]] = []
    floats = [torch.empty(0, dtype=torch.float64)]  # torch.cat needs one tensor at least
    ints = [torch.empty(0, dtype=torch.int64)]
    for key in keys:
        value = d[key]
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided:
                raise TypeError(f"Value of {key!r} must be a dense tensor, got {value.layout}.")
            flat = value.detach().reshape(-1).cpu()
        elif isinstance(value, (numbers.Real, np.generic)) and not isinstance(value, str):
            if isinstance(value, numbers.Integral) and not _INT64_MIN <= int(value) <= _INT64_MAX:
                raise ValueError(f"Value of {key!r} does not fit in 64 bits: {value!r}.")
            flat = torch.tensor([value])
        else:
            raise TypeError(f"Value of {key!r} must be a tensor or a number, got {value!r}.")
        if flat.dtype.is_complex:
            raise TypeError(f"Value of {key!r} is complex; reduce it with all_reduce instead.")
        is_float = _is_float(value)
        (floats if is_float else ints).append(flat.to(torch.float64 if is_float else torch.int64))
        kind = "float" if is_float else "int"
        if isinstance(value, torch.Tensor):
            kind = f"{kind} tensor of shape {tuple(value.shape)}"
        described.append((key, kind))
    return keys, described, torch.cat(floats), torch.cat(ints)


def _is_float(value: Any) -> bool:
    """Whether ``value`` (a tensor or a number) is reduced as float64, else as int64."""
    if isinstance(value, torch.Tensor):
        return value.dtype.is_floating_point
    return not isinstance(value, (numbers.Integral, np.bool_, bool))


def _differences(per_rank: list[list[tuple[str, str]]], what: str) -> str:
    """The message naming each key whose value differs across ranks, and how."""
    dicts = [dict(described) for described in per_rank]
    lines = []
    for key in sorted(set().union(*dicts)):
        ranks_by_kind: dict[str, list[int]] = {}
        for rank, described in enumerate(dicts):
            ranks_by_kind.setdefault(described.get(key, "missing"), []).append(rank)
        if len(ranks_by_kind) > 1:
            found = (f"{kind} on group rank(s) {ranks}" for kind, ranks in ranks_by_kind.items())
            lines.append(f"{key!r}: {', '.join(found)}")
    more = f"; and {len(lines) - 5} more keys" if len(lines) > 5 else ""
    return (
        f"{what}: the dictionaries differ across ranks ({'; '.join(lines[:5])}{more}). Pass "
        "the same keys with the same kinds (float or int) and shapes on every rank."
    )


def _reduction(asked: Any, dst: int | None) -> tuple[bool, str]:
    """Whether ``asked`` (all_reduce_dict's ``op``, or reduce_dict's ``average`` when there is
    a ``dst``) means a mean, and the reduction as the call spelled it."""
    if dst is None:
        if asked not in ("sum", "mean"):
            raise ValueError(f"op must be 'sum' or 'mean', got {asked!r}.")
        return asked == "mean", f"op={asked!r}"
    if not isinstance(asked, bool):
        raise TypeError(f"average must be True or False, got {asked!r}.")
    return asked, f"average={asked}, dst={dst}"


def _flatten_agreed(
    d: Mapping[str, Any], asked: Any, dst: int | None, group: Group | None, what: str
) -> tuple[list[str], torch.Tensor, torch.Tensor, int, bool]:
    """``_flatten(d)``, the number of ranks and whether ``asked`` means a mean, once every rank
    has seen every rank's header: a dict or a reduction (``asked``, ``dst``) that any rank
    refused, dicts that differ across ranks in keys, kinds or shapes, or reductions that
    differ, raise on every rank alike, before the reduction that would hang or mix them up."""
    problem: Exception | None = None
    spelled = ""
    try:
        mean, spelled = _reduction(asked, dst)
        keys, described, floats, ints = _flatten(d)
        fingerprint = zlib.crc32(repr(described).encode())
        header = [fingerprint, floats.numel(), ints.numel(), zlib.crc32(spelled.encode())]
    except (TypeError, ValueError) as err:
        problem = err
        header = [0, _REFUSED, int(isinstance(err, ValueError)), 0]
    rows = all_gather(torch.tensor(header, dtype=torch.int64), group).reshape(-1, 4).tolist()
    if problem is not None:
        raise problem
    refused = [rank for rank, row in enumerate(rows) if row[1] == _REFUSED]
    if refused:
        error = ValueError if rows[refused[0]][2] else TypeError
        raise error(
            f"{what}: group rank(s) {refused} passed a dict or arguments that cannot be "
            "reduced (see their error)."
        )
    if any(row[3] != rows[0][3] for row in rows):
        per_rank = enumerate(all_gather_object(spelled, group))
        found = "; ".join(f"{theirs} on group rank {rank}" for rank, theirs in per_rank)
        raise ValueError(
            f"{what}: the ranks asked for different reductions ({found}). Pass the same "
            "arguments on every rank."
        )
    if any(row != rows[0] for row in rows):
        raise ValueError(_differences(all_gather_object(described, group), what))
    return keys, floats, ints, len(rows), mean


def _rebuild(
    d: Mapping[str, Any], keys: list[str], floats: torch.Tensor, ints: torch.Tensor, mean: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fi = ii = 0
    for key in keys:
        value = d[key]
        n = value.numel() if isinstance(value, torch.Tensor) else 1
        is_float = _is_float(value)
        if is_float:
            part, fi = floats[fi : fi + n], fi + n
        else:
            part, ii = ints[ii : ii + n], ii + n  # float64 already for a mean
        if isinstance(value, torch.Tensor):
            dtype = value.dtype if (is_float or not mean) else torch.float64
            out[key] = part.reshape(value.shape).to(dtype=dtype, device=value.device)
        else:
            out[key] = float(part.item()) if (is_float or mean) else int(part.item())
    return out


def _summed(values: torch.Tensor, dst: int | None, group: Group | None) -> torch.Tensor:
    """``values`` summed over the ranks (onto ``dst`` unless it is None); no collective for
    an empty vector, which is empty on every rank (``_flatten_agreed`` checked)."""
    if not values.numel():
        return values
    return all_reduce(values, "SUM", group) if dst is None else reduce(values, dst, "SUM", group)


def _reduce_flat(
    d: Mapping[str, Any], asked: Any, dst: int | None, group: Group | None
) -> dict[str, Any]:
    what = "all_reduce_dict" if dst is None else "reduce_dict"
    keys, floats, ints, world, mean = _flatten_agreed(d, asked, dst, group, what)
    floats, ints = _summed(floats, dst, group), _summed(ints, dst, group)
    is_receiver = dst is None or current().get_rank() == dst
    if not is_receiver:
        return dict(d)
    if mean:
        floats = floats / world
        ints = ints.to(torch.float64) / world
    return _rebuild(d, keys, floats, ints, mean)


def all_reduce_dict(
    d: Mapping[str, Any], op: Literal["sum", "mean"] = "sum", group: Group | None = None
) -> dict[str, Any]:
    """Sum or average every value of ``d`` over the ranks, in one fused collective (two when
    ``d`` holds both integer and floating values) after a small header, as vis4d's
    ``all_reduce_dict``.

    Args:
        d: str keys; tensor (any shape) or number values; the same keys, kinds (float or
            integer) and shapes on every rank (checked by the header: the same ValueError on
            every rank, not a hang or a silent mix-up).
        op: "sum" keeps each value's dtype; "mean" gives integer values as float64.

    Example:
        >>> idist.all_reduce_dict({"loss": torch.tensor(idist.get_rank() + 1.0)}, op="mean")
        {'loss': tensor(1.5000)}   # on each of 2 ranks
    """
    return _reduce_flat(d, op, None, group)


def reduce_dict(
    d: Mapping[str, Any], average: bool = True, dst: int = 0, group: Group | None = None
) -> dict[str, Any]:
    """Reduce every value of ``d`` onto rank ``dst`` (averaged by default), as detectron2's
    ``comm.reduce_dict``; the other ranks get ``d`` back unchanged (as a new dict)."""
    return _reduce_flat(d, average, dst, group)


def average_across_processes(x: T) -> T:
    """Average a float tensor (in place, and returned) or a dict of values over all ranks,
    as virtex's ``average_across_processes``."""
    if isinstance(x, torch.Tensor):
        return all_reduce(x, "AVG")  # type: ignore[return-value]
    if isinstance(x, Mapping):
        return all_reduce_dict(x, op="mean")  # type: ignore[return-value]
    raise TypeError(f"average_across_processes takes a tensor or a dict, got {type(x).__name__}.")


def shared_random_seed() -> int:
    """A random int in [0, 2**31) that is the same on every rank (rank 0's draw), as
    detectron2's ``comm.shared_random_seed``. Every rank draws from numpy's global
    generator, so seeding numpy the same way everywhere keeps runs reproducible."""
    return broadcast(int(np.random.randint(2**31)), src=0)


def gather_results(
    items: Sequence[T],
    total: int | None = None,
    order: Literal["interleave", "contiguous"] = "interleave",
    dst: int | None = None,
    group: Group | None = None,
) -> list[T]:
    """Put back together the per-rank results of a sharded evaluation.

    Args:
        items: this rank's results, in the order it processed its samples.
        total: the dataset size: drops the duplicates DistributedSampler adds to make the
            shards even. Never truncates to the shortest rank.
        order: "interleave" undoes DistributedSampler's striding (rank r had samples
            r, r + W, r + 2W, ...); "contiguous" concatenates the ranks' lists.
        dst: only this rank receives the results (the others get ``[]``); None: every rank.
        group: as in `all_reduce`.

    Example:
        >>> idist.gather_results(predictions, total=len(dataset))   # doctest: +SKIP
    """
    if order not in ("interleave", "contiguous"):
        raise ValueError(f"order must be 'interleave' or 'contiguous', got {order!r}.")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
        raise ValueError(f"total must be an int >= 0 or None, got {total!r}.")
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise TypeError(f"items must be a list of this rank's results, got {items!r}.")
    mine = list(items)
    per_rank = all_gather_object(mine, group) if dst is None else gather_object(mine, dst, group)
    if not per_rank:
        return []
    if order == "contiguous":
        merged = [item for part in per_rank for item in part]
    else:
        longest = max(len(part) for part in per_rank)
        merged = [part[i] for i in range(longest) for part in per_rank if i < len(part)]
    if total is not None:
        if total > len(merged):
            raise ValueError(f"total={total}, but only {len(merged)} results were gathered.")
        merged = merged[:total]
    return merged
