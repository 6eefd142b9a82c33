"""The student bundle: the course exactly as students receive it (``make student-bundle``).

It is assembled from an allow-list: the released notebooks of each week, with a README per week written
here for students (the repository's week READMEs are notes for authors), the ``course`` package, what
``make setup`` needs, and the student README and Makefile from ``student/``. Solutions, hidden tests,
the grader, the tests and the examples never go in. After writing, every file is scanned for each
line of every solution and hidden test; a bundle holding one is deleted and the build fails.

The notebooks and the ``course`` package cite the course's measurements and scripts as files "in the
course's online repository". The build takes that repository's public address (``COURSE_URL``) and
writes it after every such citation, in every text file it ships, so a student can follow each one
from where it is read; the solutions and the released notebooks keep the phrase alone, so they need
no address and the release is the same for every course that runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

from grader.authoring import release
from grader.intake.layout import REPO, course_notebooks

DEFAULT_DEST = REPO / "build" / "student-bundle"
TEMPLATES = REPO / "student"
MARKER = ".student-bundle"  # marks a folder this module wrote, so it may be replaced
MIN_SECRET_CHARS = 8  # shorter lines ("pass", "return c", ")") are not evidence of a leak
_SECRET_BLOCKS = (("BEGIN SOLUTION", "END SOLUTION"), ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
_WEEK_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*", "*.md")
_TITLE = re.compile(r"^#\s+Week\s+\d+,\s*([^:]+):\s*(.+)$")
# "the course's online repository", also broken over lines (in a comment, the next line's "#" and indent)
ONLINE = re.compile(r"the(\s+(?:#\s*)?)course's(\s+(?:#\s*)?)online(\s+(?:#\s*)?)repository")
_URL = re.compile(r"https?://[^\s()<>\[\]`'\"]+[^\s()<>\[\]`'\".,;:]")
# Folders of the course repository that students never receive; the setup files' comments cite some of them.
AUTHORS_ONLY = ("solutions", "examples", "grader", "tests", "bench", "docs", "student")
_AUTHOR_PATH = re.compile(r"(?<![\w./-])(?:grader|tests|bench|docs)/[\w./-]*[\w/]")
_ADDRESSED = (".ipynb", ".md", ".py", ".yml", ".toml", ".txt", "Makefile")


class BundleError(Exception):
    pass


def secret_lines() -> set[str]:
    """Non-trivial lines found only inside solution or hidden-test blocks of the solution notebooks.

    A line that the notebook also shows outside those blocks (``M, N, K,`` in a kernel's signature) is public.
    """
    hidden: set[str] = set()
    public: set[str] = set()
    for notebook in course_notebooks():
        for cell in release.read(notebook.solution_path).cells:
            inside = None
            for line in cell.source.splitlines():
                if inside is None:
                    inside = next((end for begin, end in _SECRET_BLOCKS if begin in line), None)
                    public.add(line.strip())
                elif inside in line:
                    inside = None
                else:
                    hidden.add(line.strip())
    return {line for line in hidden - public if len(line) >= MIN_SECRET_CHARS}


def file_lines(path: Path) -> list[str]:
    """A file's lines as a reader sees them: a notebook's cell sources and outputs decoded from JSON."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    if path.suffix == ".ipynb":
        strings: list[str] = []

        def walk(node: object) -> None:
            if isinstance(node, str):
                strings.append(node)
            elif isinstance(node, list | dict):
                for child in node.values() if isinstance(node, dict) else node:
                    walk(child)

        walk(json.loads(text))
        text = "\n".join(strings) + "\n" + text
    return [line.strip() for line in text.splitlines()]


def leaks(folder: Path, secrets: set[str] | None = None) -> list[str]:
    """``path: line`` for every secret line found in a file under ``folder``."""
    secrets = secret_lines() if secrets is None else secrets
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        found += [f"{path.relative_to(folder)}: {line}" for line in dict.fromkeys(file_lines(path)) if line in secrets]
    return found


def _without_author_notes(text: str) -> str:
    """``text`` less each block of comment lines that speaks of the solutions or the examples (not shipped)."""
    kept: list[str] = []
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("#"):
            block.append(line)
            continue
        if not any(re.search(rf"\b(?:{'|'.join(AUTHORS_ONLY)})/", note) for note in block):
            kept += block
        block = []
        kept.append(line)
    return "\n".join(kept[:-1]) + "\n"


def cite_online(text: str) -> str:
    """``text`` with each path into the course's own folders in a ``#`` comment cited as in its online repository.

    For the setup files the bundle copies as they are (requirements, environment.yml): their comments say which
    of the grader's modules or tests needs a package.
    """
    def cited(match: re.Match[str]) -> str:
        already = ONLINE.match(match.string, match.end() + len(" in "))
        return match[0] if already else f"{match[0]} in the course's online repository"

    lines = []
    for line in text.splitlines(keepends=True):
        code, hash_, note = line.partition("#")
        lines.append(code + hash_ + _AUTHOR_PATH.sub(cited, note))
    return "".join(lines)


def student_pyproject(text: str) -> str:
    """The course's pyproject.toml, installing only ``course`` (no grader package, script or templates), without
    the lint settings' mentions of folders the bundle does not ship."""
    edited = text.replace('include = ["course*", "grader*"]', 'include = ["course*"]')
    for table in ("project.scripts", "tool.setuptools.package-data"):  # the table and its lines, up to the next one
        edited = re.sub(rf"(?m)^\[{re.escape(table)}\]\n(?:[^\[\n].*\n|\n)*", "", edited)
    edited = _without_author_notes(re.sub(rf'"(?:{"|".join(AUTHORS_ONLY)})/[^"]*",\s*', "", edited))
    if 'include = ["course*"]' not in edited or re.search(r"\bgrader\b", edited):
        raise BundleError("pyproject.toml changed shape: update student_pyproject in grader/authoring/bundle.py")
    return edited


def week_readme(week: Path) -> str:
    """A week's README for students: its notebooks, each with the title of its first heading."""
    number = week.name.removeprefix("week")
    lines = [f"# Week {number}", "",
             "One notebook per day, in this order. To check one, run `make check NB=" + week.name + "/<notebook>`",
             "in the folder above (its README says more).", ""]
    for notebook in sorted(week.glob("*.ipynb"), key=lambda p: (p.name.startswith("bonus"), p.name)):
        first = release.read(notebook).cells[0].source.splitlines()[0]
        title = _TITLE.match(first)
        day = title[1].strip().capitalize() if title else ""
        what = f"{day}, `{notebook.name}`: {title[2]}" if title else f"`{notebook.name}`"
        lines.append(f"- {what}")
    return "\n".join(lines) + "\n"


def check_url(url: str) -> str:
    """The course's public address, as given; BundleError unless it is one plain http(s) address."""
    if not _URL.fullmatch(url or ""):
        raise BundleError(f"COURSE_URL must be the course's public address, such as https://github.com/org/course, "
                          f"not {url!r}: the notebooks cite files in that repository")
    return url


def with_address(text: str, url: str) -> str:
    """``text`` with ``(url)`` after each mention of the course's online repository that lacks it."""
    return ONLINE.sub(lambda m: m[0] if text.startswith(f" ({url})", m.end()) else f"{m[0]} ({url})", text)


def address(folder: Path, url: str) -> list[Path]:
    """Write the course's address after every mention of its online repository in ``folder``'s text files.

    A notebook is edited cell by cell, as JSON, so a mention broken over two lines of a cell is found too;
    returns the files changed.
    """
    changed = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(_ADDRESSED)):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            nb = json.loads(text)
            for cell in nb["cells"]:
                source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                if ONLINE.search(source):
                    cell["source"] = with_address(source, url).splitlines(keepends=True)
            edited = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        else:
            edited = with_address(text, url)
        if edited != text:
            path.write_text(edited, encoding="utf-8")
            changed.append(path)
    return changed


