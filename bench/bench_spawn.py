"""What a whole spawned job costs: ``idist.spawn`` (warm starter) against raw torch.multiprocessing.

The job: 2 gloo workers start, join one process group, run one all_reduce and send their
results back to the parent, which waits until both have ended.

- raw: ``torch.multiprocessing.start_processes(..., start_method="spawn")``; each worker
  runs ``init_process_group("gloo", init_method="file://...")``, one all_reduce, puts its
  result on a queue and destroys the group.
- first: the first ``idist.spawn("gloo", job, nproc_per_node=2)`` of a process (it starts
  the warm starter: a fork server that imports torch and distbridge).
- later: the second and later spawns of the same process (forks of that server).

Every run is a fresh Python process, so each has a true first spawn. A run times
raw, first, raw, then ``--later`` times later + raw; the ratios divide by that run's median
raw job. The noise row is raw / raw within a run (the first raw job against the median of
the others): the spread a ratio cannot resolve. Targets: first <= 1.0x raw, later <= 0.1x raw
and under 0.15 s.

With ``--notebook`` each run is a fresh Jupyter kernel (nbclient + ipykernel, the test
extra) instead, and the job's function is defined in a notebook cell (sent by value).

Usage (from the repository root)::

    python bench/bench_spawn.py [--runs 5] [--later 5] [--notebook]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

FIRST_TARGET, LATER_TARGET, LATER_SECONDS = 1.0, 0.1, 0.15


def job(local_rank: int) -> float:
    """The distbridge job: one all_reduce, its result back."""
    import distbridge as idist

    return float(idist.all_reduce(torch.ones(1) * (local_rank + 1)))


def raw_worker(rank: int, init_file: str, results: Any) -> None:
    """The raw job's worker: the same work written against torch.distributed."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    value = torch.ones(1) * (rank + 1)
    dist.all_reduce(value)
    results.put((rank, float(value)))
    dist.destroy_process_group()


def raw_job() -> float:
    """Seconds of one raw torch.multiprocessing job, results collected."""
    context = torch_mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as directory:
        start = time.perf_counter()
        results = context.SimpleQueue()
        torch_mp.start_processes(
            raw_worker,
            args=(os.path.join(directory, "init"), results),
            nprocs=2,
            start_method="spawn",
        )
        values = dict(results.get() for _ in range(2))
        seconds = time.perf_counter() - start
    assert values == {0: 3.0, 1: 3.0}, values
    return seconds


def distbridge_job() -> float:
    """Seconds of one ``idist.spawn`` job, results returned."""
    import distbridge as idist

    start = time.perf_counter()
    values = idist.spawn("gloo", job, nproc_per_node=2)
    seconds = time.perf_counter() - start
    assert values == [3.0, 3.0], values
    return seconds


def one_run(later: int) -> dict[str, Any]:
    """One fresh process's timings (the ``--child`` side)."""
    raws = [raw_job()]
    first = distbridge_job()
    raws.append(raw_job())
    laters = []
    for _ in range(later):
        laters.append(distbridge_job())
        raws.append(raw_job())
    return {"raw": raws, "first": first, "later": laters}


_NOTEBOOK_CELLS = (
    "import sys, time, json\nsys.path.insert(0, {bench_dir!r})\nimport bench_spawn\n"
    "import distbridge as idist\nimport torch",
    # the job's function is the notebook's own: it travels by value
    "def job(local_rank):\n    return float(idist.all_reduce(torch.ones(1) * (local_rank + 1)))"
    "\n\ndef timed():\n    start = time.perf_counter()\n"
    "    assert idist.spawn('gloo', job, nproc_per_node=2) == [3.0, 3.0]\n"
    "    return time.perf_counter() - start",
    "raws = [bench_spawn.raw_job()]\nfirst = timed()\nraws.append(bench_spawn.raw_job())\n"
    "laters = []\nfor _ in range({later}):\n    laters.append(timed())\n"
    "    raws.append(bench_spawn.raw_job())\n"
    "print(json.dumps({{'raw': raws, 'first': first, 'later': laters}}))",
)


def notebook_run(later: int) -> dict[str, Any]:
    """One run in a fresh Jupyter kernel (nbclient + ipykernel), the job defined in a cell."""
    import nbclient
    import nbformat

    bench_dir = os.path.dirname(os.path.abspath(__file__))
    cells = [
        nbformat.v4.new_code_cell(cell.format(bench_dir=bench_dir, later=later))
        for cell in _NOTEBOOK_CELLS
    ]
    notebook = nbformat.v4.new_notebook(cells=cells)
    with tempfile.TemporaryDirectory() as directory:
        spec = os.path.join(directory, "kernels", "bench")
        os.makedirs(spec)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        with open(os.path.join(spec, "kernel.json"), "w") as file:
            json.dump({"argv": argv, "display_name": "bench", "language": "python"}, file)
        os.environ["JUPYTER_PATH"] = directory
        nbclient.NotebookClient(notebook, kernel_name="bench", timeout=900).execute()
    text = "".join(out.get("text", "") for out in notebook.cells[-1].outputs)
    return dict(json.loads(text.splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes (runs)")
    parser.add_argument("--later", type=int, default=5, help="later spawns per run")
    parser.add_argument(
        "--notebook", action="store_true", help="run each run in a Jupyter kernel (nbclient)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(one_run(options.later)))
        return 0
    rows = []
    for _ in range(options.runs):
        if options.notebook:
            rows.append(notebook_run(options.later))
            continue
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--later", str(options.later)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(done.stdout.splitlines()[-1]))
    return report(rows)


def report(rows: list[dict[str, Any]]) -> int:
    """Print one line per run and the medians; exit status 1 when a target is missed."""
    print(f"{'run':>4} {'raw s':>7} {'first s':>8} {'later s':>8} {'first/raw':>10} "
          f"{'later/raw':>10} {'noise raw/raw':>14}")  # fmt: skip
    firsts, laters, noises, raw_medians, later_seconds = [], [], [], [], []
    for index, row in enumerate(rows):
        raw = statistics.median(row["raw"])
        later = statistics.median(row["later"])
        noise = row["raw"][0] / statistics.median(row["raw"][1:])
        firsts.append(row["first"] / raw)
        laters.append(later / raw)
        noises.append(noise)
        raw_medians.append(raw)
        later_seconds.append(later)
        print(f"{index:>4} {raw:>7.3f} {row['first']:>8.3f} {later:>8.3f} "
              f"{firsts[-1]:>9.2f}x {laters[-1]:>9.3f}x {noise:>13.2f}x")  # fmt: skip
    first_ratio, later_ratio = statistics.median(firsts), statistics.median(laters)
    later_s = statistics.median(later_seconds)
    print(f"median: raw {statistics.median(raw_medians):.3f} s, first {first_ratio:.2f}x raw "
          f"(target <= {FIRST_TARGET}x), later {later_ratio:.3f}x raw (target <= {LATER_TARGET}x) "
          f"= {later_s:.3f} s (target < {LATER_SECONDS} s); noise raw/raw "
          f"{min(noises):.2f}x .. {max(noises):.2f}x")  # fmt: skip
    ok = first_ratio <= FIRST_TARGET and later_ratio <= LATER_TARGET and later_s < LATER_SECONDS
    print("result:", "pass" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
