"""Shared-memory banks, computed on the host: which bank each thread of a warp touches, and the conflicts.

Shared memory is split into 32 banks, each 4 bytes wide: the 4-byte word at word address ``w`` sits
in bank ``w % 32``. One warp's access is served in as many passes ("ways") as the largest number of
*different* words it needs from any one bank; threads that read the very same word share it (a
broadcast), so they cost no extra pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported where a picture is drawn: a grading run draws none
    from matplotlib.figure import Figure


BANKS = 32
WORD_BYTES = 4
WARP = 32


def bank(word: int) -> int:
    """The bank holding 4-byte word ``word`` of shared memory."""
    return word % BANKS


def column_words(row_words: int, column: int = 0, threads: int = WARP) -> list[int]:
    """Word addresses a warp touches when thread t reads ``tile[t][column]`` (``row_words`` words per row)."""
    return [t * row_words + column for t in range(threads)]


def row_words_of(row: int, row_words: int, threads: int = WARP) -> list[int]:
    """Word addresses a warp touches when thread t reads ``tile[row][t]``."""
    return [row * row_words + t for t in range(threads)]


def ways(words: Sequence[int]) -> int:
    """Passes one warp access needs: the most distinct words any single bank must deliver."""
    per_bank: dict[int, set[int]] = {}
    for word in words:
        per_bank.setdefault(bank(word), set()).add(word)
    return max((len(found) for found in per_bank.values()), default=0)


def threads_per_bank(words: Sequence[int]) -> list[int]:
    """How many threads of the access land in each of the 32 banks."""
    counts = [0] * BANKS
    for word in words:
        counts[bank(word)] += 1
    return counts


def plot_column_read(row_words: Sequence[int], rows: int = WARP, column: int = 0) -> Figure:
    """One panel per layout: the tile laid out in shared memory (x: bank, y: 128-byte line of all 32 banks),
    the words a warp reads in one column of the tile marked with the reading thread's number, and below,
    how many threads each bank serves."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(row_words), figsize=(5.2 * len(row_words), 7.2),
                             gridspec_kw={"height_ratios": [3, 1]}, squeeze=False)
    for i, width in enumerate(row_words):
        words = column_words(width, column, rows)
        lines = -(-rows * width // BANKS)
        grid = np.full((lines, BANKS), np.nan)
        for word in range(rows * width):  # every word of the tile, shaded by whether it is padding
            grid[word // BANKS, word % BANKS] = -1.0 if word % width >= WARP else -2.0
        top = axes[0][i]
        top.imshow(grid, cmap="Greys", vmin=-3, vmax=0, aspect="auto", interpolation="nearest")
        for thread, word in enumerate(words):
            top.add_patch(plt.Rectangle((word % BANKS - 0.5, word // BANKS - 0.5), 1, 1, color="tab:red", alpha=0.8))
            top.text(word % BANKS, word // BANKS, str(thread), ha="center", va="center", fontsize=5.5, color="white")
        pad, passes = width - WARP, ways(words)
        verdict = f"{passes}-way conflict: {passes} passes" if passes > 1 else "no conflict: one pass"
        padded = f" (padded by {pad}, dark)" if pad else ""
        top.set_title(f"float tile[{rows}][{width}]{padded}: warp reads column {column}\n{verdict}", fontsize=9)
        top.set_xlabel("bank")
        top.set_ylabel("128-byte line of shared memory")
        top.set_xticks(range(0, BANKS, 4))
        counts = threads_per_bank(words)
        bottom = axes[1][i]
        bottom.bar(range(BANKS), counts, color="tab:red")
        bottom.set_xlim(-0.5, BANKS - 0.5)
        bottom.set_ylim(0, max(counts) + 1)
        bottom.set_xlabel("bank")
        bottom.set_ylabel("threads served")
        bottom.set_xticks(range(0, BANKS, 4))
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------------
# Nsight Compute's bank-conflict counters (a GPU and permission to read its counters needed).

NCU_METRICS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum")


def launch_transposes(job: dict) -> None:
    """Launch each kernel of ``job`` once on an n x n matrix (what ncu profiles; see ``ncu_counters``).

    ``job``: {"n": int, "tile": int, "block": [x, y], "kernels": [{"name", "source", "options"}]}; each kernel
    takes (const float* in, float* out, int rows, int cols) and covers one tile x tile tile per block.
    """
    import torch

    from course import cuda

    n, tile = int(job["n"]), int(job["tile"])
    x = torch.randn(n, n, device="cuda")
    out = torch.empty_like(x)
    for kernel in job["kernels"]:
        function = cuda.compile(kernel["source"], tuple(kernel["options"])).get_function(kernel["name"])
        function((cuda.cdiv(n, tile), cuda.cdiv(n, tile)), tuple(job["block"]),
                 (x, out, np.int32(n), np.int32(n)))
    torch.cuda.synchronize()


def ncu_counters(job: dict, ncu: str = "ncu", timeout: float = 300.0) -> dict[str, dict[str, float]]:
    """Kernel name -> {metric: value} of ``NCU_METRICS`` for one launch of each kernel of ``job``.

    Raises RuntimeError saying why when ncu cannot run or cannot read the counters.
    """
    import csv
    import io
    import json
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    found = shutil.which(ncu)
    if found is None:
        raise RuntimeError("Nsight Compute (ncu) is not on PATH")
    with tempfile.TemporaryDirectory(prefix="course-ncu-") as folder:
        path = Path(folder) / "job.json"
        path.write_text(json.dumps(job), encoding="utf-8")
        names = "|".join(k["name"] for k in job["kernels"])
        ran = subprocess.run([found, "--csv", "--metrics", ",".join(NCU_METRICS), "--kernel-name", f"regex:^({names})",
                              sys.executable, "-m", "course.days.banks", str(path)],
                             capture_output=True, text=True, timeout=timeout)
    errors = [line for line in (ran.stdout + ran.stderr).splitlines() if line.startswith("==ERROR==")]
    if ran.returncode or errors:
        raise RuntimeError(f"ncu failed (exit {ran.returncode}): {' '.join(errors)[:400] or ran.stderr[-400:]}")
    counters: dict[str, dict[str, float]] = {}
    table = "\n".join(line for line in ran.stdout.splitlines() if line.startswith('"'))
    for row in csv.DictReader(io.StringIO(table)):
        name = row.get("Kernel Name", "").split("(")[0]
        if row.get("Metric Name") in NCU_METRICS:
            counters.setdefault(name, {})[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    if not counters:
        raise RuntimeError(f"ncu reported no counters: {ran.stdout[-400:]}")
    return counters


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    from course import device

    device.configure()  # before launch_transposes defines its kernels

    launch_transposes(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
