"""The student bundle holds what students need and nothing of the grader's: no solution, no hidden test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.authoring import bundle, release
from grader.authoring.demo import FROM_SOLUTION, fill
from grader.intake.layout import REPO, course_notebooks

SHORT = 8  # shorter lines ("pass", ")") prove nothing
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
EXPECTED = ["README.md", "Makefile", "environment.yml", "pyproject.toml", "requirements/base.txt",
            "requirements/constraints.txt", "requirements/torch-cpu.txt", "course/__init__.py",
            "course/selfcheck.py", "course/exercises/matmul_fp32.py", "week1/day7_fast_matmul.ipynb",
            "week1/README.md", "week2/README.md", "week3/README.md", ".github/workflows/autograde.yml", ".gitignore"]
FORBIDDEN = ["solutions", "grader", "tests", "examples", "bench", ".ci", "student", "build"]
COURSE_URL = "https://github.com/example-org/gpu-kernels-course"


def secrets_of(notebook: Path) -> dict[str, set[str]]:
    """{"solution": lines, "hidden": lines, "public": lines}: lines inside such blocks (and not shown outside
    them in this notebook), and the lines it shows, read straight from the JSON."""
    found: dict[str, set[str]] = {"solution": set(), "hidden": set()}
    public: set[str] = set()
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        kind = None
        for line in source.splitlines():
            if "BEGIN SOLUTION" in line or "BEGIN HIDDEN TESTS" in line:
                kind = "solution" if "SOLUTION" in line else "hidden"
            elif "END SOLUTION" in line or "END HIDDEN TESTS" in line:
                kind = None
            elif kind:
                found[kind].add(line.strip())
            else:
                public.add(line.strip())
    return {**{kind: {line for line in lines - public if len(line) >= SHORT} for kind, lines in found.items()},
            "public": public}


def texts(folder: Path) -> dict[str, list[str]]:
    """Each file's stripped lines; a notebook's JSON strings are decoded first, so escaped quotes cannot hide."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        raw = path.read_bytes().decode("utf-8", errors="replace")
        decoded = []
        if path.suffix == ".ipynb":
            nb = json.loads(raw)
            for cell in nb["cells"]:
                decoded.append(cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]))
            decoded.append(json.dumps(nb["metadata"]))
        out[str(path.relative_to(folder))] = [line.strip() for line in (raw + "\n" + "\n".join(decoded)).splitlines()]
    return out


def found_in(folder: Path, secrets: set[str]) -> list[str]:
    return [f"{name}: {line}" for name, lines in texts(folder).items() for line in lines if line in secrets]


SOLUTION_NOTEBOOKS = sorted((REPO / "solutions").glob("*/*.ipynb"))
_READ = [secrets_of(nb) for nb in SOLUTION_NOTEBOOKS]
# A line one notebook shows (say `return out`) is no secret of another's solution.
_SHOWN = set().union(*(found["public"] for found in _READ))
SECRETS = {kind: set().union(*(found[kind] for found in _READ)) - _SHOWN for kind in ("solution", "hidden")}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    destination = tmp_path_factory.mktemp("bundle") / "student-bundle"
    bundle.build(destination, COURSE_URL)
    return destination


def test_the_scan_has_something_to_find():
    assert SOLUTION_NOTEBOOKS
    assert 'course.check.assert_correct(SPEC, matmul, "hidden")' in SECRETS["hidden"]
    assert "acc += a_col[:, None] * b_row[None, :]  # BLOCK_M * BLOCK_N FMAs from BLOCK_M + BLOCK_N loads" in SECRETS[
        "solution"]
    assert found_in(REPO / "solutions", SECRETS["solution"]) and found_in(REPO / "solutions", SECRETS["hidden"])


@pytest.mark.parametrize("relative", EXPECTED)
def test_bundle_has_what_students_need(built: Path, relative: str):
    assert (built / relative).is_file()


