"""Floating-point formats of tensor-core matmuls (Week 2, Day 6): their bits, their rounding, and two pictures.

A binary floating-point number is a sign bit, ``e`` exponent bits and ``m`` stored mantissa (fraction)
bits, with an implicit leading 1, so it carries ``p = m + 1`` significant bits. Rounding a real number
to the nearest such number has a relative error of at most the unit roundoff ``u = 2**-p`` (half the
gap between 1 and the next number up). Everything here follows from ``e`` and ``m``; the values that
torch also knows are checked against ``torch.finfo`` in the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from course import plot

if TYPE_CHECKING:  # matplotlib is imported where a picture is drawn: a grading run draws none
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Format:
    """One binary floating-point format: a sign bit, ``exponent_bits`` and ``mantissa_bits`` stored fraction bits."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    note: str = ""

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def unit_roundoff(self) -> float:
        """Largest relative error of rounding to nearest: 2**-(mantissa_bits + 1)."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def machine_epsilon(self) -> float:
        """The gap between 1 and the next larger number: twice the unit roundoff."""
        return 2.0 ** -self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def largest(self) -> float:
        """The largest finite value: (2 - 2**-m) * 2**bias (the all-ones exponent is kept for inf and NaN)."""
        return (2.0 - 2.0 ** -self.mantissa_bits) * 2.0 ** self.bias

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** (1 - self.bias)


FORMATS: dict[str, Format] = {
    "fp32": Format("fp32", 8, 23, "IEEE single precision"),
    "tf32": Format("tf32", 8, 10, "fp32's range, fp16's mantissa: how tensor cores read fp32 inputs"),
    "fp16": Format("fp16", 5, 10, "IEEE half precision"),
    "bf16": Format("bf16", 8, 7, "the top 16 bits of an fp32"),
}


def round_mantissa(x: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """fp32 values rounded to nearest (ties to even) with ``mantissa_bits`` fraction bits, exponent range kept.

    With 10 bits this is the rounding of fp32 to tf32 (emulated: the CPU interpreter has no tf32); with 7
    it equals a conversion to bfloat16 and back. Values must be finite.
    """
    if x.dtype != torch.float32:
        raise TypeError(f"round_mantissa takes fp32 values, not {x.dtype}")
    if not 0 < mantissa_bits < 23:
        raise ValueError(f"mantissa_bits must lie between 1 and 22, not {mantissa_bits}")
    dropped = 23 - mantissa_bits
    bits = x.contiguous().view(torch.int32)
    lowest_kept = (bits >> dropped) & 1
    # Adding half an ulp minus one, plus the kept bit's parity, then clearing the dropped bits rounds to
    # nearest with ties to even; a carry ripples into the exponent exactly as it should.
    rounded = (bits + ((1 << (dropped - 1)) - 1) + lowest_kept) & ~((1 << dropped) - 1)
    return rounded.view(torch.float32).view(x.shape)


_FIELD_COLOURS = {"sign": "#c2521b", "exponent": "#3f7fbf", "mantissa": "#59a14f", "unused": "#d9d9d9"}


def bit_layout(formats: Sequence[Format] = tuple(FORMATS.values())) -> Figure:
    """One row of boxes per format: sign, exponent and mantissa bits (tf32's unused low bits in grey)."""
    import matplotlib.pyplot as plt

    if not formats:
        raise ValueError("no formats to draw")
    width = max(32, max(f.bits for f in formats))
    fig, ax = plt.subplots(figsize=(10, 0.75 * len(formats) + 1.1))
    for row, fmt in enumerate(formats):
        fields = [("sign", 1), ("exponent", fmt.exponent_bits), ("mantissa", fmt.mantissa_bits)]
        if fmt.name == "tf32":
            fields.append(("unused", 32 - fmt.bits))
        start = 0
        for field, count in fields:
            for bit in range(start, start + count):
                ax.add_patch(plt.Rectangle((bit, -row - 0.4), 0.92, 0.8, color=_FIELD_COLOURS[field]))
            if count:
                label = str(count) if field != "unused" else f"{count} ignored"
                ax.text(start + count / 2 - 0.04, -row, label, ha="center", va="center", fontsize=8,
                        color="white" if field != "unused" else "black")
            start += count
        ax.text(width + 0.6, -row, f"u = 2^-{fmt.mantissa_bits + 1} = {fmt.unit_roundoff:.1e}, "
                f"largest {fmt.largest:.3g}", va="center", fontsize=8)
    ax.set_yticks([-row for row in range(len(formats))], [f.name for f in formats])
    ax.set_xlim(-0.5, width + 14)
    ax.set_ylim(-len(formats) + 0.4, 0.9)
    ax.set_xticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _FIELD_COLOURS.values()]
    ax.legend(handles, list(_FIELD_COLOURS), ncol=4, fontsize=8, loc="upper left", frameon=False)
    ax.set_title("Bits of each format (one box per bit; u is the unit roundoff)", fontsize=10)
    fig.tight_layout()
    return fig


def error_vs_k(ks: Sequence[int], errors: Mapping[str, Sequence[float]], tolerance: float,
               roundoffs: Mapping[str, float], title: str) -> Figure:
    """Measured relative error against K (log-log), one line per way of computing, with reference levels.

    ``roundoffs`` maps a format's name to its unit roundoff, drawn as a dotted level in the colour of the
    line with the same name; ``tolerance`` is the exercise's pass line. A value of 0 (an exact result) is
    drawn at the bottom of the axis.
    """
    import matplotlib.pyplot as plt

    if not ks:
        raise ValueError("no K values to plot")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    positives = [v for values in errors.values() for v in values if v > 0]
    floor = min(positives + list(roundoffs.values()) + [tolerance]) / 4
    for number, (name, values) in enumerate(errors.items()):
        if len(values) != len(ks):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(ks)} K values")
        colour = f"C{number}"
        # Distinct markers, every other one hollow, so that two series with equal values both show.
        ax.plot(ks, [v if v > 0 else floor for v in values], marker="osD^vP"[number % 6], color=colour,
                markerfacecolor=colour if number % 2 == 0 else "none", markersize=7 if number % 2 else 5,
                label=name)
        if name in roundoffs:
            ax.axhline(roundoffs[name], color=colour, linestyle=":", linewidth=1)
    ax.axhline(tolerance, color="black", linestyle="--", linewidth=1, label=f"tolerance {tolerance:g}")
    ax.set_xscale("log", base=2)
    return plot.finish_log_plot(fig, ax, "K (length of each dot product)", "||C - C_fp64|| / ||C_fp64||", title)
