"""The limit studies' reading of Nsight Compute's raw page, on a CSV written here (no GPU, no ncu)."""

from __future__ import annotations

import json

from bench import ncu_csv, w1d7_limit_ncu

HEADER = ['"ID"', '"Kernel Name"', '"gpu__time_duration.sum"', '"sm__cycles_elapsed.avg.per_second"',
          '"device__attribute_multiprocessor_count"', '"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"',
          '"smsp__inst_executed.sum"', '"smsp__average_warp_latency_issue_stalled_barrier_per_issue_active.ratio"',
          '"smsp__average_warp_latency_issue_stalled_selected_per_issue_active.ratio"',
          '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"']
UNITS = ['""', '""', '"ns"', '"Hz"', '""', '"inst"', '"inst"', '"ratio"', '"ratio"', '"ratio"']


def _raw(path, rows):
    lines = ["==PROF== a line ncu prints that is not CSV", ",".join(HEADER), ",".join(UNITS)]
    lines += [",".join(f'"{v}"' for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_read_keys_each_metric_by_name_and_unit_and_pick_ignores_the_unit(tmp_path):
    (row,) = ncu_csv.read(_raw(tmp_path / "raw.csv", [[0, "k", "1,000", "1.5e9", 132, 4e9, 2e8, 0.5, 1.0, 2.25]]))
    assert row["gpu__time_duration.sum [ns]"] == "1,000"
    assert ncu_csv.pick(row, "gpu__time_duration.sum") == 1000.0
    assert ncu_csv.pick(row, "no_such_metric") is None
    assert ncu_csv.stalls(row) == {"barrier": 0.5, "long_scoreboard": 2.25}  # "selected" is issuing, not a stall
    assert ncu_csv.largest({"a": 1.0, "b": 3.0, "c": 2.0, "d": 0.5}) == {"b": 3.0, "c": 2.0, "a": 1.0}


def test_read_of_a_file_without_kernels_is_empty(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("==PROF== no kernels were profiled\n", encoding="utf-8")
    assert ncu_csv.read(path) == []


def test_w1d7_table_from_an_export_takes_the_longest_kernel_and_derives_its_rates(tmp_path, capsys):
    # Made-up counters (a helper kernel, then the GEMM): the table derives its rates from them by its formulas.
    ffma = 2.0**36
    path = _raw(tmp_path / "cublas.csv", [[0, "helper", 5000, 1.5e9, 132, 10, 10, 0, 0, 0],
                                          [1, "sgemm", 2e6, 1.5e9, 132, ffma, ffma / 16, 0.5, 1.0, 2.25]])
    assert w1d7_limit_ncu.main([str(tmp_path / "out"), "--csv", f"cublas_tf32_off={path}"]) == 0
    table = json.loads((tmp_path / "out" / "w1d7_limit_ncu.json").read_text(encoding="utf-8"))["table"]
    row = table["cublas_tf32_off"]
    assert row["kernel"] == "sgemm"
    assert abs(row["tflops"] - 2 * ffma / 2e-3 / 1e12) < 1e-9
    assert abs(row["pct_fp32_peak_at_clock"] - 100 * ffma / (2e-3 * 128 * 132 * 1.5e9)) < 1e-9
    assert row["instructions_per_ffma"] == 2.0  # ffma/16 warp instructions over ffma/32 warp FFMAs
    assert row["top_stalls_cycles_per_issue"] == {"long_scoreboard": 2.25, "barrier": 0.5}
    printed = capsys.readouterr().out
    assert "long_scoreboard 2.25" in printed and "cublas_tf32_off " in printed  # a label longer than its column, whole


def test_own_kernels_summary_derives_rates_from_the_counters(tmp_path):
    from bench import ncu_own_kernels

    header = ['"ID"', '"Kernel Name"', '"gpu__time_duration.sum"', '"dram__bytes_read.sum"', '"dram__bytes_write.sum"',
              '"launch__registers_per_thread"',
              '"smsp__average_warp_latency_issue_stalled_long_scoreboard_per_issue_active.ratio"',
              '"smsp__average_warp_latency_issue_stalled_selected_per_issue_active.ratio"']
    units = ['""', '""', '"ns"', '"byte"', '"byte"', '"register/thread"', '"ratio"', '"ratio"']
    lines = ["==PROF== not CSV", ",".join(header), ",".join(units), '"0","matmul_kernel","2000000","3e9","1e9","96",'
             '"4.5","1.0"']
    path = tmp_path / "raw.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (row,) = ncu_csv.read(path)
    entry = ncu_own_kernels.plan(tmp_path / "nb.ipynb", 1000, 2000)[0]
    out = ncu_own_kernels.summarise(row, entry)
    assert abs(out["tflops"] - 2e9 / 2e-3 / 1e12) < 1e-12  # 2 * 1000^3 FLOPs in 2 ms
    assert abs(out["flop_per_dram_byte"] - 2e9 / 4e9) < 1e-12
    assert abs(out["least_dram_gb"] - 4 * 3e6 / 1e9) < 1e-12  # fp32: A, B and C once
    assert out["registers_per_thread"] == 96
    assert out["top_stalls_cycles_per_issue"] == {"long_scoreboard": 4.5}


def test_own_kernels_takes_the_kernel_cells_of_a_notebook(tmp_path):
    from bench import ncu_own_kernels

    def cell(grade_id, source):
        return {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": grade_id}}, "source": source}

    nb = {"cells": [cell("parameters", 'device = "auto"'), cell("setup", "import course"),
                    cell("check", "course.check.assert_correct(1)"), cell("kernel", "@triton.jit\ndef k(): pass"),
                    cell("wrapper", "def matmul(a, b): return a"), cell("benchmark", "perf = 1")]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    source = ncu_own_kernels.notebook_matmul_source(path)
    assert "def matmul(" in source and "@triton.jit" in source and "import course" in source
    assert "assert_correct" not in source and "perf = 1" not in source
