"""Nothing dropped: every student folder, however named or filled, becomes rows with a status and a message.

The discovery tests below run no notebook. The batch (marked slow) grades one class of awkward
submissions through ``grader.pipeline.grade`` and checks that each is accounted for in the results,
grades.csv, students.csv, grades-wide.csv, the gradebook and the index page, and that
``python -m grader grade`` says so in its closing summary and exit status.
"""

from __future__ import annotations

import csv
import html
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from grader import cli
from grader.authoring import demo
from grader.authoring.release import student_version
from grader.flow.settings import Settings
from grader.intake import layout
from grader.intake.layout import CLASS_FILES, course_notebooks, find_submissions, safe_id, valid_id
from grader.pipeline import grade
from grader.run.failure import describe_failed_run
from grader.score import results

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")
EXPECTED = "week1/day7_fast_matmul.ipynb"


def _stub() -> nbformat.NotebookNode:
    return student_version(NOTEBOOK)


def _write(path: Path, nb: nbformat.NotebookNode | str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, bytes):
        path.write_bytes(nb)
    elif isinstance(nb, str):
        path.write_text(nb, encoding="utf-8")
    else:
        nbformat.write(nb, str(path))


def _by_student(submissions):
    return {s.student: s for s in submissions if s.notebook == NOTEBOOK.name}


# Discovery: no notebook runs.

def test_safe_ids_keep_valid_names_and_map_the_others_apart():
    assert safe_id("alice") == "alice"
    for name in ("john smith", "zoë", "-dash", "..", "日本", "a/b"):
        assert valid_id(safe_id(name)), name
    assert safe_id("john smith") != safe_id("john_smith") and safe_id("john smith") != safe_id("john  smith")
    assert safe_id("zoë").startswith("zoe-") and safe_id("-dash").startswith("dash-")


def test_every_student_folder_gets_a_submission(tmp_path):
    root = tmp_path / "class"
    for name in ("john smith", "zoë", "-dash"):
        _write(root / name / EXPECTED, _stub())
    (root / "no_week1").mkdir(parents=True)
    (root / "no_week1" / "notes.txt").write_text("I forgot")
    (root / "empty").mkdir()
    (root / ".hidden").mkdir()  # not a student
    (root / "stray.txt").write_text("at the top")
    found, problems = find_submissions(root)
    by = _by_student(found)
    assert set(by) == {"john smith", "zoë", "-dash", "no_week1", "empty"}
    for name in ("john smith", "zoë", "-dash"):
        assert by[name].path == root / name / EXPECTED and by[name].status == "" and by[name].found == ""
        assert valid_id(by[name].student_id) and by[name].student_id != name
    assert by["no_week1"].status == results.MISSING and by["no_week1"].path is None
    assert "no week1/ folder" in by["no_week1"].found and "notes.txt" in by["no_week1"].found
    assert "empty" in by["empty"].found
    assert any("stray.txt" in p for p in problems)


def test_a_renamed_notebook_is_graded_when_it_is_the_only_one(tmp_path):
    root = tmp_path / "class"
    _write(root / "renamed" / "week1" / "day7.ipynb", _stub())
    _write(root / "copy" / "week1" / "day7_fast_matmul-Copy1.ipynb", _stub())
    _write(root / "copy_and_scratch" / "week1" / "day7_fast_matmul-Copy1.ipynb", _stub())
    _write(root / "copy_and_scratch" / "week1" / "scratch.ipynb", _stub())
    _write(root / "misplaced" / "Week1" / "day7_fast_matmul.ipynb", _stub())
    _write(root / "top_level" / "mine.ipynb", _stub())
    _write(root / "two" / "week1" / "a.ipynb", _stub())
    _write(root / "two" / "week1" / "b.ipynb", _stub())
    _write(root / "two_copies" / "week1" / "day7_fast_matmul (1).ipynb", _stub())
    _write(root / "two_copies" / "week1" / "day7_fast_matmul (2).ipynb", _stub())
    _write(root / "exact_and_copy" / EXPECTED, _stub())
    _write(root / "exact_and_copy" / "week1" / "day7_fast_matmul-Copy1.ipynb", _stub())
    by = _by_student(find_submissions(root)[0])
    for name, file in (("renamed", "week1/day7.ipynb"), ("copy", "week1/day7_fast_matmul-Copy1.ipynb"),
                       ("copy_and_scratch", "week1/day7_fast_matmul-Copy1.ipynb"),
                       ("misplaced", "Week1/day7_fast_matmul.ipynb"), ("top_level", "mine.ipynb")):
        assert by[name].status == "" and by[name].submitted_file == file, name
        assert by[name].found.startswith(f"graded {file}: no {EXPECTED} was submitted"), by[name].found
    for name, files in (("two", ("week1/a.ipynb", "week1/b.ipynb")),
                        ("two_copies", ("day7_fast_matmul (1)", "day7_fast_matmul (2)"))):
        assert by[name].status == results.AMBIGUOUS and by[name].path is None, name
        assert all(f in by[name].found for f in files) and "none was graded" in by[name].found
    assert by["exact_and_copy"].submitted_file == EXPECTED and by["exact_and_copy"].found == ""


