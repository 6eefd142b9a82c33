"""Week 2, Day 2 (coalescing): how many memory sectors a warp's access touches, and a picture of two transposes.

A warp's 32 threads issue one load (or store) instruction together; the memory system serves it in
32-byte sectors. ``sectors_touched`` counts the distinct sectors of a list of byte addresses, and
``warp_access`` the sectors and the useful fraction of their bytes for 32 lanes reading with a
stride. ``transpose_access_figure`` draws which elements one program of a naive and of a tiled
transpose reads and writes, in the matrix and in memory (row-major order). Pure Python and
matplotlib: it runs without a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported where a picture is drawn: a grading run draws none
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


SECTOR_BYTES = 32
WARP_LANES = 32


def sectors_touched(byte_addresses: Iterable[int], element_bytes: int = 4, sector_bytes: int = SECTOR_BYTES) -> int:
    """Distinct ``sector_bytes``-sized, aligned sectors covered by elements starting at these byte addresses."""
    sectors: set[int] = set()
    for address in byte_addresses:
        first, last = address // sector_bytes, (address + element_bytes - 1) // sector_bytes
        sectors.update(range(first, last + 1))
    return len(sectors)


def warp_access(stride_elements: int, element_bytes: int = 4, lanes: int = WARP_LANES) -> tuple[int, float]:
    """Sectors one warp touches when lane i accesses element i * stride, and the fraction of those bytes it uses."""
    addresses = [lane * stride_elements * element_bytes for lane in range(lanes)]
    sectors = sectors_touched(addresses, element_bytes)
    return sectors, lanes * element_bytes / (sectors * SECTOR_BYTES)


def _naive_maps(m: int, n: int, column: int) -> tuple[np.ndarray, np.ndarray]:
    """Lane numbers on x (reads) and on out (writes) for the program that moves column ``column`` of x."""
    reads, writes = np.full((m, n), -1), np.full((n, m), -1)
    for lane in range(m):
        reads[lane, column] = lane
        writes[column, lane] = lane
    return reads, writes


def _tiled_maps(m: int, n: int, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """Element numbers (in load order) on x and on out for the program of the top-left tile."""
    reads, writes = np.full((m, n), -1), np.full((n, m), -1)
    for i in range(min(tile, m)):
        for j in range(min(tile, n)):
            k = i * tile + j
            reads[i, j] = k
            writes[j, i] = k
    return reads, writes


def _draw(matrix_ax: Axes, strip_ax: Axes, touched: np.ndarray, title: str, color: str) -> None:
    from matplotlib.colors import ListedColormap

    colors = ListedColormap(["#eeeeee", color])
    mask = (touched >= 0).astype(int)
    for ax, grid in ((matrix_ax, mask), (strip_ax, mask.reshape(1, -1))):
        ax.imshow(grid, cmap=colors, vmin=0, vmax=1, aspect="equal" if ax is matrix_ax else "auto")
        ax.set_xticks(np.arange(-0.5, grid.shape[1], 1), minor=True)
        ax.set_yticks(np.arange(-0.5, grid.shape[0], 1), minor=True)
        ax.grid(which="minor", color="white", linewidth=1.2)
        ax.tick_params(which="both", length=0, labelbottom=False, labelleft=False)
    for (i, j), k in np.ndenumerate(touched):
        if k >= 0:
            matrix_ax.text(j, i, str(k), ha="center", va="center", fontsize=7, color="white")
    flat = touched.reshape(-1)
    matrix_ax.set_title(title, fontsize=9)
    runs = np.count_nonzero(np.diff(np.concatenate(([0], (flat >= 0).astype(int)))) == 1)
    strip_ax.set_xlabel(f"the same elements in memory (row-major): {runs} separate run{'s' if runs != 1 else ''}",
                        fontsize=8)


def transpose_access_figure(m: int = 6, n: int = 8, tile: int = 4, column: int = 2) -> Figure:
    """Which elements one program reads from x (m x n) and writes to out = x.T, naive and tiled.

    Top row: the naive program that moves column ``column`` of x to row ``column`` of out (reads
    strided by n, writes contiguous). Bottom row: the tiled program of the top-left ``tile x tile``
    tile (both sides in short contiguous runs). Numbers are the order of the elements in the program.
    """
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(10, 7.5))
    outer = fig.add_gridspec(2, 2, hspace=0.3, wspace=0.15)
    rows = (("naive", _naive_maps(m, n, column), "#c2521b"), ("tiled", _tiled_maps(m, n, tile), "#3f7fbf"))
    for r, (name, maps, color) in enumerate(rows):
        for c, (touched, title) in enumerate(((maps[0], f"{name}: one program's reads of x ({m} x {n})"),
                                              (maps[1], f"{name}: its writes to out = x.T ({n} x {m})"))):
            inner = outer[r, c].subgridspec(2, 1, height_ratios=[8, 0.6], hspace=0.12)
            _draw(fig.add_subplot(inner[0]), fig.add_subplot(inner[1]), touched, title, color)
    fig.suptitle("Naive against tiled transpose: where one program's accesses land", fontsize=11)
    return fig
