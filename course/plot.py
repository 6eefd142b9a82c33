"""Plots shared by the notebooks and the grader's feedback pages (matplotlib, no display needed)."""

from __future__ import annotations

import io
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # matplotlib is imported where a plot is drawn: `import course` (every run and replay) skips it
    from matplotlib.figure import Figure


def show(figure: Figure | None) -> None:
    """Display ``figure`` once in the notebook (closed first, so the cell's end does not show it again); None shows
    nothing. pyplot is imported here, by a cell that has a figure to show, not by one that draws nothing."""
    if figure is None:
        return
    import matplotlib.pyplot as plt
    from IPython.display import display

    plt.close(figure)
    display(figure)


def gflops_vs_size(series: Mapping[str, Sequence[float]], labels: Sequence[str], title: str,
                   ylabel: str = "GFLOP/s", log_scale: bool = False) -> Figure:
    """One line per implementation (e.g. yours, reference, cuBLAS) over the benchmark shapes.

    ``log_scale`` puts the rates on a logarithmic axis, for series that differ by orders of magnitude;
    a NaN value leaves a gap (a shape that implementation was not run on).
    """
    import matplotlib.pyplot as plt
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
    if log_scale:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both" if log_scale else "major")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def roofline(peak_gflops: float, peak_gbps: float, points: Mapping[str, tuple[float, float]],
             title: str) -> Figure:
    """Roofline: attainable GFLOP/s against arithmetic intensity (FLOP/byte), with measured points.

    ``points`` maps a name to (intensity, measured GFLOP/s). The roof is min(peak, bandwidth x intensity).
    """
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    ridge = peak_gflops / peak_gbps
    intensities = [intensity for intensity, _ in points.values() if intensity > 0]
    # The roof spans 64x either side of the ridge, and past every point (a copy-like kernel sits far left).
    xs = [min([ridge / 64, *(i / 2 for i in intensities)]), ridge, max([ridge * 64, *(i * 2 for i in intensities)])]
    ax.plot(xs, [min(peak_gflops, peak_gbps * x) for x in xs], color="black", label="roof")
    for name, (intensity, achieved) in points.items():
        ax.scatter([intensity], [achieved], label=name, zorder=3)
    ax.set_xscale("log")
    return finish_log_plot(fig, ax, "arithmetic intensity (FLOP/byte)", "GFLOP/s", title)


def finish_log_plot(fig: Figure, ax: Any, xlabel: str, ylabel: str, title: str) -> Figure:
    """The course's finish of a plot with a log y axis: labels, a small title, a grid at every decade's ticks,
    the legend, a tight layout."""
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
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
    import matplotlib.pyplot as plt
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
    import matplotlib.pyplot as plt
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


