"""The CUDA-core SGEMM ladder (Week 2 bonus): what each version changes, in numbers a CPU can compute.

The kernels are CUDA C in the notebook. This module holds what needs no GPU: each version's tiling,
the global-memory traffic it implies (ignoring caches), the shared-memory bank arithmetic of its
inner loop, a picture of the v5/v6 tiles, and the table and bar chart of a measured run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib is imported where a picture is drawn: a grading run draws none
    from matplotlib.figure import Figure


BANKS = 32
WORD_BYTES = 4
WAVEFRONT_BYTES = BANKS * WORD_BYTES  # what shared memory delivers per pass: one word from each bank


@dataclass(frozen=True)
class Version:
    """One rung of the ladder, as the course's kernels implement it."""

    name: str
    change: str
    buys: str
    tile_m: int  # rows of C one block computes
    tile_n: int  # columns of C one block computes
    threads: int  # threads per block
    a_shared: bool  # the inner loop reads A from shared memory
    b_shared: bool
    shared_floats_per_fma: float  # floats the inner loop reads from shared memory per FMA

    @property
    def outputs_per_thread(self) -> int:
        return self.tile_m * self.tile_n // self.threads


LADDER: tuple[Version, ...] = (
    Version("v1", "one thread per element of C, both operands from global memory",
            "the baseline", 8, 32, 256, False, False, 0.0),
    Version("v2", "the block's rows of A staged in shared memory (32 x 32 tiles)",
            "half of the global loads in the inner loop become shared-memory reads", 32, 32, 1024, True, False, 1.0),
    Version("v3", "tiles of A and of B in shared memory",
            "every global float is loaded once per tile and reused 32 times", 32, 32, 1024, True, True, 2.0),
    Version("v4", "thread coarsening: 8 outputs of a column per thread (64 x 64 tiles)",
            "one B value in a register serves 8 FMAs: fewer shared reads per FMA", 64, 64, 512, True, True, 9 / 8),
    Version("v5", "2D block and warp tiling: 8 x 8 outputs per thread (128 x 128 tiles)",
            "16 shared reads feed 64 FMAs; the block reads each global float once per 128 outputs",
            128, 128, 256, True, True, 16 / 64),
    Version("v6a", "float4 global loads, checked only at the edges, one tile ahead (double buffer)",
            "a quarter of the load instructions, and global latency hidden behind the math",
            128, 128, 256, True, True, 16 / 64),
    Version("v6b", "A transposed in shared memory: 16-byte, conflict-free reads of A and B",
            "the inner loop's shared-memory reads need one pass each instead of four", 128, 128, 256, True, True,
            16 / 64),
    Version("v7", "a bigger tile: 8 x 16 outputs per thread (128 x 256), BK = 16, one block an SM",
            "6 shared reads feed 128 FMAs; each global float feeds 170 FLOPs instead of 128", 128, 256, 256,
            True, True, 24 / 128),
)
BY_NAME = {version.name: version for version in LADDER}


def global_floats(version: Version | str, m: int, n: int, k: int) -> tuple[int, int]:
    """Floats of A and of B the version's threads request from global memory for one M x N x K product.

    Caches are ignored (L1 and L2 catch many of these requests on a real GPU). A version that reads an
    operand from global memory in its inner loop requests it once per FMA; one that stages it in shared
    memory loads each element once per block that needs it.
    """
    v = BY_NAME[version] if isinstance(version, str) else version
    a = m * k * math.ceil(n / v.tile_n) if v.a_shared else m * n * k
    b = k * n * math.ceil(m / v.tile_m) if v.b_shared else m * n * k
    return a, b


def flop_per_global_float(version: Version | str, m: int, n: int, k: int) -> float:
    """2MNK over the floats requested from global memory: how much arithmetic each loaded float feeds."""
    a, b = global_floats(version, m, n, k)
    return 2 * m * n * k / (a + b)


def passes(words_per_lane: Sequence[Sequence[int]]) -> int:
    """Passes (wavefronts) shared memory needs for one warp's access, in a simple model of the hardware.

    ``words_per_lane`` lists, for each lane, the 4-byte word addresses it reads (one for a scalar read,
    four for a float4). Lanes that read the same word share it (a broadcast); different words in the
    same bank (address mod 32) need separate passes; and one pass delivers at most 128 bytes.
    """
    words = {w for lane in words_per_lane for w in lane}
    per_bank: dict[int, int] = {}
    for word in words:
        per_bank[word % BANKS] = per_bank.get(word % BANKS, 0) + 1
    return max(max(per_bank.values()), math.ceil(len(words) * WORD_BYTES / WAVEFRONT_BYTES))


