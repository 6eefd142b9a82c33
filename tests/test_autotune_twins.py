"""bench/autotune_twins.py: two copies' ratios compared shape by shape, and the 2% check that can fail."""

from __future__ import annotations

from bench import autotune_twins
from bench.graded_results import Record

W2D7 = "week2/day7_optimized_gemm"


def _record(student: str, rates: list[float]) -> Record:
    configs = {"picked": "BLOCK_M: 128", "run_picked": "BLOCK_M: 64"}
    rows = [{"spec": "w2d7", "shape": [n, n, n], "student_rate": rate, "reference_rate": 100.0, "baseline_rate": 120.0,
             "configs": configs} for n, rate in zip((4096, 8192), rates, strict=True)]
    return Record(student, W2D7, "ok", {}, {}, rows)


def test_two_copies_within_two_percent_pass_and_a_wider_gap_fails():
    close = autotune_twins.compare([_record("a", [99.0, 101.0]), _record("b", [100.0, 100.0])], "a", "b", W2D7)
    assert close["within_tolerance"] and abs(close["largest_difference"] - 0.01) < 1e-9
    first = close["shapes"][0]["a"]
    assert first["graded"] == "BLOCK_M: 128" and first["run_picked"] == "BLOCK_M: 64"
    apart = autotune_twins.compare([_record("a", [93.9, 100.0]), _record("b", [100.2, 100.0])], "a", "b", W2D7)
    assert not apart["within_tolerance"] and apart["largest_difference"] > 0.06


def test_a_copy_that_was_not_timed_fails_the_check():
    untimed = autotune_twins.compare([_record("a", [0.0, 100.0]), _record("b", [100.0, 100.0])], "a", "b", W2D7)
    assert not untimed["within_tolerance"]
