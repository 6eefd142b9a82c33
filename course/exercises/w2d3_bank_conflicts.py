"""Week 2 Day 3: a matrix transpose through shared memory, in CUDA C, with the tile padded against bank conflicts.

``transpose_padded(x)`` returns ``x.T`` as a new contiguous fp32 tensor, computed by a CUDA C kernel
(``course.cuda``) that stages 32 x 32 tiles in shared memory declared ``[32][33]``. A transpose only
moves data, so the answer is exact and its speed is a bandwidth: GB/s of bytes read plus bytes written,
compared with torch copying the same matrix (the most a kernel that reads and writes each element once
can hope for) and with the course's own padded kernel, both in the same run.
"""

from __future__ import annotations

import random

from course import grading_table
from course.exercises import transpose
from course.spec import Shape, ShapeSet, register, vs_library, vs_reference


def draw_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Two shapes per grading run, each side odd (never a multiple of the 32-wide tile), one of them thin."""
    limit = 5000 if has_gpu else 70
    wide = (rng.randrange(33, limit, 2), rng.randrange(33, limit, 2))
    thin = (rng.randrange(1, 32, 2), rng.randrange(33, limit, 2))
    return (wide, thin if rng.random() < 0.5 else thin[::-1])


SPEC = register(
    transpose.exercise(
        id="w2d3.transpose_padded",
        title="Shared-memory transpose, padded against bank conflicts (Week 2, Day 3)",
        function="transpose_padded",
        # Not multiples of the 32-wide tile in either direction, single rows and columns, and wide and tall
        # matrices: a kernel without bounds checks, or with rows and columns swapped, fails these.
        visible_shapes=ShapeSet(
            gpu=((512, 512), (1000, 1030), (1, 300), (300, 1)),
            cpu=((64, 64), (33, 65)),
        ),
        hidden_shapes=ShapeSet(
            gpu=((2048, 1024), (129, 4097), (3001, 17), (1, 1)),
            cpu=((17, 40), (1, 1)),
        ),
        bench_shapes=ShapeSet(
            gpu=((4096, 4096), (8192, 8192), (8192, 2048), (3001, 5003)),
            cpu=(),
        ),
        thresholds=(
            # Measured on an H100 (bench/RESULTS.md in the course's online repository): a padded kernel with the given
            # kernel's loops reached 0.84 of torch's copy (geometric mean; 0.90-0.91 on the aligned shapes, 0.68 on 3001
            # x 5003), and the conflicted kernel 0.51 (ncu: 16.6 M shared-load bank conflicts at 4096^2 against 55 k
            # padded). On an H200 (through the judge) the same padded kernel read 0.78-0.82 aligned and 0.66 odd:
            # 0.765. Full points at 0.72 leave room for drift; the conflicted kernel (0.43-0.46 on the H200) earns
            # nothing.
            vs_library("vs_copy", "torch's copy", 2.0, ((0.58, 0.25), (0.63, 0.5), (0.68, 0.75), (0.72, 1.0)),
                       "fp32, exact (a copy) against torch copying the same matrix", unit="GB/s"),
            # The reference has two kernels of its own besides the padded one: sector-aligned runs where the row
            # count is no multiple of 8 (2026-11-28: 3001 x 5003 from 0.69 to 0.94 of copy on an H100 in a bench
            # script, 0.83-0.85 on an H200 in the judge) and 16-byte loads and stores where both sides are
            # multiples of 64 (2026-11-28: 0.94-0.98 of copy on the aligned shapes on an H200, the judge; a
            # similar kernel 0.97-0.99 on an H100 the same day). Against it, the padded kernel with the given
            # loops measured 0.82 on the H200 (geometric mean; about 0.87 expected on the H100 from the ratios
            # above), the conflicted kernel 0.46 on the H200 (about 0.53 on the H100). Full points at 0.75 leave
            # the given loops room; nothing below 0.56.
            vs_reference(2.0, ((0.56, 0.25), (0.63, 0.5), (0.69, 0.75), (0.75, 1.0)),
                         "fp32, exact, against the course's padded kernel", unit="GB/s"),
        ),
        notebook="week2/day3_bank_conflicts",
        correctness_cells={"test_transpose_visible": "visible", "test_transpose_hidden": "hidden"},
        draw_hidden=draw_hidden,
        language="cuda",
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week2/day3_bank_conflicts",
    (
        grading_table.Cells(
            "visible correctness",
            "`transpose_padded` on the shapes printed by the check below",
            {"test_transpose_visible": 2},
        ),
        grading_table.Cells(
            "hidden correctness",
            "more shapes: thin, odd-sized, a single element",
            {"test_transpose_hidden": 3},
        ),
        grading_table.Speed(
            "`vs_copy`",
            "your bandwidth as a fraction of torch copying the same matrix",
            ((SPEC, "vs_copy"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your bandwidth as a fraction of the course's padded kernel",
            ((SPEC, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_shared_bytes": 1, "test_bank_of_5_7": 1, "test_passes_width_40": 1, "test_row_read": 1},
        ),
    ),
))
