"""What fail-together costs when nothing fails: the ``try`` around each native primitive.

Times a tensor all_reduce in a gloo world of one (in-memory store, no port) three ways,
alternating them in each repeat: the native model's ``_do_all_reduce`` as decorated by
``translate_peer_failure``, the same method undecorated, and the facade's
``idist.all_reduce``. The difference of the first two is the whole cost; on a busy machine
the minimum over the repeats is the steadier estimate.

Usage (from the repository root)::

    python bench/bench_fail_together.py [--loops N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import timeit

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

import distbridge as idist
from distbridge import _state
from distbridge.models._fail_together import translate_peer_failure
from distbridge.models.native import NativeModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000, help="calls per timed block")
    parser.add_argument("--repeats", type=int, default=15, help="timed blocks per variant")
    options = parser.parse_args()

    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    model = NativeModel.from_context()
    assert model is not None
    _state.install(model)
    tensor = torch.ones(4)
    bare = NativeModel._do_all_reduce.__wrapped__  # type: ignore[attr-defined]

    def noop(model: object) -> None:
        return None

    wrapped_noop = translate_peer_failure(noop)
    variants = {
        "wrapper alone: no-op body": lambda: wrapped_noop(model),
        "bare no-op": lambda: noop(model),
        "decorated _do_all_reduce": lambda: model._do_all_reduce(tensor, "SUM", None),
        "undecorated _do_all_reduce": lambda: bare(model, tensor, "SUM", None),
        "idist.all_reduce(tensor)": lambda: idist.all_reduce(tensor),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(options.repeats):
        for name, call in variants.items():
            seconds = timeit.timeit(call, number=options.loops)
            times[name].append(seconds / options.loops * 1e9)
    for name, samples in times.items():
        print(f"{name:30s} median {statistics.median(samples):8.0f} ns  min {min(samples):8.0f} ns")
    for label, pick in (("median", statistics.median), ("min", min)):
        cost = pick(times["decorated _do_all_reduce"]) - pick(times["undecorated _do_all_reduce"])
        print(f"{'cost of the wrapper (' + label + ')':30s} {cost:+8.0f} ns per call")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
