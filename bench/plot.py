"""Plot the benchmark results for the docs: docs/img/benchmarks.png.

Reads the JSON files the benches write with ``--json`` (whichever exist):

    python bench/bench_core.py --json bench/results/core.json
    python bench/bench_objects.py --json bench/results/objects.json
    python bench/bench_collectives.py --json bench/results/collectives.json
    python bench/plot.py [--results bench/results] [--out docs/img/benchmarks.png]

One panel per file, one horizontal bar per row:

- core and collectives: distbridge time / raw torch.distributed time (1.0: no overhead;
  lower is better), with each row's target (collectives: only the rows that have one);
- objects: torch.distributed's object collective time / distbridge's (higher: distbridge
  faster), with each row's target, and the peak memory rows when present.

``nox -s bench`` runs all of this. Needs matplotlib (the bench session installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def _size(size: int | None) -> str:
    if size is None:
        return ""
    if size >= MIB:
        return f" {size / MIB:.3g} MiB"
    return f" {size / 1024:.3g} KiB" if size >= 1024 else f" {size} B"


def _bars(
    ax: Any,
    labels: Sequence[str],
    values: Sequence[float],
    targets: Sequence[float | None],
    good_below: bool,
    title: str,
    xlabel: str,
) -> None:
    """Horizontal bars, green where the row meets its target, red where it misses, grey where
    it has none; the targets are drawn as black ticks."""
    ys = range(len(labels))
    colors = []
    for value, target in zip(values, targets, strict=True):
        if target is None:
            colors.append("#9e9e9e")
        else:
            ok = value <= target if good_below else value >= target
            colors.append("#3a7d44" if ok else "#c0392b")
    ax.barh(list(ys), values, color=colors, height=0.6)
    for y, target in zip(ys, targets, strict=True):
        if target is not None:
            ax.plot([target, target], [y - 0.4, y + 0.4], color="black", linewidth=1.5)
    for y, value in zip(ys, values, strict=True):
        ax.annotate(
            f"{value:.2f}",
            (value, y),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_yticks(list(ys), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, max([*values, *(t for t in targets if t is not None), 1.0]) * 1.18)
    ax.set_title(title, fontsize=9, loc="left")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)


def _describe(name: str, report: dict[str, Any]) -> str:
    kind = "quick" if report.get("quick") else "full"
    runs = report.get("runs", 1)
    times = f" x{runs} (medians)" if runs > 1 else ""
    return f"{name}: {kind} run{times}, {report.get('seconds', 0):.0f} s"


def panels(results: Path) -> list[tuple[dict[str, Any], str]]:
    """(the arguments of one `_bars` call, a description of its run) for each result file."""
    found: list[tuple[dict[str, Any], str]] = []
    core = results / "core.json"
    if core.exists():
        report = json.loads(core.read_text(encoding="utf-8"))
        rows = report["rows"]
        found.append(
            (
                {
                    "labels": [f"{r['name']}{_size(r['size'])}" for r in rows],
                    "values": [r["ratio"] for r in rows],
                    "targets": [r["target"] for r in rows],
                    "good_below": True,
                    "title": "Facade overhead: idist call vs the raw torch.distributed code",
                    "xlabel": "distbridge time / raw time (lower is better; | target)",
                },
                _describe("core", report),
            )
        )
    objects = results / "objects.json"
    if objects.exists():
        report = json.loads(objects.read_text(encoding="utf-8"))
        rows = report["speed"]
        found.append(
            (
                {
                    "labels": [f"{r['name']}, {r['world']} ranks{_size(r['size'])}" for r in rows],
                    "values": [r["raw_s"] / r["distbridge_s"] for r in rows],
                    "targets": [1 / r["target"] for r in rows],
                    "good_below": False,
                    "title": "Object collectives: distbridge vs torch.distributed's",
                    "xlabel": "torch time / distbridge time (higher: distbridge faster; | target)",
                },
                _describe("objects", report),
            )
        )
        memory = report.get("memory", [])
        if memory:
            found.append(
                (
                    {
                        "labels": [
                            f"{r['name']} ({r['library']}), {r['world']} ranks{_size(r['payload'])}"
                            for r in memory
                        ],
                        "values": [r["ratio"] for r in memory],
                        "targets": [r["target"] for r in memory],
                        "good_below": True,
                        "title": "Object collectives: peak memory growth of the worst rank",
                        "xlabel": "peak RSS growth / (payload x ranks) (lower is better)",
                    },
                    _describe("objects (memory)", report),
                )
            )
    collectives = results / "collectives.json"
    if collectives.exists():
        report = json.loads(collectives.read_text(encoding="utf-8"))
        rows = [r for r in report["rows"] if r["target"] is not None]  # not the "info" rows
        found.append(
            (
                {
                    "labels": [f"{r['name']}, {r['nproc']} ranks{_size(r['size'])}" for r in rows],
                    "values": [r["ratio"] for r in rows],
                    "targets": [r["target"] for r in rows],
                    "good_below": True,
                    "title": "reduce, gather, scatter, reduce_scatter, all_to_all vs baseline",
                    "xlabel": "distbridge time / baseline time (lower is better; | target)",
                },
                _describe("collectives", report),
            )
        )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Plot bench/results/*.json for the docs.")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "benchmarks.png")
    args = parser.parse_args(argv)

    found = panels(args.results)
    if not found:
        parser.error(
            f"no results in {args.results}: run python bench/bench_core.py --json "
            f"{args.results}/core.json first"
        )
    heights = [1.0 + 0.22 * len(spec["labels"]) for spec, _ in found]
    fig, axes = plt.subplots(
        len(found), 1, figsize=(9, sum(heights) + 0.6), height_ratios=heights, squeeze=False
    )
    for ax, (spec, _) in zip(axes[:, 0], found, strict=True):
        _bars(ax, **spec)
    runs = "; ".join(description for _, description in found)
    newest = max(f.stat().st_mtime for f in args.results.glob("*.json"))
    day = time.strftime("%Y-%m-%d", time.localtime(newest))
    fig.text(
        0.01,
        0.005,
        f"{day}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, gloo on one "
        f"machine. Green: meets its target; red: misses it; grey: no target.\n{runs}.",
        fontsize=7,
        color="#555555",
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len(found)} panels)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
