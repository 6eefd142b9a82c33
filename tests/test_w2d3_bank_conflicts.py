"""Week 2 Day 3 (bank conflicts): the transpose spec, the bank arithmetic, and CUDA C pending without a GPU."""

from __future__ import annotations

import math
import random

import nbformat
import pytest
import torch

from course import check, spec
from course.days import banks
from grader.authoring.release import master_version
from grader.intake.layout import find_course_notebook
from grader.judge import on_cpu
from grader.kernel_build import build_cuda
from grader.score import score
from tests.conftest import HAS_GPU

SPEC = spec.get("w2d3.transpose_padded")
NOTEBOOK = find_course_notebook("week2", "day3_bank_conflicts")


def test_the_reference_is_the_transpose_of_a_hand_made_matrix():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert torch.equal(SPEC.reference((x,)), torch.tensor([[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]))
    assert SPEC.reference((x,)).is_contiguous() and SPEC.output_shape((2, 3)) == (3, 2)
    assert SPEC.bytes_moved((2, 3)) == 2 * 4 * 6 and SPEC.work((2, 3)) == 48


def test_inputs_are_fresh_random_and_follow_the_seed():
    (a,), (b,), (c,) = (SPEC.make_inputs((33, 65), seed, "cpu") for seed in (1, 1, 2))
    assert a.shape == (33, 65) and a.dtype == torch.float32 and a.is_contiguous()
    assert torch.equal(a, b) and not torch.equal(a, c) and a.abs().min() > 0


def test_the_spot_check_is_exact():
    (x,) = SPEC.make_inputs((40, 70), 3, "cpu")
    out = x.t().contiguous()
    assert SPEC.spot_error((x,), out) == 0.0
    nudged = out.clone()
    nudged[5, 7] = torch.nextafter(nudged[5, 7], torch.tensor(math.inf))
    assert SPEC.spot_error((x,), nudged) == math.inf
    unwritten = out.clone()
    unwritten[-1, -1] = float("nan")
    assert SPEC.spot_error((x,), unwritten) == math.inf
    assert SPEC.spot_error((x,), x.clone()) == math.inf  # the input itself, not transposed


def test_the_baseline_is_a_plain_copy():
    (x,) = SPEC.make_inputs((8, 9), 0, "cpu")
    copied = SPEC.library((x,))
    assert torch.equal(copied, x) and copied.data_ptr() != x.data_ptr()


def test_drawn_hidden_shapes_are_odd_and_never_tile_multiples():
    for seed in range(50):
        for has_gpu, limit in ((True, 5000), (False, 70)):
            shapes = SPEC.draw_hidden(random.Random(seed), has_gpu)
            assert len(shapes) == 2 and all(0 < side <= limit and side % 2 for shape in shapes for side in shape)
    assert SPEC.draw_hidden(random.Random(7), True) == SPEC.draw_hidden(random.Random(7), True)


def test_the_spec_is_cuda_c_and_its_thresholds_are_named():
    assert SPEC.language == "cuda" and SPEC.rate_unit == "GB/s" and SPEC.library_name == "torch copy"
    assert {t.name for t in SPEC.thresholds} == {"vs_copy", "vs_reference"}
    with pytest.raises(ValueError, match="language"):
        spec.ExerciseSpec(**{**SPEC.__dict__, "id": "x.y", "language": "fortran"})


@pytest.mark.parametrize("width", range(1, 97))
def test_a_column_read_needs_gcd_of_width_and_32_passes(width):
    assert banks.ways(banks.column_words(width)) == math.gcd(width, 32)
    assert banks.ways(banks.row_words_of(5, width)) == 1


def test_bank_arithmetic_by_hand():
    assert banks.bank(5 * 33 + 7) == 12 and banks.bank(32) == 0
    assert banks.ways([3, 3, 3]) == 1  # one word for everyone: a broadcast
    assert banks.ways([0, 32, 64, 0]) == 3
    assert banks.threads_per_bank(banks.column_words(32))[0] == 32
    assert banks.threads_per_bank(banks.column_words(33)) == [1] * 32


def test_the_bank_picture_draws_on_a_cpu():
    figure = banks.plot_column_read((32, 33))
    assert len(figure.axes) == 4 and "32-way" in figure.axes[0].get_title()
    assert "no conflict" in figure.axes[1].get_title()


def _solution_cells() -> dict[str, str]:
    nb = nbformat.read(str(NOTEBOOK.solution_path), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if c.cell_type == "code"}


def test_the_solution_answers_follow_from_the_bank_arithmetic():
    namespace: dict = {}
    source = "\n".join(line for line in _solution_cells()["answers"].splitlines() if "###" not in line)
    exec(source, namespace)
    assert namespace["shared_bytes_padded"] == 32 * 33 * banks.WORD_BYTES
    assert namespace["bank_of_5_7"] == banks.bank(5 * 33 + 7)
    assert namespace["passes_width_40"] == banks.ways(banks.column_words(40))
    assert namespace["row_read_conflicts"] is (banks.ways(banks.row_words_of(0, 32)) > 1)


def test_the_builder_finds_every_source_and_the_padded_one_moves_the_same_elements():
    """The reference pads the given kernel's tile and runs its loops a constant count (measured
    2026-11-27); every load and store keeps the given kernel's indexing. Its other two kernels, for odd row counts
    and for sides that are multiples of 64 (both measured on an H200, 2026-11-28), are the reference's own and
    keep a padded tile."""
    constants = build_cuda.string_constants(list(_solution_cells().values()))
    sources = [s for s in constants.values() if "__global__" in s]
    tiles = ("tile[TILE][TILE];", "tile[TILE][TILE + 1];", "tile[TILE + 8][TILE + 1];", "tile[64][64 + 1];")
    by_tile = {tile: [s for s in sources if f"__shared__ float {tile}" in s] for tile in tiles}
    assert len(sources) == 4 and all(len(found) == 1 for found in by_tile.values()), by_tile.keys()
    conflicted, padded = by_tile[tiles[0]][0], by_tile[tiles[1]][0]

    def moves(source: str) -> list[str]:
        return [line.strip() for line in source.splitlines()
                if ("= in[" in line or "out[" in line) and not line.strip().startswith("//")]

    assert moves(padded) == moves(conflicted) and len(moves(padded)) == 2
    assert "for (int j = 0; j < TILE / ROWS; ++j)" in padded


def test_without_a_gpu_the_check_is_pending_and_never_calls_the_function(capsys):
    if HAS_GPU:
        pytest.skip("this machine has a GPU")

    def raises(x):
        raise AssertionError("called")

    check.assert_correct(SPEC, raises, "visible")
    assert "pending a GPU run" in capsys.readouterr().out


def test_the_cpu_judge_leaves_cuda_kernels_pending_and_the_scorer_says_so(tmp_path):
    calls = [{"key": "visible-0", "set": "visible", "shape": [64, 64], "seed": 1},
             {"key": "hidden-0", "set": "hidden", "shape": [17, 40], "seed": 2}]
    job = {"export": str(tmp_path), "replayed": str(tmp_path), "notebook": str(NOTEBOOK.solution_path),
           "kernels": [{"spec": SPEC.id, "calls": calls, "bench_shapes": []}]}
    verdict = on_cpu.judge_cpu(job)
    sets = verdict["kernels"][SPEC.id]["sets"]
    assert set(sets) == {"visible", "hidden"} and all(s["pending"] for s in sets.values())
    items = {i.item: i for i in score.items(NOTEBOOK.key, master_version(NOTEBOOK), verdict, False, "")}
    for item in ("test_transpose_visible", "test_transpose_hidden", "perf_w2d3_transpose_padded_vs_copy",
                 "perf_w2d3_transpose_padded_vs_reference"):
        assert items[item].score is None and items[item].status == "pending", item
    # On a GPU a pending set (which only a CPU judge writes) is no pass.
    gpu_items = {i.item: i for i in score.items(NOTEBOOK.key, master_version(NOTEBOOK), verdict, True, "")}
    assert gpu_items["test_transpose_visible"].score == 0


@pytest.mark.gpu
def test_both_kernels_of_the_solution_transpose_exactly(tmp_path):
    import numpy as np

    import course

    cells = _solution_cells()
    namespace = {"course": course, "np": np, "torch": torch, "SPEC": SPEC, "grading": False}
    for grade_id in ("conflicted_kernel", "padded_source", "transpose_padded"):
        exec(cells[grade_id], namespace)
    for name in ("transpose_conflicted", "transpose_padded"):
        results = check.check(SPEC, namespace[name], "hidden") + check.check(SPEC, namespace[name], "visible")
        assert all(r.passed for r in results), [r.line() for r in results]
    # The reference's 16-byte kernel takes sides that are multiples of 64 starting on 16 bytes; a matrix that
    # starts 4 bytes further goes to the padded kernel.
    for offset in (0, 1):
        x = torch.randn(512 * 640 + offset, device="cuda")[offset:].view(512, 640)
        assert torch.equal(namespace["transpose_padded"](x), x.t()), offset
