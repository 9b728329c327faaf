"""Run with a mode: ``spawn <out.json>`` calls ``idist.spawn`` on the registered backend
(tests/distributed/plugin_backend.py) with 2 processes and writes their reports; under
torchrun, ``initialize <folder>`` calls ``idist.initialize`` on it and writes rank<r>.json."""

import json
import sys

import distbridge as idist
from tests.distributed.plugin_backend import NAME, report

if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "spawn":
        results = idist.spawn(NAME, report, nproc_per_node=2, job_timeout=90)
        with open(out, "w") as f:
            json.dump(results, f)
    else:
        idist.initialize(NAME)
        info = report(idist.get_local_rank())
        idist.finalize()
        info["after_finalize"] = idist.model_name()
        with open(f"{out}/rank{info['rank']}.json", "w") as f:
            json.dump(info, f)
