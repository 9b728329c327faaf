"""``python -m distbridge``: the command line (``info``, ``check``, ``why`` and ``where``; see
``docs/cli.md``)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from distbridge.cli.check import DEFAULT_SIZES

    parser = argparse.ArgumentParser(
        prog="python -m distbridge", description="Inspect and check a distributed setup."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = commands.add_parser(
        "info",
        help="the detected launcher, what initialize() would do, backends, versions, devices",
        description="Print where this process is and what initialize() would do; "
        "creates no distributed context.",
    )
    info.add_argument("--json", action="store_true", help="one JSON object (see docs/cli.md)")
    check = commands.add_parser(
        "check",
        help="a short timed all_reduce across the world: latency and bandwidth per size",
        description="Verify and time an all_reduce per message size across the detected world "
        "(under torchrun, srun, mpirun: every rank runs it, rank 0 prints), or across "
        "--nproc local workers.",
    )
    check.add_argument(
        "--backend", help="gloo, nccl, mpi, ... (default: nccl with CUDA, else gloo)"
    )
    check.add_argument("--nproc", type=int, help="spawn this many local workers")
    check.add_argument(
        "--sizes", default=DEFAULT_SIZES, help=f"bytes, comma-separated (default: {DEFAULT_SIZES})"
    )
    check.add_argument("--iters", type=int, default=10, help="timed rounds per size (default: 10)")
    check.add_argument(
        "--timeout", type=float, default=300.0, help="seconds before giving up (default: 300)"
    )
    check.add_argument("--json", action="store_true", help="one JSON object (see docs/cli.md)")
    check.set_defaults(usage_error=check.error)  # a bad value shows check's usage, not the top's
    why = commands.add_parser(
        "why",
        help="why a job hangs: the verdict from every rank's collective ledger",
        description="Name the rank at fault in a hung job: from the files its ranks wrote to "
        "DISTBRIDGE_HANG_DIR (DIR), or by asking the running job through its store "
        "(--store MASTER_ADDR:MASTER_PORT), or by the pid of one of its processes (--pid).",
    )
    source = why.add_mutually_exclusive_group(required=True)
    source.add_argument("directory", nargs="?", metavar="DIR", help="the DISTBRIDGE_HANG_DIR")
    source.add_argument("--store", metavar="HOST:PORT", help="the job's MASTER_ADDR:MASTER_PORT")
    source.add_argument(
        "--pid", type=int, help="a rank's pid, or a launcher's above the ranks (spawn, torchrun)"
    )
    why.add_argument(
        "--wait", type=float, default=3.0, help="seconds the ranks get to answer (default: 3)"
    )
    why.set_defaults(usage_error=why.error)
    where = commands.add_parser(
        "where",
        help="where each primitive is done, by computation model (file:line)",
        description="Print the table of the primitives (_do_*) and queries each computation "
        "model supplies, with the file and line of each, read from the classes.",
    )
    where.add_argument(
        "--update", metavar="PAGE", help="rewrite the table in this markdown page instead"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command, return its exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "info":
        from distbridge.cli import info

        return info.main(args.json)
    if args.command == "where":
        from distbridge.cli import where

        return where.main(args.update)
    usage_error = args.usage_error
    if args.command == "why":
        from distbridge.cli import why

        if not 0 <= args.wait < math.inf:  # NaN too
            usage_error(f"--wait must be a finite number of seconds >= 0, got {args.wait!r}")
        return why.main(args.directory, args.store, args.wait, args.pid)
    from distbridge.cli import check
    from distbridge.models._accelerator import default_backend

    if args.nproc is not None and args.nproc < 1:
        usage_error(f"--nproc must be at least 1, got {args.nproc!r}")
    if args.iters < 1:
        usage_error(f"--iters must be at least 1, got {args.iters!r}")
    if not 0 < args.timeout < math.inf:  # NaN too
        usage_error(f"--timeout must be a positive number of seconds, got {args.timeout!r}")
    try:
        sizes = check.parse_sizes(args.sizes)
    except ValueError as err:
        usage_error(str(err))
    backend = args.backend or default_backend()  # torch's for this accelerator, else gloo
    options = check.CheckOptions(backend, sizes, args.iters, args.nproc, args.timeout)
    return check.main(options, args.json)


if __name__ == "__main__":
    sys.exit(main())
