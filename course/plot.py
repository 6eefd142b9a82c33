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


def program_grid(panels: Mapping[str, Sequence[Sequence[float]]], title: str, annotate_limit: int = 16) -> Figure:
    """One coloured grid per panel (e.g. each program's pid_0, pid_1 and linear id), value written in each cell.

    ``panels`` maps a caption to a 2-D array (rows x columns, anything ``numpy.asarray`` reads). Cells
    are numbered only when both sides are at most ``annotate_limit``; larger grids are colour alone.
    """
    import numpy as np

    if not panels:
        raise ValueError("no panels to draw")
    arrays = {name: np.asarray(values) for name, values in panels.items()}
    for name, array in arrays.items():
        if array.ndim != 2 or not array.size:
            raise ValueError(f"panel {name!r} is not a non-empty 2-D array (shape {array.shape})")
    rows, cols = next(iter(arrays.values())).shape
    margin = 1.6  # inches of labels and colour bar beside each panel's cells
    panel = min(max(2.5, 0.42 * cols + margin), 14.0 / len(arrays))
    height = min(max(1.6, rows * (panel - margin) / cols + 1.3), 6.0)
    fig, axes = plt.subplots(1, len(arrays), figsize=(panel * len(arrays), height), squeeze=False)
    for ax, (name, array) in zip(axes[0], arrays.items(), strict=True):
        image = ax.imshow(array, cmap="viridis", interpolation="nearest", aspect="equal")
        if max(array.shape) <= annotate_limit:
            middle = (float(array.min()) + float(array.max())) / 2
            for (i, j), value in np.ndenumerate(array):
                ax.text(j, i, f"{value:g}", ha="center", va="center", fontsize=7,
                        color="black" if value > middle else "white")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("column", fontsize=8)
        ax.set_ylabel("row", fontsize=8)
        ax.tick_params(labelsize=7)
        if array.shape[0] == 1:
            ax.set_yticks([0])
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def wave_footprint(orders: Mapping[str, Sequence[Sequence[float]]], programs: int, title: str) -> Figure:
    """Per panel, a launch order over a grid of output tiles (``order[pid_m, pid_n]`` = launch position), drawn
    as the tiles the first wave of ``programs`` programs computes (the others shaded by wave, alternately), with
    strips marking the row panels of A (left) and column panels of B (top) that this first wave reads.
    """
    import numpy as np
    from matplotlib.colors import ListedColormap

    if not orders or programs < 1:
        raise ValueError("wave_footprint needs at least one order and one program per wave")
    first, odd, even, unread = "#c2521b", "#b9cde6", "#dde8f6", "#eeeeee"
    fig = plt.figure(figsize=(3.8 * len(orders), 5.6), layout="constrained")
    for subfigure, (name, values) in zip(np.atleast_1d(fig.subfigures(1, len(orders))), orders.items(), strict=True):
        order = np.asarray(values)
        if order.ndim != 2 or not order.size:
            raise ValueError(f"order {name!r} is not a non-empty 2-D array (shape {order.shape})")
        wave = order // programs
        in_first = wave == 0
        shade = np.where(in_first, 0, 1 + wave % 2)  # 0: first wave, 1 and 2: later waves, alternately
        rows_read, cols_read = in_first.any(axis=1), in_first.any(axis=0)
        axes = subfigure.subplots(2, 2, width_ratios=[1, 14], height_ratios=[1, 14], gridspec_kw={"wspace": 0.04,
                                                                                                   "hspace": 0.04})
        axes[0, 0].axis("off")
        main = axes[1, 1]
        main.imshow(shade, cmap=ListedColormap([first, odd, even]), vmin=0, vmax=2, interpolation="nearest",
                    aspect="auto")
        main.set_yticks([])
        main.set_xlabel("tile column (pid_n)", fontsize=8)
        main.tick_params(labelsize=7)
        left, top = axes[1, 0], axes[0, 1]
        left.imshow(np.where(rows_read, 0, 1)[:, None], cmap=ListedColormap([first, unread]), vmin=0, vmax=1,
                    interpolation="nearest", aspect="auto")
        left.set_xticks([])
        left.set_ylabel("tile row (pid_m)", fontsize=8)
        left.tick_params(labelsize=7)
        top.imshow(np.where(cols_read, 0, 1)[None, :], cmap=ListedColormap([first, unread]), vmin=0, vmax=1,
                   interpolation="nearest", aspect="auto")
        top.set_xticks([])
        top.set_yticks([])
        subfigure.suptitle(f"{name}: the first wave reads\n{int(rows_read.sum())} row panels of A (left strip), "
                           f"{int(cols_read.sum())} column panels of B (top)", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def to_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


# Class-level plots for the TA's overview page (grader/overview.py). Each takes plain numbers, so the
# notebooks' own plots and the grader's share one style; none needs a display.

def _bar_height(rows: int, per_row: float = 0.32, minimum: float = 2.2, maximum: float = 40.0) -> float:
    return min(max(minimum, 1.0 + per_row * rows), maximum)


def score_distribution(fractions: Mapping[str, Sequence[float]], title: str = "Scores per notebook") -> Figure:
    """Per notebook (one row each), every student's share of the points as a dot, over a box plot.

    ``fractions`` maps a notebook's name to its students' scores as fractions of the maximum (0 to 1).
    Dots are spread vertically by a fixed sequence (no randomness: the same grades draw the same picture).
    """
    names = list(fractions)
    if not names:
        raise ValueError("no notebooks to plot")
    fig, ax = plt.subplots(figsize=(7, _bar_height(len(names), per_row=0.55)))
    data = [[100.0 * v for v in fractions[name]] for name in names]
    positions = list(range(len(names), 0, -1))
    ax.boxplot([d if d else [float("nan")] for d in data], positions=positions, orientation="horizontal",
               widths=0.55, showfliers=False, patch_artist=True,
               boxprops={"facecolor": "#dde8f6", "edgecolor": "#4a6f9c"},
               medianprops={"color": "#1f3b5c", "linewidth": 2})
    for position, values in zip(positions, data, strict=True):
        offsets = [((i * 0.6180339887) % 1.0 - 0.5) * 0.5 for i in range(len(values))]
        ax.scatter(values, [position + o for o in offsets], s=14, color="#c2521b", alpha=0.75, zorder=3,
                   linewidths=0)
    ax.set_yticks(positions, [f"{name}  (n={len(d)})" for name, d in zip(names, data, strict=True)], fontsize=8)
    ax.set_xlim(-3, 103)
    ax.set_xlabel("score (% of the notebook's points)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def pass_rates(labels: Sequence[str], rates: Sequence[float], counts: Sequence[str] = (),
               provisional: Sequence[bool] = (), title: str = "Pass rate per test item") -> Figure:
    """One horizontal bar per graded item: the share of students with full marks on it (0 to 1).

    ``counts`` (e.g. "12/40") is written at the end of each bar; an item flagged in ``provisional``
    (decided on a CPU, the GPU judge decides) is hatched and its label says so.
    """
    if len(rates) != len(labels):
        raise ValueError(f"{len(rates)} rates for {len(labels)} items")
    if not labels:
        raise ValueError("no items to plot")
    counts = list(counts) or [""] * len(labels)
    provisional = list(provisional) or [False] * len(labels)
    fig, ax = plt.subplots(figsize=(7, _bar_height(len(labels))))
    positions = list(range(len(labels), 0, -1))
    for position, rate, flag, count in zip(positions, rates, provisional, counts, strict=True):
        ax.barh([position], [100.0 * rate], height=0.7, color="#8fb3de" if flag else "#3f7fbf",
                hatch="//" if flag else None, edgecolor="#2c5a8a", linewidth=0.6)
        ax.text(min(100.0 * rate, 100.0) + 1.0, position, count, va="center", fontsize=7)
    ax.set_yticks(positions, [f"{label} (provisional)" if flag else label
                              for label, flag in zip(labels, provisional, strict=True)], fontsize=8)
    ax.set_xlim(0, 112)
    ax.set_xlabel("students with full marks (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def class_performance(students: Sequence[str], values: Sequence[float], lines: Mapping[str, float],
                      title: str, xlabel: str = "fraction of cuBLAS (geometric mean over the benchmark shapes)",
                      label_limit: int = 40) -> Figure:
    """Each student's performance as a horizontal bar, best first, with vertical lines for the references.

    ``lines`` maps a name (e.g. "reference solution", "cuBLAS") to its value on the same axis. With more
    than ``label_limit`` students the bars are numbered by rank instead of named.
    """
    if len(values) != len(students):
        raise ValueError(f"{len(values)} values for {len(students)} students")
    if not students:
        raise ValueError("no students to plot")
    order = sorted(range(len(values)), key=lambda i: -values[i])
    fig, ax = plt.subplots(figsize=(7, _bar_height(min(len(order), label_limit + 10), per_row=0.28)))
    positions = list(range(len(order), 0, -1))
    ax.barh(positions, [values[i] for i in order], height=0.75 if len(order) <= label_limit else 1.0,
            color="#3f7fbf")
    if len(order) <= label_limit:
        ax.set_yticks(positions, [students[i] for i in order], fontsize=8)
    else:
        ax.set_ylabel(f"{len(order)} students, best first")
        ax.set_yticks([])
    styles = ["--", ":", "-."]
    for number, (name, value) in enumerate(lines.items()):
        ax.axvline(value, color=f"C{number + 1}", linestyle=styles[number % len(styles)], linewidth=1.6,
                   label=f"{name}: {value:.2f}")
    ax.set_xlim(0, max([*values, *lines.values(), 0.1]) * 1.08)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    if lines:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
