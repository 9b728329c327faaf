"""Run under torchrun: initialize from torchrun's environment, write each rank's layout as JSON
into the folder given as the first argument."""

import json
import sys

import distbridge as idist

idist.initialize("gloo")
info = {
    "rank": idist.get_rank(),
    "local_rank": idist.get_local_rank(),
    "world_size": idist.get_world_size(),
    "nproc_per_node": idist.get_nproc_per_node(),
    "nnodes": idist.get_nnodes(),
    "node_rank": idist.get_node_rank(),
    "gathered": idist.all_gather(f"r{idist.get_rank()}"),
    "sum": idist.all_reduce(idist.get_rank() + 1),
}
idist.finalize()
# One file per rank: the ranks share torchrun's stdout, where lines can interleave.
with open(f"{sys.argv[1]}/rank{info['rank']}.json", "w") as out:
    json.dump(info, out)
sys.exit(0)