def test_links_and_huge_files_are_not_read(tmp_path, monkeypatch):
    root = tmp_path / "class"
    (root / "links" / "week1").mkdir(parents=True)
    (root / "links" / EXPECTED).symlink_to("/etc/passwd")
    _write(root / "huge" / EXPECTED, "x" * 2000)
    monkeypatch.setattr(layout, "MAX_NOTEBOOK_BYTES", 1000)
    by = _by_student(find_submissions(root)[0])
    assert by["links"].status == results.CORRUPT and by["links"].path is None and "link" in by["links"].found
    assert by["huge"].status == results.CORRUPT and by["huge"].path is None and "MiB" in by["huge"].found


def test_the_batch_grades_the_assignments_its_students_submitted(tmp_path):
    root = tmp_path / "class"
    _write(root / "alice" / EXPECTED, _stub())
    (root / "bob" / "week1").mkdir(parents=True)
    (root / "carol").mkdir()
    by = _by_student(find_submissions(root)[0])
    assert {s.assignment for s in by.values()} == {"week1"}
    assert "week1/ is empty" in by["bob"].found and "no week1/ folder" in by["carol"].found


def test_a_failed_run_names_its_cell_and_shows_the_end_of_its_output(tmp_path):
    cells = [
        {"cell_type": "code", "source": "import course", "metadata": {"papermill": {"start_time": "t"}},
         "outputs": []},
        {"cell_type": "code", "source": ["\n", "total = 0\n", "while True:\n", "    total += 1\n"],
         "metadata": {"papermill": {"start_time": "t"}},
         "outputs": [{"output_type": "stream", "name": "stdout", "text": "line\n" * 500 + "y" * 5000},
                     {"output_type": "error", "ename": "KeyboardInterrupt", "evalue": "",
                      "traceback": ["\x1b[31mKeyboardInterrupt\x1b[39m Traceback", "----> 3 while True:"]}]},
        {"cell_type": "code", "source": "print(1)", "metadata": {"nbgrader": {"grade_id": "later"}}, "outputs": []},
    ]
    (tmp_path / "executed.ipynb").write_text(json.dumps({"cells": cells}))
    stopped_at, tail = describe_failed_run(tmp_path, results.TIMEOUT)
    assert "cell 2 of 3" in stopped_at and "`total = 0`" in stopped_at
    assert tail.endswith("----> 3 while True:") and "\x1b" not in tail and "[5000 characters]" in tail
    assert len(tail.splitlines()) <= 40
    cells[1]["metadata"]["nbgrader"] = {"grade_id": "matmul_kernel"}
    (tmp_path / "executed.ipynb").write_text(json.dumps({"cells": cells}))
    assert describe_failed_run(tmp_path, results.KERNEL_DIED)[0].startswith("cell 'matmul_kernel'")
    assert describe_failed_run(tmp_path, results.OK) == ("", "")
    (tmp_path / "executed.ipynb").write_text("[[[[" * 100_000)  # untrusted: never an exception
    (tmp_path / "sandbox.log").write_text("noise\nKernel died while waiting for execute reply.\n")
    stopped_at, tail = describe_failed_run(tmp_path, results.KERNEL_DIED)
    assert stopped_at == "" and "Kernel died" in tail


# The batch: notebooks run (about a minute on two cores).

