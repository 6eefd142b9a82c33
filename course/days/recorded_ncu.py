"""Nsight Compute readings recorded on the course's H100, shown where a notebook cannot read the counters itself.

Each ``Recorded`` names its GPU, date and the results file it was copied from, a file under
``bench/results/h100/`` in the course's online repository; ``tests/test_w2d1_profiling.py`` in the course's online
repository checks every value here against that file. Reading counters needs a GPU, ncu and permission to use the
counters, which a CPU, the grader's shared GPU or a machine without admin rights lack.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.days.own_kernel import Reading


@dataclass(frozen=True)
class Recorded:
    what: str
    gpu: str
    date: str
    source: str  # the results file, and the key the readings came from
    readings: tuple[Reading, ...]

    def caption(self) -> str:
        return f"{self.what}; {self.gpu}, {self.date}, ncu --clock-control none ({self.source})"


H100 = "NVIDIA H100 80GB HBM3"
# The results files, under bench/results/h100/ in the course's online repository.
W2D456 = "2026-11-28-w2d456-limits.json"
NAN = float("nan")

# Week 1 Day 7's reference launch at 4096^3: the tile, warps and stages of the demo class's fast_correct student.
W1D7_REFERENCE_LAUNCH = Recorded(
    "the Week 1 Day 7 reference launch (64 x 64 x 32 tiles, 4 warps, 3 stages, fp32) at 4096^3; DRAM bytes were not "
    "read in this recording",
    H100, "2026-11-28", "2026-11-28-w1d7-fp32-dot-limit.json, ncu_4096.ref",
    (Reading("W1D7 64x64x32 w4 s3", 2.0 * 4096**3, 3.2614080000000003e-3, NAN, NAN, 96.0, 30.11,
             {"not_selected": 2.71, "dispatch_stall": 0.92, "short_scoreboard": 0.88, "barrier": 0.34,
              "wait": 0.17, "math_pipe_throttle": 0.08, "long_scoreboard": 0.02, "no_instruction": 0.02}),),
)

_FP16_8192 = 2.0 * 8192**3
_D4_REF = Reading("128x128x64 w8 s4 row-major", _FP16_8192, 2.061824e-3, 4365183232.0, 132254976.0, 114.0, 12.63,
                  {"wait": 1.81, "barrier": 0.65, "long_scoreboard": 0.58})
_GROUPED = Reading("128x256x64 w8 s4 grouped", _FP16_8192, 1.565664e-3, 1523437056.0, 132178688.0, 220.0, 12.45,
                   {"barrier": 2.3, "wait": 2.06, "long_scoreboard": 0.55})
_ROW_MAJOR = Reading("128x256x64 w8 s4 row-major", _FP16_8192, 1.685856e-3, 3015911936.0, 132972544.0, 197.0, 12.45,
                     {"barrier": 2.41, "wait": 2.04, "long_scoreboard": 0.57})
_CUBLAS = Reading("cuBLAS fp16", _FP16_8192, 1.508544e-3, 1280433664.0, 130380800.0, 168.0, 14.79,
                  {"gmma": 4.81, "long_scoreboard": 2.74, "mio_throttle": 2.05})

# Week 2 Day 4: the old reference tile (128 x 128 x 64, 4 stages), the wider 4-stage tile and cuBLAS, fp16 8192^3.
W2D4_PIPELINED = Recorded(
    "Week 2 Day 4's kernel at 8192^3 fp16: 128 x 128 x 64 with 4 stages, 128 x 256 x 64 with 4 stages, and cuBLAS",
    H100, "2026-11-28", f"{W2D456}, ncu_8192 ('Day 4 ref', 'Day 4 best', 'cuBLAS fp16 (Day 4: torch defaults)')",
    (_D4_REF, _GROUPED, _CUBLAS),
)

# Week 2 Day 7: one tile and launch (128 x 256 x 64, 8 warps, 4 stages) in row-major and in grouped tile order.
W2D7_TILE_ORDER = Recorded(
    "one launch (128 x 256 x 64, 8 warps, 4 stages) at 8192^3 fp16, in row-major and in grouped (GROUP_M 8) tile order",
    H100, "2026-11-28", f"{W2D456}, ncu_8192 ('Day 6 fp16 best', 'Day 4 best')",
    (_ROW_MAJOR, _GROUPED),
)
