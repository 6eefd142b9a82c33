"""Where things live: the course's notebooks, and a class's submissions on disk."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.lms.term import TIMESTAMP_FILE
from grader.score import results

# What `python -m grader collect` leaves beside the students' folders (grader/lms/collect.py): the LMS's upload times,
# its ids and the roster. Named here, not imported: the sandbox's copy of this module must not load those modules.
CLASS_FILES = ("submitted_at.json", "collected.json", "roster.csv")

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "solutions"
KERNEL_NAME = "gpu-kernels-course"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MAX_NOTEBOOK_BYTES = 100 * 2**20  # a larger file is not read (a notebook with its outputs cleared is far smaller)
_MAX_FILES = 2000  # files looked at in one student's folder
_MAX_DEPTH = 6  # folder levels looked into below a student's folder
_JUNK_FOLDERS = {"__MACOSX", "__pycache__", "node_modules"}


@dataclass(frozen=True)
class CourseNotebook:
    """One released notebook: ``assignment`` is its week folder, ``name`` its file stem."""

    assignment: str
    name: str

    @property
    def solution_path(self) -> Path:
        return SOLUTIONS / self.assignment / f"{self.name}.ipynb"

    @property
    def student_path(self) -> Path:
        return REPO / self.assignment / f"{self.name}.ipynb"

    @property
    def key(self) -> str:
        return f"{self.assignment}/{self.name}"


def course_notebooks() -> list[CourseNotebook]:
    """Every notebook under solutions/<week>/, in a stable order."""
    return [
        CourseNotebook(path.parent.name, path.stem)
        for path in sorted(SOLUTIONS.glob("*/*.ipynb"))
        if not path.name.startswith(".")
    ]


def find_course_notebook(assignment: str, name: str) -> CourseNotebook | None:
    for notebook in course_notebooks():
        if (notebook.assignment, notebook.name) == (assignment, name):
            return notebook
    return None


@dataclass(frozen=True)
class Submission:
    """One expected notebook of one student, found (or not) under ``<root>/<student>/``.

    ``student`` is the student's folder name exactly as given (shown in every report); ``student_id``
    is its safe form (the gradebook's student id, and the folder name under OUT). ``path`` is the file
    to grade, or None when there is none; ``status`` is then the status decided here (missing,
    ambiguous, corrupt) and ``found`` says why, naming what was found instead. When ``path`` is not
    ``<assignment>/<notebook>.ipynb`` (a renamed or misplaced notebook), ``found`` says which file was
    graded and why.
    """

    student: str
    assignment: str
    notebook: str
    path: Path | None  # the file to grade; None: nothing to grade (see status and found)
    student_id: str = ""
    status: str = ""  # "" when ``path`` is to be graded
    found: str = ""
    submitted_file: str = ""  # ``path`` relative to the student's folder

    def __post_init__(self) -> None:
        if not self.student_id:
            object.__setattr__(self, "student_id", safe_id(self.student))

    @property
    def key(self) -> str:
        return f"{self.student_id}/{self.assignment}/{self.notebook}"

    @property
    def expected_file(self) -> str:
        return f"{self.assignment}/{self.notebook}.ipynb"


def valid_id(text: str) -> bool:
    return bool(_ID.match(text))


def safe_id(name: str) -> str:
    """A student id safe as a gradebook id and a folder name: ``name`` itself when it already is one,
    else an ASCII form of it plus a short hash of the name as given (so two names never share one)."""
    if valid_id(name):
        return name
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", ascii_name).lstrip("_.-")[:40].rstrip("_.-") or "student"
    return f"{slug}-{hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def shown(name: str) -> str:
    """A folder or file name as it can be printed (undecodable bytes escaped, never an exception)."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass
class _Folder:
    """What one student's folder holds: regular files by relative path, plus what cannot be graded."""

    notebooks: list[PurePosixPath] = field(default_factory=list)  # regular *.ipynb files
    others: list[PurePosixPath] = field(default_factory=list)  # other regular files
    links: list[PurePosixPath] = field(default_factory=list)  # symbolic links: never followed
    top: list[str] = field(default_factory=list)  # the folder's own entries, folders ending in "/"
    truncated: bool = False


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in _JUNK_FOLDERS


def _scan(folder: Path) -> _Folder:
    found = _Folder()
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return found
    found.top = [shown(e.name) + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries
                 if not _skipped(e.name)]
    seen = 0
    for here, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not _skipped(d))
        relative = PurePosixPath(Path(here).relative_to(folder).as_posix())
        if len(relative.parts) >= _MAX_DEPTH:
            dirs[:] = []
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(here, d))]:
            if _skipped(name):
                continue
            seen += 1
            if seen > _MAX_FILES:
                found.truncated = True
                return found
            path = relative / name
            full = Path(here) / name
            if full.is_symlink():
                found.links.append(path)
            elif name.lower().endswith(".ipynb"):
                found.notebooks.append(path)
            else:
                found.others.append(path)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(here, d))]
    return found