def _edited(edit) -> nbformat.NotebookNode:
    nb = _stub()
    edit(nb)
    return nb


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _bad_class(root: Path) -> dict[str, str]:
    """The class; returns each student's expected status."""
    demo_file = demo.DEMO_CLASS / "week1" / "day7_fast_matmul" / "fast_correct.py"
    answers = demo.parse_answers(demo_file.read_text(encoding="utf-8"))
    _write(root / "john smith" / EXPECTED, demo.fill(NOTEBOOK, answers))
    _write(root / "zoë" / EXPECTED, _stub())
    _write(root / "-dash" / EXPECTED, _stub())
    (root / "no_week1").mkdir(parents=True)
    (root / "no_week1" / "notes.txt").write_text("see attached")
    (root / "empty_folder").mkdir()
    _write(root / "renamed" / "week1" / "day7.ipynb", _stub())
    _write(root / "jupyter_copy" / "week1" / "day7_fast_matmul-Copy1.ipynb", _stub())
    _write(root / "two_notebooks" / "week1" / "a.ipynb", _stub())
    _write(root / "two_notebooks" / "week1" / "b.ipynb", _stub())
    _write(root / "corrupt_json" / EXPECTED, "{ this is not a notebook")
    _write(root / "empty_file" / EXPECTED, "")
    _write(root / "binary_junk" / EXPECTED, random.Random(7).randbytes(4096))
    _write(root / "nbformat3" / EXPECTED, json.dumps(
        {"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": ""}, "worksheets": [{"cells": []}]}))
    _write(root / "no_cells" / EXPECTED, _edited(lambda nb: nb.update(cells=[])))
    _write(root / "prints_10mb" / EXPECTED, _edited(lambda nb: nb.cells.insert(
        3, nbformat.v4.new_code_cell("print('x' * (10 * 2**20))"))))
    _write(root / "loops" / EXPECTED, _edited(lambda nb: nb.cells.insert(
        3, nbformat.v4.new_code_cell("print('starting')\nimport time\nwhile True:\n    time.sleep(0.1)"))))
    _write(root / "exits" / EXPECTED, _edited(lambda nb: setattr(
        _cell(nb, "matmul_kernel"), "source", "import os\nprint('bye', flush=True)\nos._exit(1)")))
    return {"john smith": results.OK, "zoë": results.OK, "-dash": results.OK, "no_week1": results.MISSING,
            "empty_folder": results.MISSING, "renamed": results.OK, "jupyter_copy": results.OK,
            "two_notebooks": results.AMBIGUOUS, "corrupt_json": results.CORRUPT, "empty_file": results.CORRUPT,
            "binary_junk": results.CORRUPT, "nbformat3": results.CORRUPT, "no_cells": results.OK,
            "prints_10mb": results.OK, "loops": results.TIMEOUT, "exits": results.KERNEL_DIED}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root, out = tmp_path_factory.mktemp("bad-class"), tmp_path_factory.mktemp("bad-grades")
    expected = _bad_class(root)
    notes: list[str] = []
    graded = grade(root, out, Settings("cpu", "CPU (Triton interpreter)", runs=2, cell_timeout=20,
                                       notebook_timeout=300), log=notes.append)
    return root, out, expected, {r.student: r for r in graded if r.notebook == NOTEBOOK.name}, notes


@pytest.mark.slow
@pytest.mark.sandbox
def test_every_folder_has_a_result_with_its_own_status(batch):
    _, out, expected, by, _ = batch
    assert {name: r.status for name, r in by.items()} == expected
    for name, result in by.items():
        assert result.student_id == safe_id(name) and valid_id(result.student_id)
        assert (out / "results" / result.student_id / "week1" / "day7_fast_matmul.json").is_file()
        if result.status != results.OK:
            assert result.message and "KeyError" not in result.summary, name
    assert sorted(p.name for p in (out / "results").iterdir()) == sorted(safe_id(n) for n in expected)


