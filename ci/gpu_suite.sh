#!/usr/bin/env bash
# The GPU suite in one command (issue 36), for a bare GPU machine: nothing is installed, the
# repository root is the working directory, PYTHONPATH=src:. finds distbridge and the tests.
#
#   bash ci/gpu_suite.sh             # the gpu-marked tests, then bench/bench_gpu.py (NCCL)
#   bash ci/gpu_suite.sh --dry-run   # anywhere, no GPU needed: collect those tests, and run
#                                    # the bench on the CPU (gloo) to show that both work
#
# It prints Python, torch, CUDA, NCCL and the GPU, runs `python -m pytest -m gpu` (a time
# limit per test: pytest-timeout where installed, else ci/pytest_deadline.py), then the
# bench, and writes to $OUT if set, else ./gpu-suite-out/: gpu-suite.log (everything
# printed), summary.md (date, GPU, versions, passed / failed / skipped, the bench table, a
# row for docs/benchmarks.md), environment.json, junit.xml, bench.md, bench.json.
# Without a CUDA GPU (and without --dry-run) it says so and exits 4 at once.
#
# Budget: under 8 minutes on one H100 / H200. Overridable in seconds:
#   GPU_SUITE_PYTEST_SECONDS (350, the whole pytest run), GPU_SUITE_TEST_SECONDS (240, one
#   test), GPU_SUITE_BENCH_SECONDS (80, the bench). PYTHON picks the interpreter (python).
# Exit status: 0 when every step passed; else the first failing step's (3: a module the
# suite needs is missing, 4: no GPU, pytest's own status, 124: a step ran out of time).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
DRY_RUN=0
case "${1:-}" in
    "") ;;
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "gpu_suite.sh: unknown argument ${1} (try --help)" >&2; exit 2 ;;
esac

OUT_DIR="${OUT:-$PWD/gpu-suite-out}"
PYTHON="${PYTHON:-python}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
PYTEST_SECONDS="${GPU_SUITE_PYTEST_SECONDS:-350}"
BENCH_SECONDS="${GPU_SUITE_BENCH_SECONDS:-80}"
export GPU_SUITE_TEST_SECONDS="${GPU_SUITE_TEST_SECONDS:-240}"
export PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"

main() {
    local started=$SECONDS status=0 pytest_status bench_status
    echo "== distbridge GPU suite: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
    echo "   $( ((DRY_RUN)) && echo 'dry run (collect, bench on the CPU)' || echo 'full run')," \
        "output in $OUT_DIR"

    echo "== environment"
    DRY_RUN=$DRY_RUN OUT_DIR="$OUT_DIR" "$PYTHON" - <<'EOF'
import importlib, importlib.metadata, json, os, platform, sys

import torch
import torch.distributed as dist

needed = ("torch", "numpy", "typing_extensions", "cloudpickle", "pytest", "hypothesis")
dists = {"pytest_timeout": "pytest-timeout", "ignite": "pytorch-ignite"}
modules, missing = {}, []
for name in (*needed, "pytest_timeout", "ignite"):
    try:
        version = getattr(importlib.import_module(name), "__version__", None)
    except ImportError:
        modules[name] = None
        missing += [name] if name in needed else []
        continue
    try:
        version = version or importlib.metadata.version(dists.get(name, name))
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    modules[name] = str(version)
cuda = torch.cuda.is_available()
nccl = "-"
if cuda and dist.is_available() and dist.is_nccl_available():
    found = torch.cuda.nccl.version()
    nccl = ".".join(map(str, found)) if isinstance(found, tuple) else str(found)
env = {
    "python": platform.python_version(),
    "torch": torch.__version__,
    "cuda": torch.version.cuda or "-",
    "nccl": nccl,
    "gpus": torch.cuda.device_count() if cuda else 0,
    "gpu": torch.cuda.get_device_name(0) if cuda else "none",
    "capability": ".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else "-",
    "modules": modules,
}
for key in ("python", "torch", "cuda", "nccl", "gpus", "gpu", "capability"):
    print(f"   {key:<11} {env[key]}")
print("   modules    " + ", ".join(f"{k} {v or 'MISSING'}" for k, v in modules.items()))
with open(os.path.join(os.environ["OUT_DIR"], "environment.json"), "w") as f:
    json.dump(env, f, indent=2)
if missing:
    print(f"gpu_suite.sh: the suite needs {', '.join(missing)}, not importable here")
    sys.exit(3)
if not cuda and os.environ["DRY_RUN"] != "1":
    print("gpu_suite.sh: no CUDA GPU here (torch.cuda.is_available() is False); nothing "
          "to run. `bash ci/gpu_suite.sh --dry-run` checks the suite without one.")
    sys.exit(4)
EOF
    status=$?
    if ((status)); then
        return $status
    fi
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader |
            sed 's/^/   nvidia-smi /'
    fi

    local args=(-m gpu -p ci.pytest_deadline -p no:cacheprovider)
    # distbridge is not installed there: its pytest plugin comes by name (installed, its
    # entry point loads it already, and a second -p would fail).
    if ! "$PYTHON" -c "import importlib.metadata as m, sys; sys.exit(not any(
            e.value == 'distbridge_pytest' for e in m.entry_points(group='pytest11')))"; then
        args+=(-p distbridge_pytest)
    fi
    if ((DRY_RUN)); then
        echo "== pytest: collecting the gpu-marked tests"
        "$PYTHON" -m pytest "${args[@]}" --collect-only -q
        pytest_status=$?
    else
        echo "== pytest -m gpu (at most ${PYTEST_SECONDS} s; ${GPU_SUITE_TEST_SECONDS} s a test)"
        rm -f "$OUT_DIR/junit.xml"  # an earlier run's must not count
        timeout --signal=INT --kill-after=20 "$PYTEST_SECONDS" \
            "$PYTHON" -m pytest "${args[@]}" -v --durations=15 --junitxml="$OUT_DIR/junit.xml"
        pytest_status=$?
        if ((pytest_status == 124)); then
            echo "gpu_suite.sh: pytest stopped after ${PYTEST_SECONDS} s (GPU_SUITE_PYTEST_SECONDS)"
        fi
    fi

    echo "== bench/bench_gpu.py (at most ${BENCH_SECONDS} s)"
    local bench_args=(--markdown "$OUT_DIR/bench.md" --json "$OUT_DIR/bench.json")
    ((DRY_RUN)) && bench_args+=(--cpu)
    rm -f "$OUT_DIR/bench.md"
    timeout --kill-after=10 "$BENCH_SECONDS" "$PYTHON" bench/bench_gpu.py "${bench_args[@]}"
    bench_status=$?

    echo "== summary"
    DRY_RUN=$DRY_RUN OUT_DIR="$OUT_DIR" PYTEST_STATUS=$pytest_status BENCH_STATUS=$bench_status \
        WALL=$((SECONDS - started)) "$PYTHON" - <<'EOF'