def test_bundle_has_nothing_of_the_graders(built: Path):
    present = sorted(p.name for p in built.iterdir())
    assert not set(FORBIDDEN) & set(present), present
    # the student-side workflow only, not the course's own CI
    assert [str(p.relative_to(built)) for p in (built / ".github").rglob("*") if p.is_file()] == \
        [".github/workflows/autograde.yml"]
    assert not [p for p in built.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc"]


@pytest.mark.parametrize("kind", ["solution", "hidden"])
def test_no_file_holds_a_secret_line(built: Path, kind: str):
    assert found_in(built, SECRETS[kind]) == []


def test_no_file_holds_a_block_marker(built: Path):
    hits = [f"{name}: {line}" for name, lines in texts(built).items() for line in lines
            if any(marker in line for marker in MARKERS)]
    assert hits == []


def test_the_student_notebooks_are_the_release_with_the_courses_address(built: Path):
    for notebook in sorted(REPO.glob("week*/*.ipynb")):
        shipped = json.loads((built / notebook.parent.name / notebook.name).read_text(encoding="utf-8"))
        released = json.loads(notebook.read_text(encoding="utf-8"))
        for cell in released["cells"]:
            cell["source"] = bundle.with_address("".join(cell["source"]), COURSE_URL).splitlines(keepends=True)
        assert shipped == released


def test_every_citation_of_the_online_repository_gives_its_address(built: Path):
    addressed = re.compile(bundle.ONLINE.pattern + re.escape(f" ({COURSE_URL})"))
    cited = {name: len(addressed.findall(text)) for name, text in readable(built).items()}
    assert sum(cited.values()) >= 17 and cited["week2/day5_tma.ipynb (cell 11)"] == 1  # broken over two lines
    bare = {name: len(bundle.ONLINE.findall(text)) - cited[name] for name, text in readable(built).items()}
    assert {name: count for name, count in bare.items() if count} == {}
    assert f"online repository ({COURSE_URL})" in (built / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("url", ["", "github.com/org/course", "https://example.org/a b", "ftp://example.org/x"])
def test_the_build_needs_the_courses_public_address(tmp_path: Path, url: str):
    with pytest.raises(bundle.BundleError, match="COURSE_URL"):
        bundle.build(tmp_path / "bundle", url)
    assert not (tmp_path / "bundle").exists()
    assert bundle.main([str(tmp_path / "bundle"), "--course-url", url]) == 2


def test_the_address_is_written_once_even_across_comment_lines():
    text = "# measured (bench/RESULTS.md in the course's\n#   online repository): 0.9\n"
    once = bundle.with_address(text, COURSE_URL)
    assert once == f"# measured (bench/RESULTS.md in the course's\n#   online repository ({COURSE_URL})): 0.9\n"
    assert bundle.with_address(once, COURSE_URL) == once


def test_setup_files_cite_the_graders_files_in_the_online_repository():
    note = "pkg==1  # needed by grader/gpu/gpu_work.py\n# (tests/test_environment.py fails on drift)\nname: x\n"
    cited = bundle.cite_online(note)
    assert cited == ("pkg==1  # needed by grader/gpu/gpu_work.py in the course's online repository\n"
                     "# (tests/test_environment.py in the course's online repository fails on drift)\nname: x\n")
    assert bundle.cite_online(cited) == cited
    assert bundle.cite_online('path = "grader/x.py"\n') == 'path = "grader/x.py"\n'  # not a comment


def test_pyproject_installs_only_course(built: Path):
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((built / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["course*"]
    assert "scripts" not in config["project"] and "package-data" not in config["tool"]["setuptools"]
    assert all("/" not in excluded for excluded in config["tool"]["ruff"]["extend-exclude"])


def test_the_student_files_come_from_student(built: Path):
    readme = (REPO / "student" / "README.md").read_text()
    assert (built / "README.md").read_text() == bundle.with_address(readme, COURSE_URL)
    makefile = (built / "Makefile").read_text()
    assert makefile == (REPO / "student" / "Makefile").read_text()
    assert "course.selfcheck" in makefile and "grader" not in makefile


def test_course_imports_from_the_bundle_alone(built: Path):
    env = {**os.environ, "PYTHONPATH": str(built), "COURSE_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "-c", "import course, course.selfcheck; print(course.__file__)"],
                          cwd=built, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve().is_relative_to(built.resolve())


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_student_makefile_check_runs_the_selfcheck(built: Path):
    done = subprocess.run(["make", "-n", "check", "NB=week1/day7_fast_matmul-Copy1.ipynb"], cwd=built,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '-m course.selfcheck "week1/day7_fast_matmul-Copy1.ipynb"' in done.stdout


def test_a_leak_stops_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    planted = tmp_path / "planted"
    shutil.copytree(REPO / "student", planted)
    (planted / "README.md").write_text("tl.store(c_ptrs, acc, mask=row_ok[:, None] & col_ok[None, :])\n")
    monkeypatch.setattr(bundle, "TEMPLATES", planted)
    destination = tmp_path / "bundle"
    with pytest.raises(bundle.BundleError, match="would reach students"):
        bundle.build(destination, COURSE_URL)
    assert not destination.exists()


def test_an_unrelated_folder_is_never_replaced(tmp_path: Path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(bundle.BundleError, match="not empty"):
        bundle.build(tmp_path, COURSE_URL)
    assert (tmp_path / "keep.txt").read_text() == "mine"


@pytest.mark.slow
def test_the_students_check_runs_from_the_bundle(built: Path):
    env = {**os.environ, "PYTHONPATH": str(built), "COURSE_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "-m", "course.selfcheck", "week1/day7_fast_matmul.ipynb"], cwd=built,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr  # the shipped notebook holds stubs
    assert "not graded yet: still a stub" in done.stdout
    assert "     9  failed here, or are unfinished or not run (6 items)" in done.stdout


AUTHOR_PHRASES = ("make release", "solutions/", "student-bundle")
MADE_BY_SETUP = {".venv"}  # `make setup` creates it in the student's copy
_PATH = re.compile(r"(?<![\w./-])((?:\.?[\w-]+/)+[\w.-]*[\w/])")


READABLE = (".md", ".py", ".yml", ".toml", ".txt", ".gitignore", "Makefile")


def readable(folder: Path) -> dict[str, str]:
    """Every text a student may read: text files (the ``course`` package's comments and docstrings among them)
    and each cell of each notebook, Markdown and code."""
    found = {str(p.relative_to(folder)): p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name.endswith(READABLE)}
    for path in sorted(folder.rglob("*.ipynb")):
        cells = release.read(path).cells
        found.update({f"{path.relative_to(folder)} (cell {i})": c.source for i, c in enumerate(cells)})
    return found


def unshipped_references(folder: Path, url: str = COURSE_URL) -> list[str]:
    """Paths into the repository that ``folder`` lacks, unless the text cites them in the course's online
    repository at its address; author phrases."""
    top = {p.name for p in REPO.iterdir()} - MADE_BY_SETUP
    # "`bench/RESULTS.md` in the course's online repository (url)", also after a list of paths joined by "and"
    cited = rf"in\s+(?:#\s*)?{bundle.ONLINE.pattern}{re.escape(f' ({url})')}"
    online = re.compile(rf"(?:[\s`#,]|and\b|{_PATH.pattern})*{cited}")
    found = []
    for name, text in readable(folder).items():
        for match in _PATH.finditer(text):
            path = match[1]
            cited_online = online.match(text, match.end())
            shipped = (folder / path).exists() or (folder / f"{path}.ipynb").is_file()  # a notebook's key
            if path.split("/")[0] in top and not shipped and not cited_online:
                found.append(f"{name}: {path}")
        found += [f"{name}: {phrase!r}" for phrase in AUTHOR_PHRASES if phrase in text]
    return found


def test_every_text_is_for_students_and_cites_what_it_ships(built: Path):
    assert unshipped_references(built) == []


def test_the_scan_finds_an_author_note_and_a_path_left_behind(built: Path, tmp_path: Path):
    copy = tmp_path / "bundle"
    shutil.copytree(built, copy)
    (copy / "week1" / "NOTES.md").write_text("Generated from `solutions/week1/` by `make release`; results in\n"
                                            "bench/RESULTS.md. Setup makes `.venv/bin/jupyter`; see course/check.py.\n")
    assert [f for f in unshipped_references(copy) if f.startswith("week1/NOTES.md")] == [
        "week1/NOTES.md: solutions/week1/", "week1/NOTES.md: bench/RESULTS.md",
                                          "week1/NOTES.md: 'make release'", "week1/NOTES.md: 'solutions/'"]
    (copy / "course" / "extra.py").write_text("# measured by bench/stages.py and tests/test_stages.py; see\n"
                                              "# grader/judge.py. Results: bench/RESULTS.md in the course's online "
                                              f"repository ({COURSE_URL})\nX = 1\n")
    assert [f for f in unshipped_references(copy) if f.startswith("course/extra.py")] == [
        "course/extra.py: bench/stages.py", "course/extra.py: tests/test_stages.py", "course/extra.py: grader/judge.py"]
    # a citation of the online repository without its address is a path left behind too
    assert unshipped_references(copy, "https://example.org/other") != unshipped_references(copy)


def test_each_week_has_a_readme_for_students(built: Path):
    for week in sorted({nb.assignment for nb in course_notebooks()}):
        readme = (built / week / "README.md").read_text(encoding="utf-8")
        listed = re.findall(r"`(\w+\.ipynb)`", readme)
        assert listed and sorted(listed) == sorted(p.name for p in (built / week).glob("*.ipynb"))
        assert f"make check NB={week}/<notebook>" in readme


MASKED_LOAD = "tl.load(x_ptr + offsets, mask=inside)"


def unmasked_copy() -> nbformat.NotebookNode:
    """Week 1 Day 5 as a student finished it, but with the mask dropped from the copy kernel's load."""
    notebook = next(nb for nb in course_notebooks() if nb.key == "week1/day5_memory")
    source = next(c.source for c in release.read(notebook.solution_path).cells
                  if c.metadata.get("nbgrader", {}).get("grade_id") == "copy_kernel")
    assert MASKED_LOAD in source
    return fill(notebook, {FROM_SOLUTION: "", "copy_kernel": source.replace(MASKED_LOAD, "tl.load(x_ptr + offsets)")})


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_check_shows_a_gpu_warning_under_the_item_that_ran_the_kernel(built: Path, tmp_path: Path):
    # A stand-in for what `make setup` makes: this interpreter, and the setup marked done.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".setup-done").touch()
    path = tmp_path / "day5_memory.ipynb"
    nbformat.write(unmasked_copy(), str(path))
    done = subprocess.run(["make", "check", f"NB={path}", f"VENV={venv}", "DEVICE=cpu"], cwd=built,
                          capture_output=True, text=True, timeout=300)
    # passed, with a warning: course.selfcheck exits 3, which make reports as the recipe's error (make exits 2)
    assert done.returncode == 2 and "Error 3" in done.stderr, done.stdout + done.stderr
    assert "-m course.selfcheck" in done.stdout
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["test_copy_visible"])
    assert lines[at].endswith("passed (visible tests); see the GPU warning below")
    assert lines[at + 1].split()[:3] == ["GPU", "warning:", "[unchecked-address]"]
    assert "copy_kernel" in lines[at + 1] and "tl.load" in lines[at + 1]
    assert lines[at + 2].split()[:2] == ["fix:", "mask"]
    assert lines[at + 3].split()[0] == "test_copy_hidden"
    # every_kth's kernel masks its load: the only warning is the copy's
    assert done.stdout.count("GPU warning:") == 1 and "1 GPU warning above" in done.stdout
    assert "Exit status 3: the visible tests passed, but with a GPU warning." in done.stdout


def test_the_bundle_ignores_what_setup_and_check_write(built: Path):
    ignored = (built / ".gitignore").read_text().split()
    assert ".venv/" in ignored and "build/" in ignored
