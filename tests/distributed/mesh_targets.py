"""Per-rank checks of DeviceMesh groups (run on 4 gloo ranks by test_mesh_gloo.py)."""

from __future__ import annotations

from typing import Any

import torch

import distbridge as idist
from distbridge.algorithms import byte_view


def _raises(kind: type[Exception], text: str, fn: Any, *args: Any, **kwargs: Any) -> str:
    try:
        fn(*args, **kwargs)
    except kind as err:
        return "" if text in str(err) else f"{kind.__name__} without {text!r}: {err}"
    except Exception as err:  # the wrong type
        return f"expected {kind.__name__}, got {type(err).__name__}: {err}"
    return f"no {kind.__name__} ({text!r})"


def run_mesh_checks(local_rank: int, seeds: list[int]) -> list[str]:
    """Every collective over each dimension of a (2, 2) mesh against the same collective over
    the list of that dimension's ranks (and the exact sum), eager and compiled; the errors."""
    rank = idist.get_rank()
    problems: list[str] = []
    mesh = idist.device_mesh((2, 2), names=("dp", "tp"))
    for axis, dim in enumerate(("dp", "tp")):
        sub = mesh[dim]
        members = sorted(int(r) for r in sub.mesh.tolist())
        # every rank makes every group of this dimension, in one order (new_group is a
        # collective of the whole world)
        for ranks in mesh.mesh.movedim(axis, -1).reshape(-1, 2).tolist():
            idist.new_group(sorted(ranks))
        if idist.new_group(sub) is not sub.get_group():
            problems.append(f"new_group(mesh[{dim!r}]) is not the mesh's group")
        for seed in seeds:
            gen = torch.Generator().manual_seed(seed * 10 + rank)
            x = torch.randint(-8, 9, (3,), generator=gen).to(torch.float64)
            every = [
                torch.randint(
                    -8, 9, (3,), generator=torch.Generator().manual_seed(seed * 10 + r)
                ).to(torch.float64)
                for r in members
            ]
            by_mesh = idist.all_reduce(x.clone(), group=sub)
            by_list = idist.all_reduce(x.clone(), group=members)
            if not torch.equal(by_mesh, sum(every)) or not torch.equal(by_mesh, by_list):
                problems.append(f"all_reduce over {dim}: {by_mesh} vs {by_list}, {sum(every)}")
            gathered = idist.all_gather(x, group=sub)
            if not torch.equal(gathered, torch.cat(every)):
                problems.append(f"all_gather over {dim}: {gathered}")
            sent = idist.broadcast(x.clone(), src=members[-1], group=sub)
            if not torch.equal(sent, every[-1]):
                problems.append(f"broadcast over {dim}: {sent}")
            compiled = torch.compile(
                lambda t, g=sub: idist.all_reduce(t, "MAX", group=g),
                fullgraph=True,
                backend="aot_eager",
            )(x.clone())
            want = torch.stack(every).amax(0)
            if byte_view.as_bytes(compiled).tolist() != byte_view.as_bytes(want).tolist():
                problems.append(f"compiled all_reduce MAX over {dim}: {compiled} != {want}")
    problems += [
        p
        for p in (
            _raises(ValueError, "pick one, e.g. group=mesh['tp']", idist.all_reduce,
                    torch.ones(1), group=mesh),
            _raises(ValueError, "must multiply to 4", idist.device_mesh, (3, 2)),
            _raises(ValueError, "one name per dimension", idist.device_mesh, (2, 2), names=("a",)),
            _raises(ValueError, "positive int", idist.device_mesh, (4, 0)),
        )
        if p
    ]  # fmt: skip
    torch._dynamo.reset()
    return problems