import datetime, json, os, re
import xml.etree.ElementTree as ET

out = os.environ["OUT_DIR"]
dry = os.environ["DRY_RUN"] == "1"
env = json.load(open(os.path.join(out, "environment.json")))
log = open(os.path.join(out, "gpu-suite.log"), errors="replace").read()
counts = {}
junit = os.path.join(out, "junit.xml")
if dry:
    found = re.findall(r"(\d+)(?:/\d+)? tests? collected", log)
    errors = re.findall(r"(\d+) errors? during collection", log)
    counts = {"collected": int(found[-1]) if found else 0,
              "collection errors": int(errors[-1]) if errors else 0}
elif os.path.exists(junit):
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    total, failed, errors, skipped = (
        int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    counts = {"passed": total - failed - errors - skipped, "failed": failed,
              "errors": errors, "skipped": skipped}
else:  # killed before pytest wrote its report: count its verbose lines
    for key, outcome in (("passed", "PASSED"), ("failed", "FAILED"), ("errors", "ERROR"),
                         ("skipped", "SKIPPED")):
        counts[key] = len(re.findall(rf"::\S+ {outcome}\b", log))
shown = ", ".join(f"{v} {k}" for k, v in counts.items())
bench_file = os.path.join(out, "bench.md")
bench = open(bench_file).read() if os.path.exists(bench_file) else "(no bench table: it failed)\n"
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
statuses = f"pytest exit {os.environ['PYTEST_STATUS']}, bench exit {os.environ['BENCH_STATUS']}"
kind = "dry run (collection, bench on the CPU)" if dry else "full run"
row = (f"| {date} | {env['gpu']} | {env['torch']} (CUDA {env['cuda']}) | {env['nccl']} | "
       f"{shown} | {int(os.environ['WALL']) // 60} min {int(os.environ['WALL']) % 60} s |")
summary = f"""# GPU suite: {kind}

- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}
- GPU: {env['gpu']} ({env['gpus']} visible, compute capability {env['capability']})
- Python {env['python']}, torch {env['torch']}, CUDA {env['cuda']}, NCCL {env['nccl']}
- tests (`pytest -m gpu`): {shown}
- {statuses}; wall {os.environ['WALL']} s

## bench/bench_gpu.py

{bench}
## Row for docs/benchmarks.md ("GPU suite")

{row}
"""
open(os.path.join(out, "summary.md"), "w").write(summary)
print(summary)
EOF
    echo "== done in $((SECONDS - started)) s; files in $OUT_DIR"
    if ((pytest_status)); then
        return $pytest_status
    fi
    return $bench_status
}

main 2>&1 | tee "$OUT_DIR/gpu-suite.log"
exit "${PIPESTATUS[0]}"
