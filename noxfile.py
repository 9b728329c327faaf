"""Developer sessions: nox -s tests | lint | typecheck | docs | bench | examples.

Every session installs torch through ci/constraints.txt, so it gets the pinned CPU
wheel instead of a several-GB CUDA build.
"""

from __future__ import annotations

import nox
import tomllib

nox.options.sessions = ["tests", "lint", "typecheck", "docs"]
nox.options.reuse_existing_virtualenvs = True

CONSTRAINTS = ("-c", "ci/constraints.txt")


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
    """ruff: lint and formatting."""
    session.install(*[r for r in _extra("lint") if r.startswith("ruff")])
    session.run("ruff", "check", "src", "tests", "bench", "examples", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "bench", "examples", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install(*CONSTRAINTS, "-e", ".[lint]")
    session.run("mypy", "--strict", "src/distbridge")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site; any warning is an error."""
    session.install(*_extra("docs"))  # mkdocstrings reads src/ statically: no torch needed
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")


@nox.session
def bench(session: nox.Session) -> None:
    """Facade overhead against raw torch.distributed, in the same processes."""
    session.install(*CONSTRAINTS, "-e", ".")
    session.run("python", "bench/bench_core.py", *session.posargs)


@nox.session
def examples(session: nox.Session) -> None:
    """Run every example (two gloo processes)."""
    session.install(*CONSTRAINTS, "-e", ".")
    session.run("python", "examples/quickstart.py", "--nproc", "2")
