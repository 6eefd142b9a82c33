"""The quiz answers of every notebook: what each one is (type, unit, form) and how closely it is graded.

The release writes each answer's placeholder line from its spec (``stub_line``); a visible test cell
calls ``check_answer`` and the grader's hidden test ``matches``, both with the same spec, so the
tolerance the stub states is the one graded. Expected values live only in the hidden tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NOT_ANSWERED = "not answered yet"

# Forms: what a value of the answer's type must look like.
PLAIN = "plain"  # the unit says it all
COUNT = "count"  # a number of things: never negative
FRACTION = "fraction"  # between 0 and 1, never a percent
CHOICE = "choice"  # one of the strings in ``choices``
LETTERS = "letters"  # some of the letters in ``choices``, in any order (case, spaces and commas ignored)


@dataclass(frozen=True)
class Answer:
    name: str
    kind: type  # int, float, bool or str; a float answer also takes an int
    unit: str = ""  # what the value counts or measures
    form: str = PLAIN
    rel: float = 0.0  # a float's relative tolerance; the other kinds compare exactly
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        """The stub's comment: type, unit or form, and tolerance."""
        if self.kind is bool:
            said = "True or False"
        elif self.form == COUNT:
            said = f"a number of {self.unit}"
        elif self.form == FRACTION:
            said = "a fraction between 0 and 1 (0.1 for a tenth), not a percent"
        elif self.form == CHOICE:
            said = "one of " + ", ".join(f'"{choice}"' for choice in self.choices)
        elif self.form == LETTERS:
            said = f'some of the letters {", ".join(self.choices)}, in one string'
        else:
            said = self.unit
        if self.kind is float:
            said += f", within {self.rel * 100:g}%"
        return f"{self.kind.__name__}: {said}"


def _count(name: str, unit: str) -> Answer:
    return Answer(name, int, unit, COUNT)


def _number(name: str, unit: str, rel: float = 1e-3) -> Answer:
    return Answer(name, float, unit, rel=rel)


def _fraction(name: str) -> Answer:
    return Answer(name, float, form=FRACTION, rel=1e-3)


def _yes_no(name: str) -> Answer:
    return Answer(name, bool)


# Every unit that could be read two ways states its base: FLOPs count a multiply-add as 2, a GB is 10**9 bytes.
FLOPS = "FLOPs (a multiply-add counts as 2)"
FLOP_PER_BYTE = "FLOP per byte (a multiply-add counts as 2)"
GFLOPS = "GFLOP/s (1 GFLOP = 10**9 FLOPs, a multiply-add counts as 2)"
GBPS = "GB/s (1 GB = 10**9 bytes)"
_SAXPY_INTENSITY = _number("saxpy_intensity", FLOP_PER_BYTE, rel=0.01)
_UNIT_ROUNDOFF = "a relative error as a plain number, not a percent"

