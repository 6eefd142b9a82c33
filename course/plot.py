"""Plots shared by the notebooks and the grader's feedback pages (matplotlib, no display needed)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def gflops_vs_size(series: Mapping[str, Sequence[float]], labels: Sequence[str], title: str,
                   ylabel: str = "GFLOP/s") -> Figure:
    """One line per implementation (e.g. yours, reference, cuBLAS) over the benchmark shapes."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    positions = range(len(labels))
    for name, values in series.items():
        if len(values) != len(labels):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(labels)} shapes")
        ax.plot(positions, values, marker="o", label=name)
    ax.set_xticks(list(positions), labels, rotation=15, fontsize=8, ha="right")
    ax.margins(x=0.1)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def roofline(peak_gflops: float, peak_gbps: float, points: Mapping[str, tuple[float, float]],
             title: str) -> Figure:
    """Roofline: attainable GFLOP/s against arithmetic intensity (FLOP/byte), with measured points.

    ``points`` maps a name to (intensity, measured GFLOP/s). The roof is min(peak, bandwidth x intensity).
    """
    fig, ax = plt.subplots(figsize=(6, 4))
    ridge = peak_gflops / peak_gbps
    xs = [ridge / 64, ridge, ridge * 64]
    ax.plot(xs, [min(peak_gflops, peak_gbps * x) for x in xs], color="black", label="roof")
    for name, (intensity, achieved) in points.items():
        ax.scatter([intensity], [achieved], label=name, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def to_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()
