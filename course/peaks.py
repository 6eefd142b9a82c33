"""Datasheet peak rates of common GPUs: the vendor's numbers, not measurements.

Tensor-core rates are the dense figures (NVIDIA's datasheets also print twice as much "with
sparsity"). Every number here is a datasheet figure; measured numbers live in bench/RESULTS.md in the course's online
repository.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "NVIDIA datasheet (dense, no sparsity)"


@dataclass(frozen=True)
class DatasheetPeaks:
    """Peak rates in TFLOP/s and memory bandwidth in GB/s; ``None`` where the GPU has no such unit."""

    gpu: str
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    memory_gbps: float
    source: str = SOURCE

    def tflops(self, precision: str) -> float | None:
        return {
            "fp32": self.fp32_tflops,
            "tf32": self.tf32_tflops,
            "fp16": self.fp16_tflops,
            "bf16": self.bf16_tflops,
        }[precision]


_TABLE = (
    # (substrings that must all appear in the lower-cased device name, peaks)
    (("h200",), DatasheetPeaks("H200 SXM", 67.0, 494.7, 989.4, 989.4, 4800.0)),
    (("h100", "pcie"), DatasheetPeaks("H100 PCIe", 51.0, 378.0, 756.0, 756.0, 2000.0)),
    (("h100",), DatasheetPeaks("H100 SXM", 67.0, 494.7, 989.4, 989.4, 3350.0)),
    (("a100", "40gb"), DatasheetPeaks("A100 40GB", 19.5, 156.0, 312.0, 312.0, 1555.0)),
    (("a100", "pcie"), DatasheetPeaks("A100 80GB PCIe", 19.5, 156.0, 312.0, 312.0, 1935.0)),
    (("a100",), DatasheetPeaks("A100 80GB SXM", 19.5, 156.0, 312.0, 312.0, 2039.0)),
    (("l4",), DatasheetPeaks("L4", 30.3, 60.0, 121.0, 121.0, 300.0)),
    (("t4",), DatasheetPeaks("T4", 8.1, None, 65.0, None, 320.0)),
)


def datasheet_peaks(device_name: str) -> DatasheetPeaks | None:
    """The datasheet entry for a device name as PyTorch reports it, or ``None`` if unknown."""
    words = device_name.lower().replace("-", " ").split()
    text = " ".join(words)
    for needles, peaks in _TABLE:
        # "l4" and "t4" are matched as whole words so that e.g. "A100-SXM4" is not read as "T4".
        if all((n in words) if len(n) <= 2 else (n in text) for n in needles):
            return peaks
    return None


SM_SOURCE = "NVIDIA datasheets and architecture whitepapers"


@dataclass(frozen=True)
class DatasheetSMs:
    """What a GPU's FP32 peak is built from: SMs, FP32 lanes per SM and the boost clock (datasheet figures).

    Each FP32 lane finishes one fused multiply-add (two floating-point operations) per clock, so the
    peak is ``2 * sm_count * fp32_cores_per_sm * boost_clock_mhz * 1e6`` FLOP/s. ``gpu`` names the
    ``DatasheetPeaks`` entry these figures belong to.
    """

    gpu: str
    sm_count: int
    fp32_cores_per_sm: int
    boost_clock_mhz: int
    source: str = SM_SOURCE

    @property
    def fp32_tflops(self) -> float:
        return 2 * self.sm_count * self.fp32_cores_per_sm * self.boost_clock_mhz * 1e6 / 1e12


SM_TABLE = (
    DatasheetSMs("H200 SXM", 132, 128, 1980),
    DatasheetSMs("H100 SXM", 132, 128, 1980),
    DatasheetSMs("H100 PCIe", 114, 128, 1755),
    DatasheetSMs("A100 80GB SXM", 108, 64, 1410),
    DatasheetSMs("A100 80GB PCIe", 108, 64, 1410),
    DatasheetSMs("A100 40GB", 108, 64, 1410),
    DatasheetSMs("L4", 58, 128, 2040),
    DatasheetSMs("T4", 40, 64, 1590),
)


def datasheet_sms(device_name: str) -> DatasheetSMs | None:
    """The SM figures for a device name as PyTorch reports it, or ``None`` if unknown."""
    peaks = datasheet_peaks(device_name)
    if peaks is None:
        return None
    return next((entry for entry in SM_TABLE if entry.gpu == peaks.gpu), None)
