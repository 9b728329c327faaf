"""SLURM host lists: ``node[001-003,7],gpu-[01-02]-ib`` to the host names they stand for.

The syntax, as ``scontrol show hostnames`` reads it:

- hosts are separated by commas outside brackets;
- ``[...]`` holds a comma list of numbers and ranges ``lo-hi``; every number of a range is
  printed at least as wide as ``lo`` (``[08-10]`` is ``08, 09, 10``; ``[7]`` is ``7``);
- a host may hold several bracket groups: ``a[1-2]-b[3-4]`` is ``a1-b3, a1-b4, a2-b3,
  a2-b4``. The last group varies fastest; before it, SLURM varies the first group, then the
  second, and so on (``a[1-2]b[3-4]c[5-6]`` starts ``a1b3c5, a1b3c6, a2b3c5, a2b3c6, a1b4c5``),
  and so does this module, so that the order is the one the job's tasks see;
- empty entries (``n1,,n2``) are skipped, as SLURM does.
"""

from __future__ import annotations

import itertools

__all__ = ["expand_hostlist"]


def expand_hostlist(hostlist: str) -> list[str]:
    """Return the host names in ``hostlist``, in order, duplicates kept.

    Examples:
        >>> expand_hostlist("node[001-003,7],gpu-[01-02]")
        ['node001', 'node002', 'node003', 'node7', 'gpu-01', 'gpu-02']

    Raises:
        ValueError: unbalanced or nested brackets, or a bracket entry that is not a number
            or a range ``lo-hi`` with ``lo <= hi``; the message names the host list.
    """
    hosts: list[str] = []
    for item in _split_top_level(hostlist):
        if item:
            hosts.extend(_expand_item(item, hostlist))
    return hosts


def _split_top_level(hostlist: str) -> list[str]:
    """Split at the commas that are not inside brackets; check that brackets balance."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(hostlist):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(hostlist[start:i].strip())
            start = i + 1
        if depth not in (0, 1):
            raise ValueError(f"Host list {hostlist!r} has unbalanced or nested brackets.")
    if depth != 0:
        raise ValueError(f"Host list {hostlist!r} has an unclosed '['.")
    items.append(hostlist[start:].strip())
    return items


def _expand_item(item: str, hostlist: str) -> list[str]:
    """One host pattern (text with bracket groups) to its names, in SLURM's order."""
    texts: list[str] = []
    groups: list[list[str]] = []
    rest = item
    while "[" in rest:
        text, _, rest = rest.partition("[")
        group, _, rest = rest.partition("]")
        texts.append(text)
        groups.append(_expand_group(group, hostlist))
    if not groups:
        return [item]
    # Slowest to fastest: groups k-1, ..., 1, then group k (SLURM's order, see the module doc).
    order = [*range(len(groups) - 2, -1, -1), len(groups) - 1]
    names = []
    for picked in itertools.product(*(groups[i] for i in order)):
        numbers = dict(zip(order, picked, strict=True))
        names.append("".join(t + numbers[i] for i, t in enumerate(texts)) + rest)
    return names


def _expand_group(group: str, hostlist: str) -> list[str]:
    """``001-003,7`` to ``['001', '002', '003', '7']``."""
    numbers: list[str] = []
    for part in group.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(
                f"Host list {hostlist!r}: {part!r} in [{group}] is not a number or a range lo-hi."
            )
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"Host list {hostlist!r}: range {part!r} runs backwards.")
        numbers.extend(str(n).zfill(len(lo)) for n in range(first, last + 1))
    return numbers
