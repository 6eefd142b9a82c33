"""A picture for Week 2 Day 5: the boxes a TMA descriptor moves, drawn over the matrix it describes.

Works without a GPU (matplotlib only). Each panel is one 2-D matrix with the boxes one program
loads from it; the part of a box that hangs past the matrix's edge is hatched: a TMA load fills it
with zeros (or NaN), and a TMA store drops it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib is imported where a picture is drawn: a grading run draws none
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Boxes:
    """One matrix of ``shape`` (rows, columns) and the ``origins`` (row, column) of ``block``-sized boxes on it."""

    shape: tuple[int, int]
    block: tuple[int, int]
    origins: Sequence[tuple[int, int]]


def boxes_along(start: tuple[int, int], block: tuple[int, int], extent: int, axis: int) -> list[tuple[int, int]]:
    """Origins of the boxes a program visits from ``start``, stepping one block at a time along ``axis``
    (0: rows, 1: columns) until it passes ``extent``."""
    origins = []
    position = list(start)
    while position[axis] < extent:
        origins.append((position[0], position[1]))
        position[axis] += block[axis]
    return origins


def plot_boxes(panels: Mapping[str, Boxes], title: str) -> Figure:
    """Draw each matrix as a grey rectangle and the boxes on it, the part outside the matrix hatched."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if not panels:
        raise ValueError("no panels to draw")
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (name, panel) in zip(axes[0], panels.items(), strict=True):
        rows, cols = panel.shape
        block_rows, block_cols = panel.block
        ax.add_patch(Rectangle((0, 0), cols, rows, facecolor="0.88", edgecolor="black", label="matrix"))
        far_rows, far_cols = rows, cols
        for i, (row, col) in enumerate(panel.origins):
            inside_rows = max(0, min(block_rows, rows - row))
            inside_cols = max(0, min(block_cols, cols - col))
            colour = plt.cm.tab10(i % 10)
            ax.add_patch(Rectangle((col, row), inside_cols, inside_rows, facecolor=colour, alpha=0.45))
            outside = [((col + inside_cols, row), block_cols - inside_cols, block_rows),  # right of the matrix
                       ((col, row + inside_rows), inside_cols, block_rows - inside_rows)]  # below it
            for corner, width, height in outside:
                if width > 0 and height > 0:
                    ax.add_patch(Rectangle(corner, width, height, fill=False, hatch="///", edgecolor=colour,
                                           linewidth=0))
            ax.add_patch(Rectangle((col, row), block_cols, block_rows, fill=False, edgecolor=colour, linewidth=1.8))
            ax.text(col + block_cols / 2, row + block_rows / 2, str(i), ha="center", va="center", fontsize=9,
                    fontweight="bold")
            far_rows, far_cols = max(far_rows, row + block_rows), max(far_cols, col + block_cols)
        ax.set_xlim(-0.02 * far_cols, far_cols * 1.02)
        ax.set_ylim(far_rows * 1.02, -0.02 * far_rows)  # row 0 at the top, as a matrix is written
        ax.set_aspect("equal")
        ax.set_title(f"{name}: {rows} x {cols}, boxes of {block_rows} x {block_cols}", fontsize=9)
        ax.set_xlabel("column", fontsize=8)
        ax.set_ylabel("row", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# What to count in a kernel's PTX to see how its tiles travel (static counts: instructions in the code,
# not how often they run).
PTX_INSTRUCTIONS = (
    ("TMA tile copies (cp.async.bulk.tensor)", r"\bcp\.async\.bulk\.tensor\."),
    ("per-thread async copies (cp.async)", r"\bcp\.async\.c[ag]\."),
    ("plain global loads (ld.global)", r"\bld\.global\."),
    ("tensor-core MMAs (wgmma.mma_async)", r"\bwgmma\.mma_async\."),
    ("barrier operations (mbarrier)", r"\bmbarrier\."),
)


def count_instructions(ptx: str) -> dict[str, int]:
    """How many of each instruction kind of ``PTX_INSTRUCTIONS`` the PTX text holds."""
    import re

    return {name: len(re.findall(pattern, ptx)) for name, pattern in PTX_INSTRUCTIONS}


def compiled_ptx(kernel: object) -> str | None:
    """PTX of the variant of a ``@triton.jit`` kernel this process compiled last (None in the interpreter,
    or before its first launch)."""
    latest = None
    for cache in getattr(kernel, "device_caches", {}).values():
        for compiled in cache[0].values():
            compiled = compiled.result() if hasattr(compiled, "result") else compiled
            latest = getattr(compiled, "asm", {}).get("ptx", latest)
    return latest