@functools.cache
def _master_grade_ids(nb: CourseNotebook) -> frozenset[str]:
    return _grade_ids(nb.solution_path)


def _grade_ids(path: Path) -> frozenset[str]:
    """The nbgrader grade ids a notebook file holds (none when it cannot be read as a notebook)."""
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            return frozenset()
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        return frozenset(str(c["metadata"]["nbgrader"]["grade_id"]) for c in cells
                         if isinstance(c, dict) and isinstance(c.get("metadata", {}).get("nbgrader"), dict)
                         and "grade_id" in c["metadata"]["nbgrader"])
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return frozenset()


def _listing(names: list[str], limit: int = 8) -> str:
    shown_names = ", ".join(names[:limit])
    return shown_names + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _assignments_in_batch(root_folders: dict[str, _Folder], expected: list[CourseNotebook]) -> set[str]:
    """The assignments this batch grades: those any student has a folder for; all of them if none has."""
    course = {nb.assignment for nb in expected}
    present = {entry.rstrip("/") for folder in root_folders.values() for entry in folder.top
               if entry.endswith("/")} & course
    return present or course


def find_submissions(root: Path, assignments: Collection[str] = (), not_due: Collection[str] = (),
                     ) -> tuple[list[Submission], list[str]]:
    """One Submission per student folder and expected notebook, whatever the folder holds.

    Every folder under ``root`` (hidden ones aside) is a student, whatever its name; each gets a
    Submission for every notebook of the assignments this batch grades: ``assignments`` when given, else
    those any student has a folder for. A notebook of a ``not_due`` assignment that is not there is not
    expected yet: no Submission, rather than a missing one. A notebook not at ``<assignment>/<notebook>.ipynb``
    is still graded when the match is unambiguous: a notebook of that name elsewhere in the folder, one whose
    name starts with it (``day7_fast_matmul-Copy1.ipynb``), or the only notebook in the assignment's folder (or in
    the student's folder, when it has no assignment folder); ``found`` says which file was graded and why.
    Otherwise the Submission is missing (or ambiguous, when several notebooks could be it) and
    ``found`` names what the folder holds instead.

    Returns (submissions, problems): ``problems`` are notes for the TA's console (files at the top
    level, files no submission used), never the only trace of a student.
    """
    problems: list[str] = []
    try:
        entries = sorted(root.iterdir())
    except OSError as error:
        return [], [f"{root}: cannot be read ({error})"]
    student_dirs = [p for p in entries if not p.name.startswith(".") and p.name != "__MACOSX" and p.is_dir()]
    for path in entries:
        if path.name.startswith(".") or path.name == "__MACOSX":
            if path.is_dir() and path.name not in (".git", ".ipynb_checkpoints"):
                problems.append(f"{shown(str(path))}: a hidden (or macOS zip) folder, not a student's; ignored")
        elif not path.is_dir() and path.name not in CLASS_FILES:
            problems.append(f"{shown(str(path))}: a file at the top level, not a student's folder; ignored")
    folders = {p.name: _scan(p) for p in student_dirs}
    notebooks = course_notebooks()
    batch = set(assignments) or _assignments_in_batch(folders, notebooks)
    expected = [nb for nb in notebooks if nb.assignment in batch]
    ids: dict[str, str] = {}
    for student_dir in student_dirs:
        student_id, serial = safe_id(student_dir.name), 1
        while student_id in ids.values():  # only a contrived pair of names gets here
            serial += 1
            student_id = f"{safe_id(student_dir.name)}-{serial}"
        ids[student_dir.name] = student_id
    found: list[Submission] = []
    for student_dir in student_dirs:
        subs, notes = _match_student(student_dir, folders[student_dir.name], expected, ids[student_dir.name],
                                     set(not_due))
        found += subs
        problems += notes
    return found, problems