# Notebook key -> its answers, in the order its answer cell asks for them.
QUIZZES: dict[str, tuple[Answer, ...]] = {
    "week1/day1_host_baseline": (
        _count("matmul_flops", FLOPS), _count("matmul_bytes", "bytes"), _count("saxpy_bytes", "bytes"),
        _number("gflops_from_time", GFLOPS), _number("mean_of_all_ms", "milliseconds")),
    "week1/day2_gpu_arrays": (
        _number("copy_ms_2_28", "milliseconds", rel=0.01),
        _number("copy_vs_add", "a ratio, copy time over add time", rel=0.01),
        Answer("waiting_lines", str, form=LETTERS, choices=("a", "b", "c", "d", "e")),
        _number("overlapped_ms", "milliseconds")),
    "week1/day3_the_machine": (
        _count("warps_for_200_threads", "warps"), _count("resident_blocks_per_sm", "blocks"),
        _fraction("occupancy_q2"), _count("lanes_busy_in_a", "lanes")),
    "week1/day4_first_triton_kernel": (
        _count("programs_needed", "programs"), _count("masked_lanes", "lanes"), _SAXPY_INTENSITY,
        _number("add_gbps", GBPS)),
    "week1/day5_memory": (
        _SAXPY_INTENSITY, _number("h100_fp16_ridge", FLOP_PER_BYTE, rel=0.01),
        _count("fma_repeats_at_ridge", "repeats (R)"), _count("warp_sectors_stride16", "sectors")),
    "week1/day6_tiling": (
        _count("untiled_bytes", "bytes"), _count("tiled_bytes", "bytes"),
        _number("reduction_128x32", "a ratio, untiled bytes over tiled bytes"),
        Answer("best_block_m", int, "a BLOCK_M, in rows"), _yes_no("sum_form_passes_on_gpu")),
    "week1/day7_fast_matmul": (
        _count("flops_4096", FLOPS), _count("a_reads_per_element", "reads"),
        _number("step_intensity", FLOP_PER_BYTE), _yes_no("tf32_would_pass")),
    "week2/bonus_sgemm_ladder": (
        _count("b_loads_v3", "loads"), _count("v5_a_read_passes", "passes"), _count("v6b_shared_bytes", "bytes"),
        _yes_no("row1_float4_aligned")),
    "week2/day1_profiling": (
        _number("ridge_h100_fp32", FLOP_PER_BYTE), _count("steps_at_ridge", "Horner steps"),
        _number("bandwidth_gbps", GBPS),
        Answer("low_both", str, form=CHOICE, choices=("memory", "compute", "latency"))),
    "week2/day2_coalescing": (
        _count("sectors_naive_read", "sectors"), _count("bytes_16384x4096", "bytes"), _fraction("useful_stride_2")),
    "week2/day3_bank_conflicts": (
        _count("shared_bytes_padded", "bytes"), Answer("bank_of_5_7", int, "a bank number, 0 to 31"),
        _count("passes_width_40", "passes"), _yes_no("row_read_conflicts")),
    "week2/day4_pipelining": (
        _count("max_stages_128x128x64", "stages"), _count("programs_per_sm_3_stages", "programs"),
        _count("stages_to_hide_loads", "stages"), _yes_no("more_stages_always_faster")),
    "week2/day5_tma": (
        Answer("tma_min_major", int, "a compute capability's major version"),
        _count("k_multiple_fp16", "elements"), _count("box_bytes", "bytes"), _count("edge_rows", "rows")),
    "week2/day6_tensor_cores": (
        _number("fp16_unit_roundoff", _UNIT_ROUNDOFF, rel=0.01),
        _number("bf16_unit_roundoff", _UNIT_ROUNDOFF, rel=0.01),
        Answer("bf16_error_exponent", int, "the exponent e of a power of ten"),
        _number("fp16_accumulator_growth", "a ratio, error at K = 65536 over error at K = 4096", rel=0.1)),
    "week2/day7_optimized_gemm": (
        _count("stage_bytes", "bytes"), _count("stages_that_fit", "stages"), _count("last_wave_sms", "SMs"),
        _count("first_wave_panels_grouped", "panels")),
    # Week 3: one entry per day, in day order.
    "week3/day1_reductions": (
        _count("sum_bytes_2_28", "bytes"), _count("atomics_2_28_block_4096", "atomic adds"),
        _count("race_smallest_out", "the value out holds (an integer)"), _yes_no("max_order_free")),
    "week3/day2_fused_softmax": (
        _count("softmax_bytes_4096x32768", "bytes"), Answer("exp_overflow_z", int, "the smallest integer z"),
        _number("online_rescaled_sum", "a sum of exponentials"), _count("three_kernel_reads", "reads of x")),
    "week3/day3_norms": (
        _count("rmsnorm_bytes_4096x8192", "bytes"), _number("rstd_3_4", "1 / RMS, a plain number"),
        _count("dw_partial_rows", "rows of partial sums"), _yes_no("dw_atomics_deterministic")),
    "week3/day4_fused_epilogue": (
        _count("extra_bytes", "bytes"), Answer("bias_index", str, form=CHOICE, choices=("row", "column")),
        _number("gelu_at_one", "GELU's value, a plain number"), _number("gemm_intensity", FLOP_PER_BYTE)),
    "week3/day5_flash_attention": (
        _count("causal_flops", FLOPS), _count("score_bytes", "bytes"), _fraction("rescale_factor"),
        _count("last_program_blocks", "blocks of keys")),
}


def _by_name() -> dict[str, Answer]:
    found: dict[str, Answer] = {}
    for quiz in QUIZZES.values():
        for answer in quiz:
            if found.setdefault(answer.name, answer) != answer:
                raise ValueError(f"two different answers are called {answer.name}")
    return found


ANSWERS = _by_name()


def stub_line(name: str) -> str:
    """The line a released notebook holds in place of the answer's solution."""
    return f"{name} = ...  # {ANSWERS[name].describe()}"


_WANTED = {int: "an int", float: "a float (or an int)", bool: "True or False", str: "a string"}


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be graded as answer ``name`` (starting with the name), or None if it can."""
    answer = ANSWERS[name]
    if value is Ellipsis:
        return f"{name}: {NOT_ANSWERED} (replace the ... with your answer)"
    kinds = (int, float) if answer.kind is float else (answer.kind,)
    if type(value) not in kinds:  # exact types: a subclass could redefine ==
        wanted = _WANTED[answer.kind]
        return f"{name}: should be {wanted}, not {_type_name(value)}"
    if type(value) is float and not math.isfinite(value):
        return f"{name}: should be a finite number, not {value!r}"
    if answer.form == COUNT and value < 0:
        return f"{name}: a number of {answer.unit} cannot be negative"
    if answer.form == FRACTION and value > 1:
        return f"{name}: a fraction between 0 and 1 is asked, not a percent: write 10% as 0.1, not {value!r}"
    if answer.form == FRACTION and value < 0:
        return f"{name}: a fraction between 0 and 1 is asked, not {value!r}"
    if answer.form == CHOICE and value not in answer.choices:
        return f"{name}: should be one of " + ", ".join(f'"{c}"' for c in answer.choices)
    if answer.form == LETTERS and not _letters(value) <= set(answer.choices):
        return f"{name}: use only the letters {', '.join(answer.choices)}"
    return None


def _letters(text: str) -> set[str]:
    return set(text.lower()) - set(" ,")


def check_answer(name: str, value: Any) -> None:
    """The visible test: raises AssertionError saying what is wrong with the answer's type or form."""
    found = problem(name, value)
    if found:
        raise AssertionError(found)


def matches(name: str, value: Any, expected: Any) -> bool:
    """The hidden test's comparison, with the answer's own tolerance; False for anything ungradable."""
    answer = ANSWERS[name]
    if problem(name, value) is not None:
        return False
    if answer.form == LETTERS:
        return _letters(value) == _letters(expected)
    if answer.kind is float:
        try:
            return math.isclose(value, expected, rel_tol=answer.rel, abs_tol=0.0)
        except OverflowError:  # an int too large for a float
            return False
    return value == expected and type(value) is type(expected)