def inner_loop_words(version: Version | str, k: int = 0, warp: int = 0) -> dict[str, list[list[int]]]:
    """The shared-memory words one warp reads for A and for B at step ``k`` of the version's inner loop.

    The index formulas are the course kernels' own (row-major tiles, the v5/v6 warp layout of 4 x 8
    lanes, v6b's and v7's transposed A with rows padded to 132 floats); one list of words per read instruction.
    """
    name = version if isinstance(version, str) else version.name
    lanes = range(32)
    if name == "v1":
        return {"A": [], "B": []}
    if name in ("v2", "v3"):  # block 32 x 32: a warp is one row ty of threads, tx = lane
        ty = warp
        a = [[[ty * 32 + k] for _ in lanes]]
        b = [[[k * 32 + tx] for tx in lanes]] if name == "v3" else []
        return {"A": a, "B": b}
    if name == "v4":  # 64 x 64 tile, BK = 8, TM = 8: lanes share t_row, t_col = lane + 32 * (warp % 2)
        t_row = warp // 2 * 8
        a = [[[(t_row + i) * 8 + k] for _ in lanes] for i in range(8)]
        b = [[[k * 64 + (warp % 2) * 32 + lane] for lane in lanes]]
        return {"A": a, "B": b}
    # v5 to v7: 4 x 2 warps of 32 x 64 (v7: 32 x 128); lane -> rows r0 + {0..3, 16..19}, columns c0 + {0..3, 32..35}
    # (v7: and 64..67, 96..99)
    r0 = [warp // 2 * 32 + lane // 8 * 4 for lane in lanes]
    c0 = [warp % 2 * 64 + lane % 8 * 4 for lane in lanes]
    b = [[[k * 128 + c + half + j] for c in c0] for half in (0, 32) for j in range(4)]
    if name in ("v5", "v6a"):  # As[m][k], 8 floats a row: scalar reads down a column
        a = [[[(r + half + i) * 8 + k] for r in r0] for half in (0, 16) for i in range(4)]
        return {"A": a, "B": b}
    # v6b: As[k][m] with rows of 132 floats; float4 reads of A and of B
    a = [[[k * 132 + r + half + i for i in range(4)] for r in r0] for half in (0, 16)]
    if name == "v6b":
        b = [[[k * 128 + c + half + j for j in range(4)] for c in c0] for half in (0, 32)]
        return {"A": a, "B": b}
    # v7: v6b's A; warps of 32 x 128, so B's rows are 256 floats and a lane reads 4 float4s, 32 columns apart
    c0 = [warp % 2 * 128 + lane % 8 * 4 for lane in lanes]
    b = [[[k * 256 + c + 32 * h + j for j in range(4)] for c in c0] for h in range(4)]
    return {"A": a, "B": b}


def inner_loop_passes(version: Version | str) -> dict[str, tuple[int, int]]:
    """For A and for B: (read instructions per step k, passes all of them need) for one warp."""
    found = {}
    for operand, reads in inner_loop_words(version).items():
        found[operand] = (len(reads), sum(passes(read) for read in reads))
    return found


def plot_tiles() -> Figure:
    """v5/v6: the 128 x 128 block tile in warp tiles, one warp tile in lanes, and the banks of A's reads."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    figure, (block_ax, warp_ax, bank_ax) = plt.subplots(1, 3, figsize=(13.5, 4.6),
                                                        gridspec_kw={"width_ratios": [1, 1.5, 1.4]})

    for w in range(8):
        row, col = w // 2, w % 2
        block_ax.add_patch(Rectangle((col * 64, row * 32), 64, 32, facecolor=f"C{w}", alpha=0.35, edgecolor="k"))
        block_ax.text(col * 64 + 32, row * 32 + 16, f"warp {w}\n32 x 64", ha="center", va="center", fontsize=9)
    block_ax.set(xlim=(0, 128), ylim=(128, 0), aspect="equal", xlabel="column of the tile (n)",
                 ylabel="row of the tile (m)", title="one block: 128 x 128 of C")

    for lane in range(32):
        r0, c0 = lane // 8 * 4, lane % 8 * 4
        for dr in (0, 16):
            for dc in (0, 32):
                highlight = lane == 0
                warp_ax.add_patch(Rectangle((c0 + dc, r0 + dr), 4, 4, edgecolor="k", linewidth=0.4,
                                            facecolor="C3" if highlight else ("C0" if (lane // 8 + lane) % 2 else "C9"),
                                            alpha=0.9 if highlight else 0.35))
                warp_ax.text(c0 + dc + 2, r0 + dr + 2, str(lane), ha="center", va="center", fontsize=6)
    warp_ax.set(xlim=(0, 64), ylim=(32, 0), aspect="equal", xlabel="column of the warp tile",
                ylabel="row", title="one warp: 4 x 8 lanes, each 4 blocks of 4 x 4\n(lane 0's 8 x 8 outputs in red)")

    labels = ("v5/v6a: As[m][k], scalar", "v6b: As[k][m], float4")
    for offset, (name, label) in enumerate(zip(("v5", "v6b"), labels, strict=True)):
        first_read = inner_loop_words(name)["A"][0]
        words = {w for lane in first_read for w in lane}
        counts = [sum(1 for w in words if w % BANKS == bank) for bank in range(BANKS)]
        bank_ax.bar([bank + 0.4 * offset - 0.2 for bank in range(BANKS)], counts, width=0.4, label=label,
                    color=f"C{offset + 1}")
    bank_ax.set(xlabel="bank", ylabel="different words asked of the bank",
                title="warp 0's first read of A at k = 0", xlim=(-1, 32))
    bank_ax.legend(fontsize=8)
    figure.tight_layout()
    return figure


def progression_rows(rates: Mapping[str, float | None], cublas: float | None) -> list[dict[str, object]]:
    """Rows of the progression table: GFLOP/s, fraction of cuBLAS, and speed-up over the previous rung."""
    rows: list[dict[str, object]] = []
    previous: float | None = None
    for name, rate in rates.items():
        rung = name in BY_NAME  # the comparisons (Triton, cuBLAS) are no rung: no speed-up over the one before
        rows.append({"version": name, "gflops": rate,
                     "vs_cublas": rate / cublas if rate and cublas else None,
                     "vs_previous": rate / previous if rung and rate and previous else None})
        if rung:
            previous = rate
    return rows


def format_progression(rows: Sequence[Mapping[str, object]]) -> str:
    """The progression table as text; a rung that was not measured says so."""
    lines = [f"{'version':<10}{'GFLOP/s':>10}{'of cuBLAS':>11}{'vs previous':>13}"]
    for row in rows:
        rate = row["gflops"]
        if not rate:
            lines.append(f"{row['version']:<10}{'not measured (not written yet, or wrong)':>34}")
            continue
        vs_cublas = f"{row['vs_cublas']:.1%}" if row["vs_cublas"] else "-"
        vs_previous = f"{row['vs_previous']:.2f}x" if row["vs_previous"] else "-"
        lines.append(f"{row['version']:<10}{rate:>10.0f}{vs_cublas:>11}{vs_previous:>13}")
    return "\n".join(lines)


def plot_progression(rates: Mapping[str, float | None], cublas: float | None, title: str) -> Figure:
    """Bar chart of the measured rates, with cuBLAS as a dashed line and each bar's fraction of it."""
    import matplotlib.pyplot as plt

    names = list(rates)
    values = [rates[name] or 0.0 for name in names]
    figure, ax = plt.subplots(figsize=(9, 4.2))
    bars = ax.bar(names, [v / 1e3 for v in values], color=["C0" if n in BY_NAME else "C2" for n in names])
    if cublas:
        ax.axhline(cublas / 1e3, color="k", linestyle="--", linewidth=1, label="cuBLAS fp32 (TF32 off)")
        ax.legend(loc="upper left")
    for bar, value in zip(bars, values, strict=True):
        text = "not\nmeasured" if not value else (f"{value / cublas:.0%}" if cublas else f"{value / 1e3:.1f}")
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set(ylabel="TFLOP/s", title=title)
    figure.tight_layout()
    return figure


# The CUDA driver's function attributes (CUfunction_attribute): local memory a thread, registers a thread.
_LOCAL_SIZE_BYTES, _NUM_REGS = 3, 4
# Registers and spilled (local) bytes a thread of the course's own v5, v6a and v6b as NVRTC 13.0 built them for an
# H200 (sm_90) on 2026-11-28, read from the driver: bench/results/h200/2026-11-28-sgemm-ladder-tiles-d6f60bb.json in
# the course's online repository.
RECORDED_RESOURCES = {"gpu": "NVIDIA H200 (sm_90, NVRTC 13.0)", "date": "2026-11-28",
                      "kernels": {"v5": (128, 8), "v6a": (128, 8), "v6b": (126, 0)}}


def kernel_resources(module: object, name: str) -> tuple[int, int] | None:
    """(registers a thread, spilled bytes a thread) of kernel ``name`` of a ``course.cuda`` module, as the CUDA
    driver reports them for this GPU; None without a GPU."""
    from course import cuda

    if not cuda.available():
        return None
    pointer = module._function(name).pointer  # loads the module's kernel on this device
    driver = cuda._cupy().cuda.driver
    return driver.funcGetAttribute(_NUM_REGS, pointer), driver.funcGetAttribute(_LOCAL_SIZE_BYTES, pointer)


def format_resources(resources: Mapping[str, tuple[int, int] | None]) -> str:
    """One line a kernel: registers a thread and bytes spilled to local memory a thread."""
    lines = [f"{'kernel':>8}{'registers':>11}{'spilled bytes':>15}"]
    for name, found in resources.items():
        regs, spilled = found if found else ("-", "-")
        note = "  spills to local memory" if found and found[1] else ""
        lines.append(f"{name:>8}{regs!s:>11}{spilled!s:>15}{note}")
    return "\n".join(lines)
