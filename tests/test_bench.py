import math

import pytest
import torch

from course import bench, device, spec
from tests.kernels import good_matmul


def test_flop_and_byte_rates():
    assert bench.gflops(2e9, 1.0) == pytest.approx(2000.0)
    assert bench.gbps(1e9, 2.0) == pytest.approx(500.0)


def test_timing_statistics():
    timing = bench.Timing([1.0, 2.0, 3.0, 4.0, 100.0])
    assert timing.median_ms == 3.0 and timing.repeats == 5
    assert timing.spread > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_without_a_gpu_nothing_is_measured():
    report = bench.measure("w1d7.matmul_fp32", good_matmul)
    assert not report.measured and report.not_measured == bench.NO_GPU
    assert "not measured: no GPU" in report.table()
    with pytest.raises(RuntimeError, match="no GPU"):
        bench.time_calls(lambda: None)


@pytest.mark.gpu
def test_flush_buffer_is_at_least_twice_the_l2():
    bench.time_calls(lambda: None, min_repeats=1, max_repeats=1, warmup=0)
    assert bench._get_flusher().buffer.numel() * 4 >= 2 * device.info().l2_bytes


@pytest.mark.gpu
def test_interleaved_entries_take_turns_and_one_that_fails_leaves_the_others_timed():
    x = torch.randn(1 << 20, device="cuda")
    order = []

    def entry(name, fail_at=None):
        def make_args(i):
            if i == fail_at:
                raise ValueError(f"{name} cannot go on")
            return (name,)
        return bench.Timed(lambda n: order.append(n) or x.mul(2.0), make_args)

    a, b, c = bench.time_interleaved([entry("a"), entry("b", fail_at=3), entry("c")], drop_on=(ValueError,),
                                     warmup=1, warmup_ms=0, min_repeats=6, min_seconds=0, target_spread=math.inf)
    timed = order[3:]  # after one warm-up call of each
    assert timed[:9] == ["a", "b", "c"] * 3 and timed[9:15] == ["a", "c"] * 3
    assert isinstance(b, ValueError) and "b cannot go on" in str(b)
    assert a.repeats == c.repeats >= 6


@pytest.mark.gpu
def test_median_agrees_with_triton_do_bench_and_with_itself():
    agreement = bench.agreement_with_do_bench()
    print(agreement)
    # The GPU's own clock drifts by several percent within seconds, so the two are interleaved.
    assert agreement["vs_do_bench"] < 0.05
    assert agreement["repeat_spread"] < 0.03


@pytest.mark.gpu
def test_measure_reports_student_and_cublas_rates():
    report = bench.measure("w1d7.matmul_fp32", good_matmul, [(1024, 1024, 1024), (1000, 1030, 515)])
    assert report.measured and len(report.rows) == 2
    for row in report.rows:
        assert row.error is None and row.student_gflops > 0 and row.baseline_gflops > 0
    assert 0 < report.geomean_vs_baseline < 2


@pytest.mark.gpu
def test_a_cached_result_is_caught_by_the_per_call_check():
    cache = {}

    def cached(a, b):
        if "c" not in cache:
            cache["c"] = good_matmul(a, b)
        return cache["c"]

    report = bench.measure(spec.get("w1d7.matmul_fp32"), cached, [(512, 512, 512)])
    assert report.rows[0].error and "wrong result" in report.rows[0].error