def _prepare(destination: Path) -> None:
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        if not (destination / MARKER).is_file():
            raise BundleError(f"{destination} is not empty and not an earlier student bundle; choose another DEST")
        shutil.rmtree(destination)
    destination.mkdir(parents=True, exist_ok=True)


def build(destination: Path = DEFAULT_DEST, course_url: str = "") -> list[Path]:
    """Write the bundle into ``destination``, citing the online repository at ``course_url``; the files written."""
    course_url = check_url(course_url)
    problems = release.drifted()
    if problems:
        raise BundleError("the student notebooks are not the current release:\n" + "\n".join(problems))
    destination = destination.resolve()
    _prepare(destination)
    for week in sorted(p for p in REPO.glob("week*") if p.is_dir()):
        shutil.copytree(week, destination / week.name, ignore=_WEEK_SKIP)
        (destination / week.name / "README.md").write_text(week_readme(week), encoding="utf-8")
    shutil.copytree(REPO / "course", destination / "course", ignore=_SKIP)
    shutil.copytree(REPO / "requirements", destination / "requirements", ignore=_SKIP)
    shutil.copy(REPO / "environment.yml", destination / "environment.yml")
    for setup_file in [destination / "environment.yml", *sorted((destination / "requirements").glob("*.txt"))]:
        setup_file.write_text(cite_online(setup_file.read_text(encoding="utf-8")), encoding="utf-8")
    pyproject = student_pyproject((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (destination / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    shutil.copy(TEMPLATES / "README.md", destination / "README.md")
    shutil.copy(TEMPLATES / "Makefile", destination / "Makefile")
    shutil.copy(TEMPLATES / ".gitignore", destination / ".gitignore")
    # the autograding workflow, for a course that grades pushes on its own GPU runner (the README says how)
    shutil.copytree(TEMPLATES / ".github", destination / ".github")
    (destination / MARKER).write_text("written by `make student-bundle`; rebuilt in place\n", encoding="utf-8")
    address(destination, course_url)
    found = leaks(destination)
    if found:
        shutil.rmtree(destination)
        raise BundleError("solution or hidden-test lines would reach students:\n" + "\n".join(found))
    return sorted(p for p in destination.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.authoring.bundle", description=__doc__.splitlines()[0])
    parser.add_argument("destination", nargs="?", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--course-url", default=os.environ.get("COURSE_URL", ""),
                        help="the course's public repository, written after every citation of it "
                             "(default: $COURSE_URL; required)")
    args = parser.parse_args(argv)
    try:
        files = build(args.destination, args.course_url)
    except BundleError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files to {args.destination}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
