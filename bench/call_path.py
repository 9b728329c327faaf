"""The calls from ``idist.all_reduce`` to the engine on gloo (a world of one), counted.

For issue 26's "shorter path": prints, for the first all_reduce of a kind of tensor and for a
repeated one, how many distbridge functions run and over how many files, and with ``-v`` the
path itself. Not a timing: ``bench_core.py`` times the same calls against raw torch.

    $ python bench/call_path.py [-v]
"""

from __future__ import annotations

import argparse
import itertools
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

import distbridge as idist

MARK = "/distbridge/"


def calls_of(fn: Callable[[], Any]) -> list[tuple[str, str]]:
    """(file under distbridge/, function) of every distbridge function ``fn`` runs, in order."""
    calls: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        path = frame.f_code.co_filename
        if event == "call" and MARK in path:
            calls.append((path.rsplit(MARK, 1)[1], frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def describe(label: str, calls: list[tuple[str, str]], verbose: bool) -> str:
    files = [f for f, _ in calls]
    changes = sum(1 for a, b in itertools.pairwise(files) if a != b)
    line = f"{label}: {len(calls)} calls over {len(set(files))} files, {changes} file changes"
    if verbose:
        line += "\n    " + " -> ".join(f"{f}:{name}" for f, name in calls)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="print the path")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    idist.initialize("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        x = torch.ones(4)
        print(describe("first", calls_of(lambda: idist.all_reduce(x)), args.verbose))
        print(describe("repeated", calls_of(lambda: idist.all_reduce(x)), args.verbose))
    finally:
        idist.finalize()


if __name__ == "__main__":
    main()