def _match_student(student_dir: Path, folder: _Folder, expected: list[CourseNotebook],
                   student_id: str, not_due: set[str]) -> tuple[list[Submission], list[str]]:
    student = shown(student_dir.name)
    course_assignments = {nb.assignment for nb in course_notebooks()}
    folders_here = {entry.rstrip("/") for entry in folder.top if entry.endswith("/")}
    chosen: dict[str, Submission] = {}
    claimed: set[PurePosixPath] = set()
    ambiguous: dict[str, list[PurePosixPath]] = {}

    def take(nb: CourseNotebook, path: PurePosixPath, why: str = "") -> None:
        claimed.add(path)
        found = (f"graded {path}: no {nb.assignment}/{nb.name}.ipynb was submitted, and this is {why} "
                 f"(name it {nb.assignment}/{nb.name}.ipynb next time)") if why else ""
        try:
            size = (student_dir / path).stat().st_size
        except OSError:
            size = 0
        if size > MAX_NOTEBOOK_BYTES:
            problem = (f"{path} is {size / 2**20:.0f} MiB, more than the {MAX_NOTEBOOK_BYTES / 2**20:.0f} MiB a "
                       "notebook may be: clear its outputs and submit it again")
            chosen[nb.key] = Submission(student, nb.assignment, nb.name, None, student_id, results.CORRUPT,
                                        f"{found}; {problem}" if found else problem, str(path))
            return
        chosen[nb.key] = Submission(student, nb.assignment, nb.name, student_dir / path, student_id, "", found,
                                    str(path))

    def pool(nb: CourseNotebook) -> list[PurePosixPath]:
        """Unclaimed notebooks that may be ``nb``: none inside another assignment's folder."""
        others = course_assignments - {nb.assignment}
        return [p for p in folder.notebooks if p not in claimed and not (len(p.parts) > 1 and p.parts[0] in others)]

    def in_own_folder(nb: CourseNotebook, paths: list[PurePosixPath]) -> list[PurePosixPath]:
        return [p for p in paths if len(p.parts) == 2 and p.parts[0] == nb.assignment]

    for nb in expected:  # where it belongs
        path = PurePosixPath(nb.assignment, f"{nb.name}.ipynb")
        if path in folder.notebooks:
            take(nb, path)
        elif path in folder.links:
            chosen[nb.key] = Submission(student, nb.assignment, nb.name, None, student_id, results.CORRUPT,
                                        f"{path} is a symbolic link, not a file (links are never followed): "
                                        "submit the notebook itself", str(path))

    def unmatched() -> list[CourseNotebook]:
        return [nb for nb in expected if nb.key not in chosen and nb.key not in ambiguous]

    @functools.cache
    def owner(path: PurePosixPath) -> CourseNotebook | None:
        """The course notebook whose graded cells a file shares most (None if none, or a tie)."""
        ids = _grade_ids(student_dir / path)
        overlap = sorted(((len(ids & _master_grade_ids(nb)), nb.key, nb) for nb in expected), reverse=True)
        if not overlap or overlap[0][0] == 0 or (len(overlap) > 1 and overlap[1][0] == overlap[0][0]):
            return None
        return overlap[0][2]

    rules = (("the only notebook of that name in the folder", lambda nb, p: p.stem.lower() == nb.name.lower()),
             ("the only notebook whose name starts with {name}",
              lambda nb, p: p.stem.lower().startswith(nb.name.lower())),
             ("the only notebook whose graded cells are {name}'s", lambda nb, p: owner(p) == nb),
             ("the only notebook whose name is the start of {name}",
              lambda nb, p: len(p.stem) >= 4 and nb.name.lower().startswith(p.stem.lower())))
    for why, matches in rules:  # renamed copies (day7_fast_matmul-Copy1) and misplaced ones (Week1/, no folder)
        for nb in unmatched():
            candidates = [p for p in pool(nb) if matches(nb, p)]
            candidates = in_own_folder(nb, candidates) or candidates
            # A file that this rule would also give to another notebook is no one's by this rule.
            candidates = [p for p in candidates if not any(matches(other, p) for other in unmatched() if other != nb)]
            if len(candidates) == 1:
                take(nb, candidates[0], why.format(name=nb.name))
            elif candidates:
                ambiguous[nb.key] = candidates
    for nb in unmatched():  # the only notebook there is
        own = in_own_folder(nb, pool(nb))
        if nb.assignment in folders_here and own:
            candidates, where = own, f"{nb.assignment}/"
            rivals = [other for other in unmatched() if other.assignment == nb.assignment]
        else:
            candidates, where, rivals = pool(nb), "the student's folder", unmatched()
        if len(candidates) == 1 and len(rivals) == 1:
            take(nb, candidates[0], f"the only notebook in {where}")
        elif candidates:
            ambiguous[nb.key] = candidates

    more = f" (only the first {_MAX_FILES} files of the folder were looked at)" if folder.truncated else ""
    found: list[Submission] = []
    for nb in expected:
        if nb.key in chosen:
            found.append(chosen[nb.key])
            continue
        expected_file = f"{nb.assignment}/{nb.name}.ipynb"
        if nb.key in ambiguous:
            names = [str(p) for p in ambiguous[nb.key]]
            message = (f"no {expected_file} was submitted, and {len(names)} notebooks could be it: "
                       f"{_listing(names)}; none was graded (keep the one to grade, named {expected_file}){more}")
            found.append(Submission(student, nb.assignment, nb.name, None, student_id, results.AMBIGUOUS, message))
            continue
        if nb.assignment not in folders_here:
            holds = (f"the student's folder holds {_listing(folder.top)}" if folder.top
                     else "the student's folder is empty")
            message = f"no {nb.assignment}/ folder was submitted: {holds}{more}"
        else:
            inside = sorted([str(p) for p in folder.notebooks + folder.others if p.parts[0] == nb.assignment]
                            + [f"{p} (a link: not followed)" for p in folder.links if p.parts[0] == nb.assignment])
            holds = f"{nb.assignment}/ holds {_listing(inside)}" if inside else f"{nb.assignment}/ is empty"
            message = f"no {expected_file} was submitted: {holds}{more}"
        if nb.assignment not in not_due:
            found.append(Submission(student, nb.assignment, nb.name, None, student_id, results.MISSING, message))

    notes = [f"{student}/{s.expected_file}: " + (f"{s.status}: {s.found}" if s.status else s.found)
             for s in found if s.found]
    used = {s.submitted_file for s in found} | {str(p) for paths in ambiguous.values() for p in paths}
    unused = sorted(str(p) for p in folder.notebooks + folder.links + folder.others
                    if str(p) not in used and not (len(p.parts) == 2 and p.name == TIMESTAMP_FILE))  # lms/term.py
    if unused:
        notes.append(f"{student}: {_plural(len(unused), 'file')} not part of any graded notebook, ignored: "
                     f"{_listing(unused)}")
    return found, notes