@pytest.mark.slow
@pytest.mark.sandbox
def test_names_and_messages_say_what_happened(batch):
    _, _, _, by, notes = batch
    assert sum(i.score or 0 for i in by["john smith"].items) >= 5
    assert by["renamed"].submitted_file == "week1/day7.ipynb" and "week1/day7.ipynb" in by["renamed"].found
    assert by["jupyter_copy"].submitted_file == "week1/day7_fast_matmul-Copy1.ipynb"
    assert any("renamed" in n and "day7.ipynb" in n for n in notes)
    assert "a.ipynb" in by["two_notebooks"].message and "b.ipynb" in by["two_notebooks"].message
    assert "no week1/ folder" in by["no_week1"].message and "notes.txt" in by["no_week1"].message
    assert "empty" in by["empty_file"].message and "format 3" in by["nbformat3"].message
    assert "no cells" in " ".join(by["no_cells"].integrity)
    loops = by["loops"]
    assert "while True" in loops.stopped_at + loops.failure_tail and "stopped in" in loops.message
    assert "KeyboardInterrupt" in loops.failure_tail and "starting" in loops.failure_tail
    exits = by["exits"]
    assert "matmul_kernel" in exits.stopped_at and exits.failure_tail and "stopped in" in exits.message
    assert not by["zoë"].stopped_at and not by["zoë"].failure_tail


@pytest.mark.slow
@pytest.mark.sandbox
def test_every_submission_is_a_row_in_every_output(batch):
    from grader.report.feedback import write_pages
    from grader.report.tables import export

    _, out, expected, by, _ = batch
    written = export(list(by.values()), out)
    index = write_pages(list(by.values()), out).read_text(encoding="utf-8")
    items = list(csv.DictReader(written.grades.open(encoding="utf-8")))
    students = {r["student"]: r for r in csv.DictReader(written.students.open(encoding="utf-8"))}
    wide = list(csv.DictReader(written.wide.open(encoding="utf-8")))
    assert {r["student"] for r in items} == set(expected) == set(students) == {r["student"] for r in wide}
    assert len(wide) == len(expected)
    for name, status in expected.items():
        rows = [r for r in items if r["student"] == name]
        assert rows and {r["notebook_status"] for r in rows} == {status}, name
        assert rows[0]["student_id"] == students[name]["student_id"] == safe_id(name)
        assert students[name]["notebooks"] == f"week1/day7_fast_matmul: {status}"
        if status != results.OK:
            assert rows[0]["notebook_message"] and students[name]["messages"], name
        assert html.escape(name) in index, name
    assert students["john smith"]["pending"] == "5" and students["john smith"]["earned"] == \
        students["john smith"]["graded_max"]
    assert int(students["loops"]["not_graded_normally"]) == 1 and students["zoë"]["not_graded_normally"] == "0"


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_gradebook_has_every_student_under_a_safe_id(batch):
    _, out, expected, by, _ = batch
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        ids = {s.id: s for s in gb.students}
        assert set(ids) == {safe_id(name) for name in expected}
        assert ids[safe_id("john smith")].last_name == "john smith"
        for name, result in by.items():
            submission = gb.find_submission("week1", safe_id(name))
            assert submission.score == pytest.approx(sum(i.score or 0 for i in result.items)), name


@pytest.mark.slow
@pytest.mark.sandbox
def test_stock_nbgrader_export_in_out_leaves_grades_csv_alone(batch):
    _, out, expected, by, _ = batch
    from grader.report.tables import export

    written = export(list(by.values()), out)
    before = written.grades.read_bytes()
    subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=out, check=True, capture_output=True)
    assert written.grades.read_bytes() == before
    rows = list(csv.DictReader((out / "nbgrader-grades.csv").open(encoding="utf-8")))
    assert {r["student_id"] for r in rows} == {safe_id(name) for name in expected}


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_cli_says_loudly_what_was_not_graded_and_exits_1(batch, capsys):
    root, out, expected, _, _ = batch
    argv = ["grade", str(root), "--out", str(out), "--device", "cpu", "--jobs", "2", "--cell-timeout", "20"]
    assert cli.main(argv) == 1  # everything is kept from the batch: nothing runs again
    captured = capsys.readouterr()
    from grader.score.stored import load_results

    # Every student also lacks the other Week 1 notebooks; a second notebook in one folder makes them ambiguous.
    failed = sum(r.status not in (results.OK, results.MISSING) for r in load_results(out))
    assert failed >= sum(s not in (results.OK, results.MISSING) for s in expected.values())
    assert re.search(rf"NOT GRADED NORMALLY: {failed} of \d+ notebooks", captured.out), captured.out[-2000:]
    assert "NOT GRADED NORMALLY" in captured.err
    assert re.search(r"MISSING: \d+ of", captured.out) and "loops/week1/day7_fast_matmul: timeout" in captured.out
    assert cli.main([*argv, "--allow-ungraded"]) == 0


