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

# Week 1 Day 7's reference launch at 4096^3: the demo class's fast_correct student, whose kernel has the reference's
# tile, warps and stages, read by bench/ncu_own_kernels.py in the course's online repository (the same program
# section 7 of Week 2 Day 1 profiles).
OWN_KERNELS = "2026-12-07-w2-ncu-own-kernels-7660d9f.json"
W1D7_REFERENCE_LAUNCH = Recorded(
    "the Week 1 Day 7 reference launch (64 x 64 tiles, 4 warps, fp32) at 4096^3",
    H100, "2026-12-07", f"{OWN_KERNELS}, kernels.w1d7_student",
    (Reading("W1D7 reference", 2.0 * 4096**3, 3.1925760000000003e-3, 2045013248.0, 69795840.0, 96.0, 30.04,
             {"not_selected": 2.89, "dispatch_stall": 0.94, "short_scoreboard": 0.59, "barrier": 0.4, "wait": 0.11,
              "math_pipe_throttle": 0.06, "long_scoreboard": 0.02, "no_instruction": 0.02}),),
)

_FP16_8192 = 2.0 * 8192**3
_D4_REF = Reading("128x128x64 w8 s4 2-D grid", _FP16_8192, 2.061824e-3, 4365183232.0, 132254976.0, 114.0, 12.63,
                  {"wait": 1.81, "barrier": 0.65, "long_scoreboard": 0.58})
_GROUPED = Reading("128x256x64 w8 s4 grouped", _FP16_8192, 1.565664e-3, 1523437056.0, 132178688.0, 220.0, 12.45,
                   {"barrier": 2.3, "wait": 2.06, "long_scoreboard": 0.55})
_GRID_2D = Reading("128x256x64 w8 s4 2-D grid", _FP16_8192, 1.685856e-3, 3015911936.0, 132972544.0, 197.0, 12.45,
                     {"barrier": 2.41, "wait": 2.04, "long_scoreboard": 0.57})
_CUBLAS = Reading("cuBLAS fp16", _FP16_8192, 1.508544e-3, 1280433664.0, 130380800.0, 168.0, 14.79,
                  {"gmma": 4.81, "long_scoreboard": 2.74, "mio_throttle": 2.05})

# Week 2 Day 4: the old reference tile (128 x 128 x 64, 4 stages), the wider 4-stage tile and cuBLAS, fp16 8192^3.
W2D4_PIPELINED = Recorded(
    "Week 2 Day 4's kernel at 8192^3 fp16: 128 x 128 x 64 with 4 stages, 128 x 256 x 64 with 4 stages, and cuBLAS",
    H100, "2026-11-28", f"{W2D456}, ncu_8192 ('Day 4 ref', 'Day 4 best', 'cuBLAS fp16 (Day 4: torch defaults)')",
    (_D4_REF, _GROUPED, _CUBLAS),
)

# Week 2 Day 7: one tile and launch (128 x 256 x 64, 8 warps, 4 stages) on a 2-D grid (pid_m fastest: waves go down
# columns of tiles) and in grouped tile order.
W2D7_TILE_ORDER = Recorded(
    "one launch (128 x 256 x 64, 8 warps, 4 stages) at 8192^3 fp16, on a 2-D grid (pid_m fastest) and in grouped "
    "(GROUP_M 8) tile order",
    H100, "2026-11-28", f"{W2D456}, ncu_8192 ('Day 6 fp16 best', 'Day 4 best')",
    (_GRID_2D, _GROUPED),
)