def tile_reuse(sides: Sequence[int], loaded_bytes: Sequence[float], title: str,
               gflops: Mapping[int, float] | None = None) -> Figure:
    """Bytes a tiled matmul loads against its (square) tile side, 1 meaning untiled; beside it, when
    measured, the GFLOP/s of each tile side (``gflops`` maps a side to its rate; missing sides are skipped)."""
    import matplotlib.pyplot as plt
    if len(sides) != len(loaded_bytes):
        raise ValueError(f"{len(loaded_bytes)} traffic values for {len(sides)} tile sides")
    panels = 2 if gflops else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 3.6), squeeze=False)
    labels = ["untiled" if side == 1 else f"{side}x{side}" for side in sides]
    traffic = axes[0][0]
    traffic.plot(list(sides), [b / 2**30 for b in loaded_bytes], marker="o")
    traffic.set_ylabel("A and B loaded (GiB, caches ignored)")
    traffic.set_yscale("log")
    traffic.set_title("computed traffic", fontsize=10)
    if gflops:
        speed = axes[0][1]
        measured = [side for side in sides if side in gflops]
        speed.plot(measured, [gflops[side] for side in measured], marker="o", color="C1")
        speed.set_ylabel("GFLOP/s")
        speed.set_ylim(bottom=0)
        speed.set_title("measured speed", fontsize=10)
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(sides), labels, fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("tile of C per program")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def address_map(panels: Mapping[str, Sequence[int]], block: int, sector: int = 8, title: str = "") -> Figure:
    """Which program and lane touched each memory address, one panel per access pattern.

    ``panels`` maps a pattern's name to one label per address (element index): ``program * block + lane``
    where that lane touched the address, negative where nothing did. A row per program; each touched
    address is a cell in the program's colour with its lane number (when there is room). Memory moves
    whole sectors of ``sector`` elements: every sector a program touches is shaded grey across its
    width, so grey without colour is traffic the program fetched and did not use. Lanes go from light
    (lane 0) to full colour (the last lane).
    """
    import matplotlib.pyplot as plt
    if block < 1 or sector < 1:
        raise ValueError("block and sector must be positive")
    if not panels:
        raise ValueError("no access pattern to draw")
    width = max(len(labels) for labels in panels.values())
    programs = max([label // block + 1 for labels in panels.values() for label in labels if label >= 0] or [1])
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 0.9 + (0.35 * programs + 0.7) * len(panels)),
                             squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, (name, labels) in zip(axes[:, 0], panels.items(), strict=True):
        touched: dict[int, set[int]] = {}
        for address, label in enumerate(labels):
            if label < 0:
                continue
            program, lane = divmod(int(label), block)
            touched.setdefault(program, set()).add(address // sector)
            shade = 0.35 + 0.65 * lane / max(block - 1, 1)  # lane 0 lightest, the last lane full colour
            ax.add_patch(plt.Rectangle((address - 0.5, program - 0.4), 1.0, 0.8, color=colours(program % 10),
                                       alpha=shade))
            if width <= 64:
                ax.text(address, program, str(lane), ha="center", va="center", fontsize=6)
        for program, sectors in touched.items():
            for s in sectors:
                ax.add_patch(plt.Rectangle((s * sector - 0.5, program - 0.45), sector, 0.9, color="0.85", zorder=0))
        for boundary in range(0, width + 1, sector):
            ax.axvline(boundary - 0.5, color="0.6", linewidth=0.5, zorder=1)
        moved = sum(len(s) for s in touched.values())
        used = sum(1 for label in labels if label >= 0)
        ax.set_title(f"{name}: {used} elements used, {moved} sectors moved ({moved * sector} elements)",
                     fontsize=9, loc="left")
        ax.set_xlim(-0.5, width - 0.5)
        ax.set_ylim(programs - 0.5, -0.5)
        ax.set_yticks(range(programs), [f"program {p}" for p in range(programs)], fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel(f"address (element index; grey lines every {sector} elements mark the sectors)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def times_per_call(times_ms: Sequence[float], title: str, skip: int = 0) -> Figure:
    """Each call's time in order (log axis), with the median of the calls after the first ``skip``.

    Shows what a single measurement hides: a slow first call, the spread, and the outliers.
    """
    import matplotlib.pyplot as plt
    if len(times_ms) <= skip:
        raise ValueError(f"{len(times_ms)} times, all of them skipped")
    fig, ax = plt.subplots(figsize=(7, 3.2))
    calls = range(1, len(times_ms) + 1)
    if skip:
        first = "first call" if skip == 1 else f"first {skip} calls"
        ax.scatter(calls[:skip], times_ms[:skip], color="C3", s=22, label=f"{first} (warm-up)", zorder=3)
    ax.scatter(calls[skip:], times_ms[skip:], color="C0", s=14, label="timed", zorder=3)
    median = statistics.median(times_ms[skip:])
    ax.axhline(median, color="C0", linestyle="--", linewidth=1, label=f"median of the timed: {median:.3g} ms")
    return finish_log_plot(fig, ax, "call", "ms", title)


def to_png(fig: Figure) -> bytes:
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


# Class-level plots for the TA's overview page. Each takes plain numbers, so the
# notebooks' own plots and the grader's share one style; none needs a display.

def _bar_height(rows: int, per_row: float = 0.32, minimum: float = 2.2, maximum: float = 40.0) -> float:
    return min(max(minimum, 1.0 + per_row * rows), maximum)


def score_distribution(fractions: Mapping[str, Sequence[float]], title: str = "Scores per notebook") -> Figure:
    """Per notebook (one row each), every student's share of the points as a dot, over a box plot.

    ``fractions`` maps a notebook's name to its students' scores as fractions of the maximum (0 to 1).
    Dots are spread vertically by a fixed sequence (no randomness: the same grades draw the same picture).
    """
    import matplotlib.pyplot as plt
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
    import matplotlib.pyplot as plt
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
    import matplotlib.pyplot as plt
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
