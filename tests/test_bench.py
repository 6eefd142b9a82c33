import json
import math
import re
import subprocess
import sys
from pathlib import Path

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
        assert row.error is None and row.student_gflops > 0 and row.library_gflops > 0
    assert 0 < report.geomean_vs_library < 2


@pytest.mark.gpu
def test_a_cached_result_is_caught_by_the_per_call_check():
    cache = {}

    def cached(a, b):
        if "c" not in cache:
            cache["c"] = good_matmul(a, b)
        return cache["c"]

    report = bench.measure(spec.get("w1d7.matmul_fp32"), cached, [(512, 512, 512)])
    assert report.rows[0].error and "wrong result" in report.rows[0].error


# bench/ as a suite: one entry point over a registry, code and results apart.

BENCH = Path(__file__).resolve().parents[1] / "bench"
# Setup scripts the measurements source or run first; no measurement of their own.
SETUP_SCRIPTS = {"gpu_env.sh", "fetch_gpu_wheels.sh"}
# The integrator's scripts that still put the checkout on sys.path themselves (to be moved to the entry point).
STILL_EDIT_SYS_PATH = {"week3_gemm_attention_references.py"}


def test_every_measurement_in_bench_is_registered_and_every_entry_names_a_file():
    from bench import registry

    names = [m.name for m in registry.SUITE]
    assert len(names) == len(set(names))
    missing = [m.name for m in registry.SUITE if not m.path.is_file()]
    assert not missing, f"registered without a file: {missing}"
    targets = {m.path.name for m in registry.SUITE}
    scripts = {p.name for p in BENCH.glob("*.sh")} - SETUP_SCRIPTS
    modules = {p.name for p in BENCH.glob("*.py") if p.stem not in registry.LIBRARY}
    assert scripts | modules <= targets, f"not in bench/registry.toml: {sorted((scripts | modules) - targets)}"
    for name in registry.LIBRARY:
        assert (BENCH / f"{name}.py").is_file(), name
    unrunnable = [m.name for m in registry.SUITE if m.path.suffix == ".py"
                  and 'if __name__ == "__main__":' not in m.path.read_text(encoding="utf-8")]
    assert not unrunnable, f"python -m bench cannot run these (no __main__ block): {unrunnable}"


def test_list_names_every_measurement_without_loading_torch():
    code = ("import sys\nfrom bench.__main__ import main\nfrom bench.registry import SUITE\n"
            "assert main(['--list']) == 0\nprint('torch loaded' if 'torch' in sys.modules else 'no torch')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=BENCH.parent, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "no torch"
    from bench import registry

    assert [line.split()[0] for line in lines[:-1]] == [m.name for m in registry.SUITE]


def test_the_entry_point_runs_a_measurement_and_refuses_an_unknown_name(capsys):
    from bench.__main__ import main

    assert main(["no-such-measurement"]) == 2
    assert "python -m bench --list" in capsys.readouterr().err
    done = subprocess.run([sys.executable, "-m", "bench", "gpu-scaling", "--help"], capture_output=True, text=True,
                          cwd=BENCH.parent, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--copies" in done.stdout


def test_code_and_results_apart():
    top = {p.name for p in BENCH.iterdir() if p.is_file()}
    stray = {n for n in top if not n.endswith((".py", ".sh"))} - {"RESULTS.md", "registry.toml", "gpu_wheels.txt"}
    assert not stray, f"results at bench/'s top level: {sorted(stray)}"
    results = [p for p in (BENCH / "results").rglob("*") if p.is_file()]
    assert results
    named = re.compile(r"(h100|h200|[a-z0-9]+)/\d{4}-\d\d-\d\d-[a-z0-9][a-z0-9.-]*\.(json|csv|md|txt|log)$")
    badly = [str(p.relative_to(BENCH / "results")) for p in results
             if not named.fullmatch(str(p.relative_to(BENCH / "results")))]
    assert not badly, f"not <gpu>/<date>-<what>: {badly}"


def test_bench_scripts_leave_sys_path_alone():
    editing = {p.name for p in BENCH.glob("*.py") if "sys.path.insert" in p.read_text(encoding="utf-8")}
    assert editing <= STILL_EDIT_SYS_PATH, f"edit sys.path: {sorted(editing - STILL_EDIT_SYS_PATH)}"


def test_harness_table_and_the_json_a_measurement_writes(tmp_path):
    from bench import harness

    text = harness.table(["variant", "ratio"], [["a", 0.5], ["longer name", 1.25]])
    assert text.splitlines() == ["variant      ratio", "a            0.500", "longer name  1.250"]
    harness.write_json(None, {"rows": [1]})  # nowhere asked: nothing written, no error
    out = tmp_path / "deep" / "m.json"
    harness.write_json(out, {"rows": [1, 2]})
    written = json.loads(out.read_text())
    assert list(written)[:4] == ["date", "gpu", "commit", "command"]
    assert written["rows"] == [1, 2]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", written["date"])
    assert written["commit"] == "unknown" or re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", written["commit"])
