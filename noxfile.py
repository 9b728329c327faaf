"""Sessions: nox -s tests | lint | typecheck | docs | bench | examples | xla | horovod | gpu.

Every session installs torch through ci/constraints.txt, so it gets the pinned version. On
CI's machines that is a CPU wheel from a local wheel folder; elsewhere, install a CPU torch
first (README: Quick start) or pip takes PyPI's default CUDA build.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nox
import tomllib

nox.options.sessions = ["tests", "lint", "typecheck", "docs"]
nox.options.reuse_existing_virtualenvs = True

CONSTRAINTS = ("-c", "ci/constraints.txt")
XLA_CONSTRAINTS = ("-c", "ci/constraints-xla.txt")


def _extra(name: str) -> list[str]:
    """The requirements of one optional-dependency group of pyproject.toml."""
    with open("pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["optional-dependencies"][name])


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite (unit and real multi-process tests)."""
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and formatting) and import-linter (the layers of docs/architecture.md)."""
    session.install(*[r for r in _extra("lint") if r.startswith(("ruff", "import-linter"))])
    session.run("ruff", "check", "src", "tests", "bench", "examples", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "bench", "examples", "noxfile.py")
    # grimp reads the source files; nothing is imported, so no torch is needed here
    session.run("lint-imports", env={"PYTHONPATH": "src"})


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package, its pytest plugin (which needs pytest's types) and
    tests/typing (the types a user's code sees from the facade's overloads)."""
    session.install(*CONSTRAINTS, "-e", ".[lint,test]")
    session.run("mypy", "--strict", "src/distbridge", "src/distbridge_pytest.py", "tests/typing")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site; any warning is an error."""
    session.install(*_extra("docs"))  # mkdocstrings reads src/ statically: no torch needed
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")


@nox.session
def bench(session: nox.Session) -> None:
    """The benches (JSON in bench/results/), then the docs' plot docs/img/benchmarks.png.

    Arguments go to every bench: `nox -s bench -- --quick` for a shorter run.
    """
    session.install(*CONSTRAINTS, "-e", ".", "matplotlib")
    Path("bench/results").mkdir(parents=True, exist_ok=True)
    for name in ("core", "objects", "collectives", "debug", "soak"):
        out = f"bench/results/{name}.json"
        session.run("python", f"bench/bench_{name}.py", "--json", out, *session.posargs)
    session.run("python", "bench/plot.py")


@nox.session
def examples(session: nox.Session) -> None:
    """Run every example (two gloo processes), under spawn and torchrun, and a resumed run."""
    session.install(*CONSTRAINTS, "-e", ".[examples]")
    checkpoint = f"{session.create_tmp()}/train_mlp.pt"
    torchrun = ("python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
    session.run("python", "examples/quickstart.py", "--nproc", "2")
    session.run("python", "examples/train_mlp.py", "--epochs", "2", "--checkpoint", checkpoint)
    session.run("python", "examples/train_mlp.py", "--resume", "--checkpoint", checkpoint)
    fsdp = (
        "--strategy",
        "fsdp",
        "--compile",
        "--epochs",
        "1",
        "--checkpoint",
        f"{checkpoint}.fsdp",
    )
    session.run("python", "examples/train_mlp.py", *fsdp)
    second = ("--checkpoint", f"{checkpoint}.torchrun")
    session.run(*torchrun, "examples/train_mlp.py", "--launcher", "torchrun", *second)
    session.run("python", "examples/evaluate.py", "--checkpoint", checkpoint)
    session.run(*torchrun, "examples/evaluate.py", "--launcher", "torchrun")


@nox.session
def xla(session: nox.Session) -> None:
    """The XLA model on the real XLA CPU device, in its own venv (torch 2.9.0 + torch_xla 2.9.0).

    The venv is about 7 GB and takes a few minutes to build; nox reuses it on the same machine.
    Runs the XLA tests, the unit tests on torch 2.9, then the XLA benchmark row.
    """
    session.install(*XLA_CONSTRAINTS, "torch", "torch_xla", "-e", ".[test]")
    session.env["PJRT_DEVICE"] = "CPU"
    paths = ("tests/distributed/test_xla.py", "tests/distributed/test_differential_engines.py")
    paths += ("tests/unit",)
    session.run("python", "-m", "pytest", *paths, *session.posargs)
    session.run("python", "bench/bench_xla.py")


@nox.session
def horovod(session: nox.Session) -> None:
    """Horovod for real: build Horovod 0.28.1 from its sdist (Gloo; MPI too when Open MPI's
    headers are installed), then the Horovod tests under horovodrun and the benchmark row.

    The first build takes a few minutes; ci/build_horovod.sh caches the wheel in
    ~/.cache/distbridge/wheels, so later runs on the same machine skip it.
    """
    build = ("cloudpickle", "psutil", "pyyaml", "packaging", "cffi", "numpy", "setuptools", "wheel")
    session.install(*CONSTRAINTS, "torch", *build)
    if shutil.which("mpicc"):  # Open MPI's headers: Horovod gets MPI too, tested under mpirun
        session.install("mpi4py")  # starts MPI so that it outlives hvd.shutdown()
    session.run("bash", "ci/build_horovod.sh", f"{session.bin}/python", external=True)
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run(
        "python", "-m", "pytest", "tests/distributed/test_horovod.py",
        "tests/distributed/test_horovod_fail_together.py",
        "tests/distributed/test_horovod_hang.py",
        "tests/distributed/test_mismatch_verdict.py",
        "tests/distributed/test_differential_engines.py",
        "tests/distributed/test_launchers.py::test_horovodrun_gloo_initializes_native_gloo",
        "tests/distributed/test_preemption_launchers.py::test_horovodrun_one_rank_signalled",
        *session.posargs,
    )  # fmt: skip
    # The training example under the real horovodrun (Gloo controller, 2 local processes).
    checkpoint = f"{session.create_tmp()}/train_mlp_horovod.pt"
    example = ("python", "examples/train_mlp.py", "--launcher", "horovodrun", "--epochs", "2")
    session.run(
        "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", *example,
        "--checkpoint", checkpoint,
    )  # fmt: skip
    session.run("python", "bench/bench_horovod.py")


@nox.session
def gpu(session: nox.Session) -> None:
    """The GPU suite, ci/gpu_suite.sh (docs/benchmarks.md, "GPU suite"), in a venv with the
    test extra and PyPI's default (CUDA) build of torch: `nox -s gpu`, or `nox -s gpu --
    --dry-run` without a GPU. On a GPU machine without network, run the script itself.
    """
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run("bash", "ci/gpu_suite.sh", *session.posargs, external=True)
