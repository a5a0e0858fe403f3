# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The Linux CPU-list grammar (``0-51,104-155``): the one reader and writer of it in the collection.

Used by ``topology`` (``CPU Affinity`` of ``nvidia-smi topo -m``) and by the workspace planner
(docker's ``--cpuset-cpus``). Grammar: comma-separated parts, each ``N`` or ``N-M`` with ``M >= N``,
ASCII digits only; spaces around a part are allowed. Anything else (``-31,64-95``, a cut capture) is
not a CPU list.
"""

from __future__ import annotations

EXAMPLE = "0-51,104-155"


def cpu_ranges(text: str) -> list[tuple[int, int]]:
    """``'0-3,8'`` -> ``[(0, 3), (8, 8)]`` without expanding them. Raises ValueError on anything else."""
    result: list[tuple[int, int]] = []
    for raw in str(text).split(","):
        part = raw.strip()
        low, sep, high = part.partition("-")
        if not ascii_digits(low) or (sep and not ascii_digits(high)):
            raise ValueError(f"{text!r} is not a CPU list such as {EXAMPLE!r}")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise ValueError(f"{text!r}: range {part} runs backwards")
        result.append((first, last))
    return result


def is_cpu_list(text: str) -> bool:
    """True for a valid CPU list (see the module docstring); never raises."""
    try:
        return bool(text) and bool(cpu_ranges(text))
    except ValueError:
        return False


def parse_cpu_list(text: str) -> list[int]:
    """``'0-3,8,10-11'`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (sorted, no duplicates). Raises ValueError."""
    cpus: set[int] = set()
    for first, last in cpu_ranges(text):
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def ranges(cpus: list[int]) -> list[list[int]]:
    """Split a CPU list into runs of consecutive CPUs."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return runs


def format_cpu_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``'0-3,8'`` (the form docker's --cpuset-cpus takes)."""
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in ranges(cpus))


def ascii_digits(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` alone takes ``²``, which ``int`` refuses); topology reads labels so."""
    return text.isascii() and text.isdigit()
