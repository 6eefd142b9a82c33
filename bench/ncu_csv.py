"""Reading Nsight Compute reports, shared by the limit studies (bench/w1d7_limit_ncu.py, bench/w2d456_limit_ncu.py).

ncu's raw page (``ncu -i REPORT --page raw --csv --print-units base``) is a CSV whose first row names the metrics,
whose second row gives their units and whose further rows are one profiled kernel each.
"""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

STALL = re.compile(r"smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)_per_issue_active\.ratio")


def number(text: str | None) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def read(path: Path) -> list[dict[str, str]]:
    """One dict a kernel, keyed ``metric [unit]`` (or the bare name where it has no unit)."""
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.startswith('"')]
    rows = list(csv.reader(lines))
    if len(rows) < 3:
        return []
    header, units = rows[0], rows[1]
    return [{f"{h} [{u}]" if u else h: v for h, u, v in zip(header, units, row, strict=False)} for row in rows[2:]]


def pick(row: dict[str, str], name: str) -> float | None:
    """The value of metric ``name`` in ``row``, whatever its unit; None where the row lacks it."""
    for key, value in row.items():
        if key == name or key.startswith(name + " ["):
            return number(value)
    return None


def stalls(row: dict[str, str]) -> dict[str, float]:
    """Each stall reason's warp-cycles per issued instruction ("selected" is issuing, not a stall)."""
    found = {}
    for key, value in row.items():
        match = STALL.match(key)
        if match and match.group(1) != "selected" and number(value) is not None:
            found[match.group(1)] = number(value)
    return found


def launch_fields(row: dict[str, str]) -> dict[str, float | None]:
    """What a kernel's launch holds and reaches: registers a thread, shared bytes a block, achieved occupancy."""
    return {
        "registers_per_thread": pick(row, "launch__registers_per_thread"),
        "shared_bytes_per_block": (pick(row, "launch__shared_mem_per_block_dynamic") or 0)
        + (pick(row, "launch__shared_mem_per_block_static") or 0),
        "achieved_occupancy_pct": pick(row, "sm__warps_active.avg.pct_of_peak_sustained_active"),
    }


def largest(values: dict[str, float], count: int = 3) -> dict[str, float]:
    return dict(sorted(values.items(), key=lambda item: -item[1])[:count])


def export(report: str | Path, raw_csv: Path, details: Path, heading: str = "") -> None:
    """Write a report's raw page to ``raw_csv`` and append its details page to ``details`` (under ``heading``)."""
    rep = f"{report}.ncu-rep"
    raw = subprocess.run(["ncu", "-i", rep, "--page", "raw", "--csv", "--print-units", "base"], capture_output=True,
                         text=True)
    raw_csv.write_text(raw.stdout, encoding="utf-8")
    page = subprocess.run(["ncu", "-i", rep, "--page", "details", "--print-units", "base"], capture_output=True,
                          text=True)
    with open(details, "a", encoding="utf-8") as handle:
        handle.write(f"===== {heading} =====\n{page.stdout}\n" if heading else page.stdout)


def print_table(table: dict[str, dict], columns: list[tuple[str, str, str]], name_width: int,
                cell_width: int) -> None:
    """One line a kernel: its label (padded to ``name_width``, never cut), its columns (key, title, format), its three
    largest stalls and its kernel's name."""
    print(f"{'kernel':<{name_width}}" + "".join(f"{title:>{cell_width}}" for _, title, _ in columns)
          + "  top stalls (cycles/issue)")
    for name, row in table.items():
        cells = "".join(f"{row[key]:>{cell_width}{fmt}}" if isinstance(row[key], float)
                        else f"{row[key]!s:>{cell_width}}" for key, _, fmt in columns)
        top = ", ".join(f"{k} {v:.2f}" for k, v in row["top_stalls_cycles_per_issue"].items())
        print(f"{name:<{name_width}}{cells}  {top}  [{row['kernel'][:70]}]")
