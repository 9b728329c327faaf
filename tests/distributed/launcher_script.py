"""Started by a real launcher (torchrun, mpirun): record what distbridge reads before and after
``initialize("gloo")``, with a real all_reduce, into ``<folder>/rank<R>.json`` (argv[1]).

With ``reinit`` as argv[2]: finalize and initialize again (a second rendezvous on the same
launcher environment) and reduce once more.
"""

import json
import sys

import distbridge as idist
from distbridge import environments
from distbridge.helpers import rank_zero_only


def _layout() -> dict[str, int]:
    return {
        "rank": idist.get_rank(),
        "local_rank": idist.get_local_rank(),
        "world_size": idist.get_world_size(),
        "nproc_per_node": idist.get_nproc_per_node(),
        "nnodes": idist.get_nnodes(),
        "node_rank": idist.get_node_rank(),
    }


@rank_zero_only
def _on_rank_zero() -> bool:
    return True


launched = environments.detect()
assert launched is not None, "no launcher environment detected"
before = {**_layout(), "model": idist.model_name(), "rank_zero_only": _on_rank_zero()}
try:
    idist.all_reduce(1)
except idist.DistributedError as err:
    before["collective_before_init"] = str(err)
idist.initialize("gloo", timeout=90)
after = {
    **_layout(),
    "model": idist.model_name(),
    "sum": idist.all_reduce(idist.get_rank() + 1),
    "gathered": idist.all_gather(f"r{idist.get_rank()}"),
}
if sys.argv[2:] == ["reinit"]:
    idist.finalize()
    idist.initialize("gloo", timeout=90)
    after["sum_again"] = idist.all_reduce(10 * (idist.get_rank() + 1))
idist.finalize()
master = [launched.master_addr, launched.master_port]
info = {"launcher": launched.launcher, "master": master, "before": before, "after": after}
with open(f"{sys.argv[1]}/rank{after['rank']}.json", "w") as out:  # stdout lines interleave
    json.dump(info, out)
