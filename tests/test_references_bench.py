"""bench/references.py (`make bench`) on synthetic reference verdicts: rates, ratios and ceilings, the Markdown
table, and the machine without a GPU that measures nothing and says so."""

from __future__ import annotations

import json

from bench import references as script


def _verdict(out, notebook, spec_id, rows):
    where = out / "reference" / notebook
    where.mkdir(parents=True)
    (where / "verdict.json").write_text(json.dumps({"kernels": {spec_id: {"bench": {"measured": True, "rows": rows}}}}))


def test_each_benchmark_shape_gets_the_references_rate_the_librarys_and_the_ceiling_that_applies(tmp_path, capsys):
    # 2 * 4096^3 FLOPs in 4 ms: 34,360 GFLOP/s; cuBLAS in 3.2 ms. 2 * 4 * 2^28 bytes copied in 1 ms: 2,147 GB/s.
    _verdict(tmp_path, "week1/day7_fast_matmul", "w1d7.matmul_fp32",
             [{"shape": [4096, 4096, 4096], "student_ms": 4.0, "baseline_ms": 3.2, "error": None},
              {"shape": [1024, 1024, 1024], "student_ms": None, "baseline_ms": 0.1, "error": "not timed: x"}])
    _verdict(tmp_path, "week1/day5_memory", "w1d5.copy",
             [{"shape": [2**28], "student_ms": 1.0, "baseline_ms": 0.98, "error": None}])
    assert script.main(["--from", str(tmp_path), "--device-name", "NVIDIA H100 80GB HBM3", "--copy-gbps", "2500",
                        "--json", str(tmp_path / "r.json")]) == 0
    printed = capsys.readouterr().out
    data = json.loads((tmp_path / "r.json").read_text())
    rows = {(r["exercise"], r["shape"][0]): script.Row(**r) for r in data["rows"]}
    matmul = rows[("w1d7.matmul_fp32", 4096)]
    assert round(matmul.reference) == 34360 and round(matmul.ratio, 3) == 0.8
    assert matmul.ceiling == 67000.0 and matmul.ceiling_name == "datasheet fp32 (H100 SXM)"
    copy = rows[("w1d5.copy", 2**28)]
    assert round(copy.reference) == 2147 and copy.ceiling == 2500 and copy.ceiling_name == "measured copy"
    assert "| w1d7.matmul_fp32 | 4096x4096x4096 | fp32-ieee | 34,360 GFLOP/s | 42,950 (cuBLAS) | 0.800 |" in printed
    assert "| 51.3% |" in printed and "- (not timed: x)" in printed and "85.9%" in printed
    assert script.markdown(data).startswith(f"NVIDIA H100 80GB HBM3, graded {data['date']}, tabulated from {tmp_path} "
                                            "at commit ")  # this checkout's, not the grading's: it cannot know that
    assert script.markdown({**data, "from": None}).startswith(f"NVIDIA H100 80GB HBM3, {data['date']}, commit ")


def test_without_a_gpu_nothing_is_measured_and_it_says_so(capsys):
    assert script.main([]) == 0
    assert "this machine has none: nothing measured" in capsys.readouterr().out


def test_the_commit_says_when_the_tree_differs_from_it(tmp_path, monkeypatch):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / "f.txt").write_text("one")
    subprocess.run(["git", "add", "f.txt"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "one"], cwd=repo, check=True)
    monkeypatch.setattr(script, "REPO", repo)
    clean = script.checkout_commit()
    assert clean and not clean.endswith("+changes")
    (repo / "f.txt").write_text("two")
    assert script.checkout_commit() == clean + "+changes"
    monkeypatch.setattr(script, "REPO", tmp_path)  # not a checkout
    assert script.checkout_commit() is None


def test_an_out_graded_earlier_is_tabulated_without_a_gpu_under_the_gpu_its_references_name(tmp_path, capsys):
    _verdict(tmp_path, "week1/day7_fast_matmul", "w1d7.matmul_fp32",
             [{"shape": [4096, 4096, 4096], "student_ms": 4.0, "baseline_ms": 3.2, "error": None}])
    (tmp_path / "reference/week1/day7_fast_matmul/device.txt").write_text("NVIDIA H100 80GB HBM3\n0.9\nnull\n")
    assert script.main(["--from", str(tmp_path), "--json", str(tmp_path / "r.json")]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["gpu"] == "NVIDIA H100 80GB HBM3" and data["rows"][0]["ceiling_name"] == "datasheet fp32 (H100 SXM)"
    _verdict(tmp_path, "week1/day5_memory", "w1d5.copy", [{"shape": [2**28], "student_ms": 1.0, "baseline_ms": 1.0}])
    (tmp_path / "reference/week1/day5_memory/device.txt").write_text("NVIDIA H200\n0.9\nnull\n")
    capsys.readouterr()
    assert script.main(["--from", str(tmp_path)]) == 2  # two GPUs named: which one is for the caller to say
    assert "give it with --device-name" in capsys.readouterr().err


def test_a_missing_report_is_named_not_a_traceback(tmp_path, capsys):
    assert script.main(["--markdown", str(tmp_path / "bench.json")]) == 2
    assert f"no report at {tmp_path / 'bench.json'}" in capsys.readouterr().err
