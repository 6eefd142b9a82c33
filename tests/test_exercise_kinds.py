"""The kinds of problem the exercise specs share (course/exercises/matmul.py, transpose.py): each exercise's
inputs, reference and library are what they were when its bands were measured."""

from __future__ import annotations

import math

import pytest
import torch

from course.exercises import matmul, transpose
from course.exercises import matmul_fp32 as day7_fp32
from course.exercises import w2d4_pipelining as day4
from course.exercises import w2d5_tma as day5
from course.exercises import w2d6_tensor_cores as day6
from course.exercises import w2d7_gemm_fp16 as day7
from course.spec import NO_SHAPES


def _drawn(shape, seed, drawn_in, dtype):
    m, n, k = shape
    generator = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn((m, k), generator=generator, dtype=drawn_in).to(dtype)
    return a, torch.randn((k, n), generator=generator, dtype=drawn_in).to(dtype)


@pytest.mark.parametrize(("make", "drawn_in", "dtype"), [
    (day7_fp32.make_inputs, torch.float32, torch.float32),
    (day4.matmul_inputs, torch.float32, torch.float16),
    (day5.make_inputs, torch.float32, torch.float16),
    (day6.fp16_inputs, torch.float32, torch.float16),
    (day6.bf16_inputs, torch.float32, torch.bfloat16),
    (day7.make_inputs, torch.float16, torch.float16),  # Day 7 draws in fp16 itself
])
def test_each_exercise_draws_its_inputs_as_its_bands_were_measured(make, drawn_in, dtype):
    got, expected = make((5, 3, 7), 11, "cpu"), _drawn((5, 3, 7), 11, drawn_in, dtype)
    assert all(g.dtype == dtype and torch.equal(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize(("library", "flag"), [
    (day7_fp32.cublas_fp32, "allow_tf32"),
    (day5.cublas_fp16, "allow_fp16_reduced_precision_reduction"),
    (day6.cublas_fp16, "allow_fp16_reduced_precision_reduction"),
    (day6.cublas_bf16, "allow_bf16_reduced_precision_reduction"),
    (day7.cublas_fp16, "allow_fp16_reduced_precision_reduction"),
    (day4.cublas_fp16, None),  # Day 4's bands were measured with torch's defaults
])
def test_each_library_runs_with_its_shortcut_off_and_restores_it(monkeypatch, library, flag):
    flags = torch.backends.cuda.matmul
    names = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
    saved = {name: getattr(flags, name) for name in names}  # torch's flags object: set and restored by hand
    try:
        for name in names:
            setattr(flags, name, True)
        _check_one_flag_off(monkeypatch, library, flag, flags, names)
    finally:
        for name, value in saved.items():
            setattr(flags, name, value)


def _check_one_flag_off(monkeypatch, library, flag, flags, names):
    seen = {}

    def library_mm(a, b):
        seen.update({name: getattr(flags, name) for name in names})
        return a @ b

    monkeypatch.setattr(matmul, "_library_mm", library_mm)
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    assert torch.equal(library((a, b)), a @ b)
    assert seen == {name: name != flag for name in names}  # off during the call, and only that one
    assert all(getattr(flags, name) for name in names)  # restored after it

    def broken(a, b):
        raise RuntimeError("the library failed")

    monkeypatch.setattr(matmul, "_library_mm", broken)
    with pytest.raises(RuntimeError):
        library((a, b))
    assert all(getattr(flags, name) for name in names)  # restored after a failure too


def test_the_shared_fields_count_work_as_each_kind_does():
    declared = {"id": "x", "title": "x", "function": "f", "make_inputs": None, "library": None,
                "bench_shapes": NO_SHAPES, "thresholds": ()}
    fp16, fp32 = matmul.exercise(torch.float16, **declared), matmul.exercise(torch.float32, **declared)
    assert fp16.flops((2, 3, 4)) == 48.0 and fp16.output_shape((2, 3, 4)) == (2, 3)
    assert fp16.bytes_moved((2, 3, 4)) == 2 * (8 + 12 + 6) and fp32.bytes_moved((2, 3, 4)) == 4 * 26
    assert (fp16.precision, fp32.precision, fp16.visible_shapes) == ("fp16", "fp32-ieee", matmul.VISIBLE)
    moved = transpose.exercise(**{k: v for k, v in declared.items() if k not in ("make_inputs", "library")},
                               visible_shapes=NO_SHAPES, hidden_shapes=NO_SHAPES)
    assert moved.output_shape((2, 5)) == (5, 2) and moved.bytes_moved((2, 5)) == 80.0 and moved.flops((2, 5)) == 0
    assert moved.rate_unit == "GB/s" and moved.library is transpose.torch_copy
    (x,) = transpose.make_inputs((3, 4), 1, "cpu")
    assert transpose.exact_error((x,), transpose.reference((x,))) == 0.0
    assert transpose.exact_error((x,), x.reshape(4, 3)) == math.inf
