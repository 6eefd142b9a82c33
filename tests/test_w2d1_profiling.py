"""Week 2 Day 1: the roofline specs (references, drawn records, accept rules), course.days.profiling's ncu reader,
and the shared changes the day needs (a spec's accept rule in compare, host functions in check_one, a roofline
that spans its points)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from course import check, plot
from course.days import profiling
from course.days.profiling import Measurement
from course.exercises import w2d1_profiling as day1
from course.spec import get

CLASSIFY = get("w2d1.classify")
ROOF_FRACTION = get("w2d1.roof_fraction")


def test_reference_on_hand_checked_records():
    # Ridge 20 TFLOP/s / 2 TB/s = 10 FLOP/byte.
    memory = Measurement(flops=1e9, dram_bytes=1e9, time_ms=1.0, peak_tflops=20.0, peak_tbps=2.0)
    assert day1.bound(memory) == "memory"
    assert day1.fraction_of_roof(memory) == pytest.approx(0.5)  # 1e12 byte/s of 2e12
    compute = Measurement(flops=1e12, dram_bytes=1e9, time_ms=100.0, peak_tflops=20.0, peak_tbps=2.0)
    assert day1.bound(compute) == "compute"
    assert day1.fraction_of_roof(compute) == pytest.approx(0.5)  # 1e13 FLOP/s of 2e13
    at_ridge = Measurement(flops=1e10, dram_bytes=1e9, time_ms=10.0, peak_tflops=20.0, peak_tbps=2.0)
    assert day1.bound(at_ridge) == "compute"
    copy = Measurement(flops=0.0, dram_bytes=3e9, time_ms=2.0, peak_tflops=20.0, peak_tbps=2.0)
    assert day1.bound(copy) == "memory"
    assert day1.fraction_of_roof(copy) == pytest.approx(0.75)  # 1.5e12 byte/s of 2e12


@pytest.mark.parametrize("regime", sorted(day1.REGIMES))
def test_drawn_records_are_of_their_regime(regime):
    for seed in range(40):
        m = day1.draw_measurement(regime, seed)
        ratio = (m.flops / m.dram_bytes) / (m.peak_tflops / m.peak_tbps)
        low, high = {0: (0.004, 0.51), 1: (1.9, 51.0), 2: (0.97, 0.995), 3: (1.005, 1.03), 4: (0.0, 0.0)}[regime]
        assert low <= ratio <= high, (regime, seed, ratio)
        assert m.dram_bytes >= 2**26 and m.time_ms > 0 and 0.3 <= m.peak_tbps <= 8.0
        assert 0.04 < day1.fraction_of_roof(m) < 0.98


def test_records_are_fresh_per_seed_and_repeatable():
    first = [CLASSIFY.make_inputs((2,), seed, "cpu")[0] for seed in range(10)]
    assert len(set(first)) == 10
    assert first == [CLASSIFY.make_inputs((2,), seed, "cpu")[0] for seed in range(10)]
    assert CLASSIFY.make_inputs((0,), 7, "cpu") == ROOF_FRACTION.make_inputs((0,), 7, "cpu")


def test_near_ridge_records_catch_the_wrong_roof():
    # A fraction taken against the other roof is off by the intensity's distance from the ridge, at least 0.5%.
    for seed in range(20):
        for regime in (2, 3):
            m = day1.draw_measurement(regime, seed)
            seconds = m.time_ms * 1e-3
            wrong = (m.flops / seconds / (m.peak_tflops * 1e12) if regime == 2
                     else m.dram_bytes / seconds / (m.peak_tbps * 1e12))
            assert not day1.accept_fraction(wrong, day1.fraction_of_roof(m), (regime,))[0]


def test_accept_label():
    assert day1.accept_label("memory", "memory", (0,))[0]
    assert not day1.accept_label("compute", "memory", (0,))[0]
    assert not day1.accept_label("Memory", "memory", (0,))[0]
    assert not day1.accept_label("memory-bound", "memory", (0,))[0]

    class Anything(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    assert not day1.accept_label(Anything("memory"), "memory", (0,))[0]
    assert not day1.accept_label(None, "memory", (0,))[0]


def test_accept_fraction():
    assert day1.accept_fraction(0.5, 0.5, (0,))[0]
    assert day1.accept_fraction(0.5 * (1 + 5e-6), 0.5, (0,))[0]
    assert day1.accept_fraction(1, 1.0, (0,))[0]
    assert not day1.accept_fraction(0.5 * (1 + 5e-5), 0.5, (0,))[0]
    assert not day1.accept_fraction(500.0, 0.5, (0,))[0]  # a unit slip of 1000
    assert not day1.accept_fraction(np.float64(0.5), 0.5, (0,))[0]
    assert not day1.accept_fraction(True, 1.0, (0,))[0]
    assert not day1.accept_fraction(math.nan, 0.5, (0,))[0]
    assert not day1.accept_fraction("0.5", 0.5, (0,))[0]


def test_check_runs_host_functions_through_accept():
    right = check.check(CLASSIFY, lambda m: day1.bound(m), "hidden")
    assert right and all(r.passed for r in right)
    always = check.check(CLASSIFY, lambda m: "memory", "visible")
    assert [r.passed for r in always] == [True, False, True, False, True]  # regimes 0 to 4
    fractions = check.check(ROOF_FRACTION, lambda m: day1.fraction_of_roof(m), "visible")
    assert all(r.passed for r in fractions)
    raising = check.check(ROOF_FRACTION, lambda m: 1 / 0, "visible")
    assert not any(r.passed for r in raising) and "ZeroDivisionError" in raising[0].message


def test_kernel_specs_still_need_a_launch():
    matmul = get("w1d7.matmul_fp32")
    result = check.check_one(matmul, lambda a, b: torch.empty((a.shape[0], b.shape[1])), (4, 4, 4), seed=0)
    assert not result.passed and "no Triton or CUDA kernel" in result.message


def test_compare_uses_accept_after_the_tensor_checks():
    # A copy of a kernel spec with an accept rule that passes everything: compare calls it only for a
    # tensor of the right shape, dtype and device.
    calls = []
    lenient = replace(get("w2d2.transpose"), accept=lambda out, ref, shape: (calls.append(shape) is None, "accepted"))
    ref = torch.zeros(3, 2)
    assert check.compare(lenient, (2, 3), torch.ones(3, 2), ref, "cpu").passed
    assert not check.compare(lenient, (2, 3), torch.ones(2, 3), ref, "cpu").passed  # wrong shape, before accept
    assert calls == [(2, 3)]


def test_draw_hidden_regimes():
    drawn = {day1.draw_hidden(random.Random(seed), False) for seed in range(30)}
    assert len(drawn) > 1
    assert all(len(shapes) == 4 and all(shape[0] in day1.REGIMES for shape in shapes) for shapes in drawn)


def _row(*cells: str) -> str:
    return ",".join(f'"{cell}"' for cell in cells)


_HEADER = ("ID", "Process ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
_ROWS = (
    ("0", "horner_kernel", "dram__bytes_read.sum", "Mbyte", "268.44"),
    ("0", "horner_kernel", "dram__bytes_write.sum", "byte", "268,435,456"),
    ("0", "horner_kernel", "gpu__time_duration.sum", "usecond", "250.5"),
    ("0", "horner_kernel", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst", "4294967296"),
    ("0", "horner_kernel", "sm__sass_thread_inst_executed_op_fadd_pred_on.sum", "inst", "10"),
    ("0", "horner_kernel", "sm__sass_thread_inst_executed_op_fmul_pred_on.sum", "inst", "6"),
    ("0", "horner_kernel", "sm__warps_active.avg.pct_of_peak_sustained_active", "%", "n/a"),
    ("1", "other_kernel", "gpu__time_duration.sum", "nsecond", "900"),
)
# The shape of `ncu --csv` output (details page), with the program's own output and ncu's lines around it.
SAMPLE = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3)",
    "some output of the program",
    _row(*_HEADER),
    *(_row(launch, "4242", kernel, "Command line profiler metrics", name, unit, value)
      for launch, kernel, name, unit, value in _ROWS),
    "==PROF== Disconnected from process 4242",
])


def test_parse_ncu_csv():
    launches = profiling.parse_ncu_csv(SAMPLE)
    assert [name for name, _ in launches] == ["horner_kernel", "other_kernel"]
    metrics = launches[0][1]
    assert metrics["dram__bytes_read.sum"] == pytest.approx(268.44e6)
    assert metrics["dram__bytes_write.sum"] == 268435456
    assert metrics["gpu__time_duration.sum"] == pytest.approx(250.5e-6)
    assert "sm__warps_active.avg.pct_of_peak_sustained_active" not in metrics  # reported as text
    assert launches[1][1]["gpu__time_duration.sum"] == pytest.approx(900e-9)
    with pytest.raises(ValueError, match="no ncu metrics table"):
        profiling.parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM\n")


def test_measurement_from_ncu():
    metrics = profiling.parse_ncu_csv(SAMPLE)[0][1]
    m = profiling.measurement_from_ncu(metrics, peak_tflops=67.0, peak_tbps=3.35)
    assert m.flops == 2 * 4294967296 + 10 + 6
    assert m.dram_bytes == pytest.approx(268.44e6 + 268435456)
    assert m.time_ms == pytest.approx(0.2505)
    assert (m.peak_tflops, m.peak_tbps) == (67.0, 3.35)


def test_summary_and_units():
    assert profiling.to_base_units(2.0, "Gbyte/second") == 2e9
    assert profiling.to_base_units(3.0, "msecond") == pytest.approx(3e-3)
    assert profiling.to_base_units(5.0, "inst") == 5.0
    text = profiling.summary(SAMPLE, "NVIDIA H100 80GB HBM3")
    assert "kernel horner_kernel" in text and "not reported" in text


def test_metrics_command(capsys):
    assert profiling.main(["metrics"]) == 0
    assert capsys.readouterr().out.strip().split(",") == list(profiling.NCU_METRICS)


def test_roofline_spans_its_points():
    figure = plot.roofline(67_000.0, 3_350.0, {"far left": (0.01, 30.0), "far right": (5000.0, 60_000.0)}, "t")
    roof = figure.axes[0].lines[0].get_xdata()
    assert min(roof) <= 0.005 and max(roof) >= 10_000.0
    figure = plot.roofline(67_000.0, 3_350.0, {"middle": (4.0, 1000.0)}, "t")
    assert list(figure.axes[0].lines[0].get_xdata()) == pytest.approx([20 / 64, 20, 20 * 64])


@pytest.mark.gpu
def test_ncu_target_runs_on_a_gpu():
    from course.days import profiling_target

    profiling_target.run(steps=4, n=1 << 20, launches=2)


def _ncu_number(text: object) -> float:
    return float(str(text).replace(",", ""))


def test_recorded_readings_equal_their_results_files():
    # Every recorded value a notebook shows is the one in the results file it names.
    import json
    from pathlib import Path

    from course.days import recorded_ncu

    root = Path(__file__).resolve().parent.parent
    own = json.loads((root / "bench/results/h100" / recorded_ncu.OWN_KERNELS).read_text())
    w1d7 = own["kernels"]["w1d7_student"]
    (reading,) = recorded_ncu.W1D7_REFERENCE_LAUNCH.readings
    assert own["gpu"] == recorded_ncu.H100 and own["date"].startswith(recorded_ncu.W1D7_REFERENCE_LAUNCH.date)
    assert reading.time_s == pytest.approx(w1d7["time_ms"] * 1e-3)
    assert reading.dram_read_bytes == pytest.approx(w1d7["dram_read_gb"] * 1e9)
    assert reading.dram_write_bytes == pytest.approx(w1d7["dram_write_gb"] * 1e9)
    assert reading.flop_per_dram_byte == pytest.approx(w1d7["flop_per_dram_byte"])
    assert reading.registers == w1d7["registers_per_thread"]
    assert reading.occupancy_pct == w1d7["achieved_occupancy_pct"]
    assert reading.stalls == {k: v for k, v in w1d7["all_stalls_cycles_per_issue"].items() if v}
    assert reading.tflops == pytest.approx(w1d7["tflops"])
    ncu = json.loads((root / "bench/results/h100" / recorded_ncu.W2D456).read_text())["ncu_8192"]
    plans = ((recorded_ncu.W2D4_PIPELINED, ("Day 4 ref", "Day 4 best", "cuBLAS fp16 (Day 4: torch defaults)")),
             (recorded_ncu.W2D7_TILE_ORDER, ("Day 6 fp16 best", "Day 4 best")))
    for recorded, names in plans:
        for reading, name in zip(recorded.readings, names, strict=True):
            raw, table = ncu["raw_subset"][name], ncu["table"][name]

            def pick(metric, raw=raw):
                return _ncu_number(next(v for k, v in raw.items() if k.startswith(metric + " [")))

            assert reading.time_s == pytest.approx(pick("gpu__time_duration.sum") * 1e-9), name
            assert reading.dram_read_bytes == pick("dram__bytes_read.sum"), name
            assert reading.dram_write_bytes == pick("dram__bytes_write.sum"), name
            assert reading.registers == table["registers_per_thread"], name
            assert reading.occupancy_pct == table["achieved_occupancy_pct"], name
            assert reading.stalls == table["top_stalls_cycles_per_issue"], name
            assert reading.tflops == pytest.approx(table["tflops"], rel=1e-6), name
            # The study named its 2-D grids' launches "row-major"; their first axis (pid_m, one program per row of
            # tiles) varies fastest, so their waves go down columns of tiles: the notebooks call them 2-D grids.
            variant = table.get("variant", "cuBLAS fp16").replace(" G8", "").removeprefix("ref ")
            assert variant.replace(" row-major", " 2-D grid") in (reading.label, "library"), name
            if not name.startswith("cuBLAS"):  # the course's kernels (cuBLAS's grid is its own)
                grid = [int(side) for side in str(table["grid"]).strip("()").split(",")]
                assert ("2-D grid" in reading.label) == (grid[1] > 1), name


def test_own_kernel_reads_an_ncu_csv_into_readings(tmp_path, monkeypatch):
    # profile_launches on a made-up ncu output: one labelled Reading per profiled launch, stalls by name.
    import subprocess

    from course.days import own_kernel

    csv_text = "\n".join([
        '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"',
        '"0","k","gpu__time_duration.sum","second","0.002"',
        '"0","k","dram__bytes_read.sum","byte","3e9"',
        '"0","k","dram__bytes_write.sum","byte","1e9"',
        '"0","k","launch__registers_per_thread","register/thread","96"',
        f'"0","k","{own_kernel.STALL_PREFIX}barrier{own_kernel.STALL_SUFFIX}","","1.5"',
        '"1","k","gpu__time_duration.sum","second","0.001"',
    ])
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, csv_text, ""))
    readings, problem = own_kernel.profile_launches("pass", ["a", "b"], [2e9, 1e9])
    assert problem == ""
    assert [r.label for r in readings] == ["a", "b"]
    assert readings[0].tflops == pytest.approx(1.0) and readings[0].flop_per_dram_byte == pytest.approx(0.5)
    assert readings[0].registers == 96 and readings[0].top_stalls() == {"barrier": 1.5}
    readings, problem = own_kernel.profile_launches("pass", ["only one expected"], [1.0])
    assert readings == [] and "2 launches, 1 expected" in problem


def test_own_kernel_driver_pieces():
    # The driver a notebook hands to ncu: its kernels decorated again, each call warmed up twice, then profiled once.
    from types import SimpleNamespace

    from course.days import own_kernel

    source = own_kernel.jit_source(SimpleNamespace(src="def k(x):\n    pass\n"))
    assert source.startswith("@triton.jit\ndef k(x):")
    calls = own_kernel.profiled_calls(["f(1)", "f(2)"]).splitlines()
    assert calls.count("torch.cuda.profiler.start()") == 2 and calls.count("torch.cuda.profiler.stop()") == 2
    assert calls.index("f(1)") < calls.index("torch.cuda.profiler.stop()") < calls.index("f(2)")
    assert own_kernel.counters_unavailable(True, True) and own_kernel.counters_unavailable(False, False)
