"""The corpus's table of expected verdicts (tests/adversarial/expected.py): complete, and strict about a match."""

from __future__ import annotations

from pathlib import Path

from tests.adversarial.expected import DAY7, EXPECTED, markdown_table, problems

STUB_TWO_GPU, ZERO_GPU = DAY7.STUB_TWO_GPU, DAY7.ZERO_GPU


def test_every_fixture_has_a_verdict_inside_its_items_ranges():
    assert problems() == []


def test_a_verdict_matches_only_its_status_and_points():
    honest = EXPECTED["honest_slow"]
    assert honest.mismatch("gpu", "ok", honest.gpu) == ""
    assert "timeout" in honest.mismatch("gpu", "timeout", honest.gpu)
    assert "test_tf32" in honest.mismatch("gpu", "ok", {**honest.gpu, "test_tf32": 0})


def test_a_second_gpu_verdict_is_accepted_on_a_gpu_only():
    spins = EXPECTED["kernel_spins_forever"]
    assert spins.mismatch("gpu", "ok", STUB_TWO_GPU) == ""
    assert spins.mismatch("gpu", "gpu_hang", ZERO_GPU) == ""
    assert spins.mismatch("gpu", "gpu_hang", STUB_TWO_GPU) != ""  # a stopped run keeps no quiz point
    assert spins.mismatch("gpu", "timeout", ZERO_GPU) != ""
    assert spins.mismatch("gpu", "ok", ZERO_GPU) != ""
    assert spins.mismatch("cpu", "timeout", {**spins.cpu, **{k: 0 for k in spins.cpu if spins.cpu[k]}}) != ""


def test_the_corpus_readme_shows_the_table_as_expected_py_prints_it():
    readme = (Path(__file__).parent / "adversarial" / "README.md").read_text(encoding="utf-8")
    assert markdown_table() in readme