def test_grade_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["grade", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 600;", "(default: 1800;", "(default: 900;", "(default: 8;", "(default: auto)",
                    "(default: build/grades)", "(default: drawn afresh", "(default: 6 per GPU", "(default: pipeline;",
                    "(default: every visible GPU;", "(default: a quarter of the CPUs"):
        assert default in text, default


def test_make_passes_the_schedule():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    command = subprocess.run(["make", "-n", "grade", "SCHEDULE=serial", "GPUS=0,1", "RUNS=8", "BUILDS=3",
                              "EXECUTOR=slurm", "SLURM_PARTITION=gpu", "SLURM_ACCOUNT=course", "SLURM_TIME=1:00:00",
                              "SLURM_GRES=gpu:1"],
                             capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent,
                             env=env).stdout
    for flag in ("--schedule serial", "--gpus 0,1", "--runs 8", "--builds 3", "--executor slurm",
                 "--slurm-partition gpu", "--slurm-account course", "--slurm-time 1:00:00", "--slurm-gres gpu:1"):
        assert flag in command


def test_make_builds_a_wheelhouse_for_another_machine_and_sets_up_from_it_with_no_index(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    repo = Path(__file__).parent.parent

    def dry(*args):
        return subprocess.run(["make", "-n", *args], capture_output=True, text=True, check=True, cwd=repo,
                              env=env).stdout

    fetch = " ".join(dry("wheelhouse", "WHEELHOUSE=wh", "WHEEL_PYTHON=3.12",
                         "WHEEL_PLATFORM=manylinux_2_28_x86_64 manylinux2014_x86_64").split())
    for flag in ("--only-binary=:all:", "--dest wh", "--python-version 3.12", "--platform manylinux_2_28_x86_64",
                 "--platform manylinux2014_x86_64", "-r requirements/base.txt", "-c requirements/constraints.txt"):
        assert flag in fetch
    # a fresh venv (a folder that does not exist yet), so make plans the whole setup
    setup = [line for line in dry("setup", f"VENV={tmp_path / 'venv'}", "OFFLINE=1", "WHEELHOUSE=wh").splitlines()
             if "pip install" in line]
    assert len(setup) >= 3 and all("--no-index --find-links wh" in line for line in setup)


def test_make_passes_the_limits_and_tolerates_only_the_demo_class():
    def dry(*args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
        return subprocess.run(["make", "-n", "grade", *args], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent.parent, env=env).stdout

    assert "--allow-ungraded" in dry()
    real = dry("SUBMISSIONS=subs", "CELL_TIMEOUT=30", "NOTEBOOK_TIMEOUT=90", "JUDGE_TIMEOUT=60", "MEMORY_GB=4")
    assert "--allow-ungraded" not in real
    for flag in ("--cell-timeout 30", "--notebook-timeout 90", "--judge-timeout 60", "--memory-gb 4"):
        assert flag in real
    assert "--allow-ungraded" in dry("SUBMISSIONS=subs", "ALLOW_UNGRADED=1")


def test_a_setup_on_a_venvs_python_with_system_site_packages_sees_that_venvs_packages(tmp_path):
    """The GPU runner's case: its torch lives in a venv, and the grader's venv made from that venv's Python must
    import it (``python -m venv --system-site-packages`` alone sees only the base interpreter's packages)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    venv = tmp_path / "venv"
    done = subprocess.run(["make", "setup", f"VENV={venv}", f"PYTHON={sys.executable}", "SYSTEM_SITE_PACKAGES=1"],
                          capture_output=True, text=True,
                          cwd=Path(__file__).parent.parent, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch, nbgrader; print(torch.__file__)"],
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stderr[-2000:]
    assert Path(found.stdout.strip()).is_relative_to(Path(sys.prefix)) and sys.prefix != sys.base_prefix


def test_what_collect_leaves_beside_the_students_is_no_stray_file(tmp_path):
    (tmp_path / "alice" / "week1").mkdir(parents=True)
    for name in (*CLASS_FILES, "notes.txt"):
        (tmp_path / name).write_text("{}")
    problems = find_submissions(tmp_path)[1]
    assert [p for p in problems if "top level" in p] == [f"{tmp_path / 'notes.txt'}: a file at the top level, not a "
                                                         "student's folder; ignored"]
