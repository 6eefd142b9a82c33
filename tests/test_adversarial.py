"""The public corpus of cheating submissions (tests/adversarial/), graded in one batch by the real grader.

Each fixture must get exactly the points its entry in tests/adversarial/expected.py names for this
device, with an accepted notebook status. The honest controls must get in the batch what they get
graded alone, and the sandbox must hold: nothing the fixtures started is still running, the gradebook
holds exactly the grades the grader computed, and solutions/ is unchanged.
"""

from __future__ import annotations

import hashlib

import psutil
import pytest

from grader.flow.settings import Settings, resolve_device
from grader.intake.layout import SOLUTIONS
from grader.pipeline import grade
from grader.score import results
from tests.adversarial.build import build, fixtures
from tests.adversarial.expected import EXPECTED

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
DEVICE, DEVICE_NAME = resolve_device("auto")
ON_GPU = DEVICE == "gpu"
FIXTURES = fixtures()
# Each notebook's control is the course's solution. On a CPU the demo class's fast_correct already earns full marks
# with it (tests/test_grading_end_to_end.py), so these are graded only beside a GPU, where their timings anchor the
# verdicts of the cheats beside them.
SOLUTION_CONTROLS = {f"{notebook}-{stem}" for notebook, stem in (
    ("day1_host_baseline", "honest"), ("day3_the_machine", "honest"), ("day4_first_triton_kernel", "honest"),
    ("day5_memory", "honest"), ("day6_tiling", "honest_tiled"), ("bonus_sgemm_ladder", "honest_ladder"),
    ("day1_profiling", "honest"), ("day2_coalescing", "honest"), ("day3_bank_conflicts", "honest_padded"),
    ("day4_pipelining", "honest"), ("day5_tma", "honest"), ("day6_tensor_cores", "honest"),
    ("day7_optimized_gemm", "honest"))}
GRADED = sorted(name for name, f in FIXTURES.items() if ON_GPU or not (f.gpu_only or name in SOLUTION_CONTROLS))
ON_A_CPU_SEE_THE_DEMO = pytest.mark.skipif(
    not ON_GPU, reason="a solution control: on a CPU the demo class's fast_correct is graded instead: NOT RUN here")
SEED = 20261122
MARKS = ("adversarial-",)  # the fixtures name their processes and files with it


def _settings(jobs: int) -> Settings:
    # Tight limits: the corpus holds an infinite loop, a 100 GB allocation and a 10 MB print. A cell gets 90 s:
    # honest_torch_compile's torch.compile ran past 60 s on the 2-core machine with the rest of the suite beside it.
    return Settings(DEVICE, DEVICE_NAME, runs=jobs, cell_timeout=90, notebook_timeout=240, judge_timeout=300,
                    memory_bytes=4 * 2**30, output_bytes=8 * 2**20, seed=SEED)


def _digest(folder) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root, out = tmp_path_factory.mktemp("cheaters"), tmp_path_factory.mktemp("grades")
    build(root, GRADED)
    solutions_before = _digest(SOLUTIONS)
    graded = grade(root, out, _settings(jobs=4 if ON_GPU else 2), log=lambda _: None)
    return _of_fixtures(graded), out, solutions_before


def _of_fixtures(graded):
    """Each fixture's result for the notebook it attacks (its folder also counts the others as missing)."""
    return {r.student: r for r in graded if f"{r.assignment}/{r.notebook}" == FIXTURES[r.student].notebook}


def _check(result, name: str) -> None:
    expected = EXPECTED[name]
    mismatch = expected.mismatch("gpu" if ON_GPU else "cpu", result.status, {i.item: i.score for i in result.items})
    messages = {i.item: i.message[:200] for i in result.items}
    assert not mismatch, f"{name}: {mismatch} ({result.message}; items: {messages})"
    if expected.tamper_note:
        assert result.integrity, f"{name}: the grader undid a change without a note"


def _param(name: str, gpu_only: bool):
    if gpu_only:
        return pytest.param(name, marks=pytest.mark.gpu)
    return pytest.param(name, marks=ON_A_CPU_SEE_THE_DEMO) if name in SOLUTION_CONTROLS else name


@pytest.mark.parametrize("name", [_param(name, fixture.gpu_only) for name, fixture in sorted(FIXTURES.items())])
def test_each_fixture_gets_its_expected_verdict(batch, name):
    _check(batch[0][name], name)


def test_honest_submissions_get_the_same_grade_alone(batch, tmp_path):
    root = tmp_path / "class"
    build(root, ["honest_fast", "honest_slow"])  # graded without the cheating fixtures beside them
    alone = _of_fixtures(grade(root, tmp_path / "out", _settings(jobs=2), log=lambda _: None))
    for name in ("honest_fast", "honest_slow"):
        in_batch = {i.item: i.score for i in batch[0][name].items}
        assert {i.item: i.score for i in alone[name].items} == in_batch, name


def test_nothing_a_fixture_started_is_still_running(batch):
    survivors = []
    for process in psutil.process_iter(["name", "cmdline"]):
        text = " ".join([process.info["name"] or "", *(process.info["cmdline"] or [])])
        if any(mark in text for mark in MARKS):
            survivors.append(text[:120])
    assert not survivors


def test_the_fixtures_changed_nothing_outside_their_sandbox(batch):
    from nbgrader.api import Gradebook

    from grader.score.gradebook import db_url

    by_student, out, solutions_before = batch
    assert _digest(SOLUTIONS) == solutions_before
    with Gradebook(db_url(out)) as gb:
        for name, result in by_student.items():
            stored = gb.find_submission_notebook(result.notebook, result.assignment, name)
            assert stored.score == pytest.approx(result.score), f"{name}: the gradebook differs from the grade"
    assert all(r.status != results.GRADER_ERROR for r in by_student.values())
