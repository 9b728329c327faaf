"""What ``all_reduce_dict``'s header costs: the dict reduction against the code written by hand.

Since 9d262e2, ``idist.all_reduce_dict`` first all-gathers a small int64 header from every
rank (a fingerprint of keys, kinds and shapes, and the value counts), so that dicts which
differ across ranks raise the same error on every rank instead of hanging. That is one
collective more per call. In a gloo world of 2 ranks (``spawn``), this script alternates
single calls (A, B, B, A, ...) of two sides, as ``bench_ab.py`` does, and prints rank 0's
median time per call of each side and their ratio, with the raw code timed against itself
as the noise row. Two dicts:

- ``metrics``: 8 Python floats and 2 Python ints. Raw: the floats in one float64 tensor and
  the ints in one int64 tensor, one ``dist.all_reduce`` each, back into a dict of floats
  and ints.
- ``tensors``: float32 tensors of shapes (), (10,) and (4, 4), and an int64 tensor of
  shape (10,). Raw: the float tensors flattened into one tensor and the int tensor, one
  ``dist.all_reduce`` each, split back into a dict of tensors of the original shapes.

With ``--before PATH`` (an older ``src/distbridge/objects.py``, for example the one before
the header: ``git show 9d262e2^:src/distbridge/objects.py > /tmp/objects_before.py``), its
``all_reduce_dict`` is timed too, loaded as a module of its own on top of the installed
distbridge, against raw and against today's::

    python bench/bench_reduce_dict.py [--calls 1500] [--runs 3] [--before PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from bench_ab import alternating_medians

import distbridge as idist

Call = Callable[[], Any]
FLOAT_KEYS = [f"metric_{i}" for i in range(8)]
INT_KEYS = ["samples", "steps"]
SHAPES = {"loss": (), "per_class": (10,), "confusion": (4, 4)}


def _metrics(rank: int) -> dict[str, Any]:
    """8 floats and 2 ints; small integers and halves, so every sum is exact."""
    d: dict[str, Any] = {key: 0.5 * (rank + i) for i, key in enumerate(FLOAT_KEYS)}
    d.update({key: 32 * (rank + 1) + i for i, key in enumerate(INT_KEYS)})
    return d


def _tensors(rank: int) -> dict[str, Any]:
    """Three small float32 tensors and one int64 tensor."""
    d: dict[str, Any] = {
        key: torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) + rank
        for key, shape in SHAPES.items()
    }
    d["counts"] = torch.arange(10, dtype=torch.int64) + rank
    return d


def _raw_metrics(d: dict[str, Any]) -> dict[str, Any]:
    """The hand-written sum of ``_metrics``: one all_reduce for the floats, one for the ints."""
    floats = torch.tensor([d[key] for key in FLOAT_KEYS], dtype=torch.float64)
    ints = torch.tensor([d[key] for key in INT_KEYS], dtype=torch.int64)
    dist.all_reduce(floats)
    dist.all_reduce(ints)
    out = dict(zip(FLOAT_KEYS, floats.tolist(), strict=True))
    out.update(zip(INT_KEYS, ints.tolist(), strict=True))
    return out


def _raw_tensors(d: dict[str, Any]) -> dict[str, Any]:
    """The hand-written sum of ``_tensors``: the float tensors fused into one all_reduce."""
    flat = torch.cat([d[key].reshape(-1) for key in SHAPES])
    counts = d["counts"].clone()
    dist.all_reduce(flat)
    dist.all_reduce(counts)
    parts = flat.split([torch.Size(shape).numel() for shape in SHAPES.values()])
    out = {}
    for (key, shape), part in zip(SHAPES.items(), parts, strict=True):
        out[key] = part.reshape(shape)
    out["counts"] = counts
    return out


def _check_same(what: str, got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Raise unless both dicts hold the same keys, types, dtypes and values."""
    if sorted(got) != sorted(expected):
        raise RuntimeError(f"{what}: keys {sorted(got)} != {sorted(expected)}.")
    for key, value in expected.items():
        same = type(got[key]) is type(value)
        if same and isinstance(value, torch.Tensor):
            same = got[key].dtype == value.dtype and torch.equal(got[key], value)
        elif same:
            same = got[key] == value
        if not same:
            raise RuntimeError(f"{what}[{key!r}]: {got[key]!r} != {value!r}.")


def _load(path: str) -> Any:
    """``path`` (an older objects.py) as a module of its own, on today's distbridge."""
    spec = importlib.util.spec_from_file_location("objects_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(local_rank: int, calls: int, before: str | None) -> dict[str, tuple[float, float]]:
    """Each row's two median times on this rank (rank 0's are reported)."""
    torch.set_num_threads(1)
    rank = idist.get_rank()
    old = _load(before) if before is not None else None
    rows: dict[str, tuple[Call, Call]] = {}
    cases = (("metrics", _metrics, _raw_metrics), ("tensors", _tensors, _raw_tensors))
    for name, make, raw_sum in cases:
        d = make(rank)

        def today(d: dict[str, Any] = d) -> Any:
            return idist.all_reduce_dict(d)

        def raw(d: dict[str, Any] = d, raw_sum: Callable[..., Any] = raw_sum) -> Any:
            return raw_sum(d)

        _check_same(f"all_reduce_dict({name})", today(), raw())
        rows[f"{name}: all_reduce_dict / raw"] = (today, raw)
        if old is not None:

            def before_header(d: dict[str, Any] = d) -> Any:
                return old.all_reduce_dict(d)

            _check_same(f"before: all_reduce_dict({name})", before_header(), raw())
            rows[f"{name}: before header / raw"] = (before_header, raw)
            rows[f"{name}: all_reduce_dict / before"] = (today, before_header)
        rows[f"{name}: noise, raw / raw"] = (raw, raw)
    return {name: alternating_medians(a, b, calls) for name, (a, b) in rows.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1500, help="calls a side (default 1500)")
    parser.add_argument("--runs", type=int, default=3, help="whole runs (default 3)")
    parser.add_argument("--before", type=Path, help="an older objects.py to time as well")
    args = parser.parse_args(argv)
    before = str(args.before.resolve()) if args.before is not None else None
    per_run = [
        idist.spawn("gloo", worker, args=(args.calls, before), nproc_per_node=2)[0]
        for _ in range(args.runs)
    ]
    print(f"2 gloo ranks, {args.calls} calls a side, alternating; {args.runs} runs")
    print(f"  {'row':40} {'ratio (range)':>18} {'A µs':>8} {'B µs':>8}")
    for name in per_run[0]:
        ratios = sorted(a / b for a, b in (run[name] for run in per_run))
        a_us = statistics.median(run[name][0] for run in per_run) * 1e6
        b_us = statistics.median(run[name][1] for run in per_run) * 1e6
        spread = f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
        print(f"  {name:40} {spread:>18} {a_us:8.0f} {b_us:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
