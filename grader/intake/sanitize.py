"""Sanitize a submission: rebuild the notebook that is executed from the course's master copy.

The master copy is the solution notebook as nbgrader stores it in the gradebook (stubs in the answer
cells, hidden tests kept). Every nbgrader cell of the master comes back in master order with the
master's metadata and cell type, so nbgrader's later steps see exactly the master's grade cells, ids
and points. The student's work survives only as the source of the master's answer (solution) cells
and as ordinary cells they added, which keep their place after the master cell that preceded them.
Every change the grader undoes becomes a note for the feedback page. A file that is not a readable
notebook becomes a status, not an exception.

Student cells are matched to master cells by grade id; locked cells that lost it, by their released
source; answer cells that lost it, by position between matched neighbours.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode
from nbgrader.preprocessors import ClearOutput

from grader.authoring.release import HIDDEN_BEGIN, HIDDEN_END, NBFORMAT_VERSION, master_version, student_version
from grader.intake.layout import find_course_notebook
from grader.score import results

_FLAGS = ("grade", "solution", "locked", "points")
# papermill injects the grader's parameters after the first cell with this tag: only the master's may have it.
_RESERVED_TAGS = ("parameters", "injected-parameters")
_CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")


@dataclass
class Sanitized:
    status: str
    message: str = ""
    notebook: NotebookNode | None = None
    notes: list[str] = field(default_factory=list)


def read_submission(path: Path) -> tuple[NotebookNode | None, str]:
    """The notebook, or None and why it could not be read."""
    try:
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            return None, "not a readable Jupyter notebook (the file is empty)"
        raw = json.loads(text)
        version = raw.get("nbformat") if isinstance(raw, dict) else None
        if version != NBFORMAT_VERSION:
            found = f"format {version}" if isinstance(version, int) else "no notebook format"
            return None, (f"not a readable Jupyter notebook ({found}; expected format {NBFORMAT_VERSION}: "
                          "open it in a current Jupyter and save it again)")
        nb = nbformat.reads(text, as_version=NBFORMAT_VERSION)
        nbformat.validate(nb)
    except Exception as error:  # JSON, schema and encoding errors all mean "not a notebook"
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return None, f"not a readable Jupyter notebook ({type(error).__name__}: {first_line[:200]})"
    return nb, ""


def _nbgrader(cell: NotebookNode) -> dict[str, Any]:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _grade_id(cell: NotebookNode) -> str | None:
    grade_id = _nbgrader(cell).get("grade_id")
    return grade_id if isinstance(grade_id, str) and grade_id else None


def _same(key: str, old: Any, new: Any) -> bool:
    if key == "points":
        try:
            return float(old) == float(new)
        except (TypeError, ValueError):
            return False
    return new is bool(old) or (new is None and not old)  # nbgrader reads a missing flag as False


@cache
def _course(assignment: str, notebook: str) -> tuple[NotebookNode, NotebookNode] | None:
    """The master notebook and the released (student) one."""
    course_notebook = find_course_notebook(assignment, notebook)
    if course_notebook is None:
        return None
    return master_version(course_notebook), student_version(course_notebook)


def _in_order(matched: list[tuple[int, int]]) -> set[int]:
    """Of (master index, student position) pairs in master order, the master indices of the longest run
    whose student positions increase: the others were moved."""
    runs: list[list[int]] = []
    for k, (_, position) in enumerate(matched):
        before = [runs[j] for j in range(k) if matched[j][1] < position]
        runs.append([*max(before, key=len, default=[]), k])
    return {matched[k][0] for k in max(runs, key=len, default=[])}


def _ordinary(cell: NotebookNode, notes: list[str]) -> NotebookNode:
    """A student cell as an ordinary cell: no nbgrader metadata, no papermill parameters tag."""
    cell = copy.deepcopy(cell)
    cell.metadata.pop("nbgrader", None)
    tags = cell.metadata.get("tags")
    if isinstance(tags, list) and any(tag in _RESERVED_TAGS for tag in tags):
        cell.metadata.tags = [tag for tag in tags if tag not in _RESERVED_TAGS]
        notes.append("a cell you added was tagged 'parameters'; the tag was removed so the grader's settings apply")
    return cell


def _extra_note(cell: NotebookNode, master_ids: set[str]) -> str | None:
    meta, grade_id = _nbgrader(cell), _grade_id(cell)
    if grade_id in master_ids:
        return (f"a second cell claims to be {grade_id}; only the course's {grade_id} is graded, "
                "the copy runs as an ordinary cell")
    if grade_id and meta.get("grade"):
        return (f"cell '{grade_id}' claimed {meta.get('points', 0)} points; extra grade cells are not graded "
                "(it runs as an ordinary cell)")
    if grade_id:
        return f"cell '{grade_id}' is not a grader cell of this notebook; its grader metadata was removed"
    if any(meta.get(flag) for flag in ("grade", "solution", "locked")):
        return "a cell carried grader flags without a grade id; they were removed"
    return None


def rebuild(nb: NotebookNode, master: NotebookNode, release: NotebookNode) -> tuple[NotebookNode, list[str]]:
    """The notebook to execute: the master's nbgrader cells with the student's answers, plus their own cells.

    ``release`` is the notebook the student received; its notebook metadata (the master's plus the
    course's notes for students) replaces whatever the submission carries.
    """
    out = copy.deepcopy(master)
    out.metadata = copy.deepcopy(release.metadata)
    kernel_notes = []
    theirs = nb.get("metadata", {}).get("kernelspec", {})
    ours = release.metadata.get("kernelspec", {})
    if isinstance(theirs, dict) and theirs.get("name") not in (None, ours.get("name")):
        kernel_notes.append(f"the notebook asked for the kernel {str(theirs.get('name'))[:60]!r}; the grader ran it "
                            f"with the course's kernel {ours.get('name')!r}")
    if not nb.cells:
        return out, [*kernel_notes, "the notebook had no cells; it was rebuilt from the course notebook, so every "
                     "answer is the stub and scores 0"]
    mine = nb.cells
    released = {_grade_id(c): c for c in release.cells if _grade_id(c)}
    masters = [c for c in master.cells if _grade_id(c)]
    master_ids = {_grade_id(c) for c in masters}
    solution = [bool(_nbgrader(c).get("solution")) for c in masters]

    def released_source(k: int) -> str:
        return released.get(_grade_id(masters[k]), masters[k]).source

    match: dict[int, int] = {}  # master index -> student position
    how: dict[int, str] = {}
    for k, cell in enumerate(masters):
        same_id = [i for i, c in enumerate(mine) if _grade_id(c) == _grade_id(cell)]
        # Of several locked cells with one id, the unedited one is the real one.
        unedited = [i for i in same_id if not solution[k] and mine[i].source == released_source(k)]
        if same_id:
            match[k], how[k] = (unedited or same_id)[0], "id"
    for k, cell in enumerate(masters):
        if k in match or solution[k]:
            continue
        sources = {released_source(k), cell.source} - {""}
        claimed = set(match.values())
        found = [i for i, c in enumerate(mine) if i not in claimed and c.source in sources]
        after = max((match[j] for j in range(k) if j in match), default=-1)
        if found:
            match[k], how[k] = next((i for i in found if i > after), found[0]), "source"

    anchors = _in_order(sorted(match.items()))
    missing = [k for k in range(len(masters)) if solution[k] and k not in match]
    gaps: dict[tuple[int, int], list[int]] = {}
    for k in missing:
        lo = max((j for j in anchors if j < k), default=None)
        hi = min((j for j in anchors if j > k), default=None)
        span = (-1 if lo is None else match[lo], len(mine) if hi is None else match[hi])
        gaps.setdefault(span, []).append(k)
    ambiguous: dict[int, int] = {}
    for (lo, hi), ks in gaps.items():
        claimed = set(match.values())
        cands = [i for i in range(lo + 1, hi) if i not in claimed and mine[i].cell_type == masters[ks[0]].cell_type]
        if len(cands) == len(ks):
            pairs = list(zip(ks, cands, strict=True))
        else:  # several candidates: the cell id the student received can still tell which is which
            pairs = [(k, same[0]) for k in ks
                     if len(same := [i for i in cands if mine[i].get("id") == masters[k].get("id")]) == 1]
            ambiguous.update({k: len(cands) for k in ks if cands})
        for k, i in pairs:
            match[k], how[k] = i, "position"
            ambiguous.pop(k, None)
            anchors.add(k)

    notes: list[str] = []
    recognised: list[str] = []  # one note for them all: stripping every cell's metadata is one act
    for k, cell in enumerate(masters):
        grade_id = _grade_id(cell)
        if k not in match:
            if not solution[k]:
                notes.append(f"cell {grade_id} was missing (deleted, or its grader metadata removed); "
                             "the grader put the original back")
            elif k in ambiguous:
                notes.append(f"answer cell {grade_id} had lost its grader metadata and {ambiguous[k]} cells could "
                             "be it; the stub was put back, so it scores 0 (your cells run as ordinary cells)")
            else:
                notes.append(f"answer cell {grade_id} was missing; the stub was put back, so it scores 0")
            continue
        theirs = mine[match[k]]
        what = "your answer cell" if solution[k] else "cell"
        if how[k] == "id":
            for flag in _FLAGS:
                old, new = _nbgrader(cell).get(flag), _nbgrader(theirs).get(flag)
                if (flag == "points" and old is None) or _same(flag, old, new):
                    continue
                notes.append(f"points of {grade_id} were changed from {old} to {new}; restored" if flag == "points"
                             else f"the '{flag}' flag of {grade_id} was changed from {old} to {new}; restored")
        else:
            new_id = _grade_id(theirs)
            if how[k] == "source" and not new_id:
                recognised.append(grade_id)
            else:
                lost = f"had its grade id changed to '{new_id}'" if new_id else "had lost its grader metadata"
                found = ("it was matched by position and graded" if how[k] == "position"
                         else "the grader recognised it by its code and restored it")
                notes.append(f"{what} {grade_id} {lost}; {found}")
        if theirs.cell_type != cell.cell_type:
            notes.append(f"{what} {grade_id} was turned into {theirs.cell_type}; "
                         + (f"it was run as {cell.cell_type}" if solution[k] else "the grader restored it"))
        if not solution[k] and theirs.source != released_source(k) and theirs.source != cell.source:
            notes.append(f"cell {grade_id} was edited; the grader restored the original")
        if k not in anchors:
            notes.append(f"{what} {grade_id} was moved; it runs in its original place")

    if len(recognised) == 1:
        notes.append(f"cell {recognised[0]} had lost its grader metadata; the grader recognised it by its code "
                     "and restored it")
    elif recognised:
        notes.append(f"cells {', '.join(recognised)} had lost their grader metadata; the grader recognised them "
                     "by their code and restored them")
    owner = {i: k for k, i in match.items()}
    following: dict[int | None, list[NotebookNode]] = {}
    current: int | None = None
    for i, cell in enumerate(mine):
        if i in owner:
            current = owner[i]
            continue
        if (note := _extra_note(cell, master_ids)) is not None:
            notes.append(note)
        following.setdefault(current, []).append(_ordinary(cell, notes))

    cells = list(following.get(None, []))
    for k, cell in enumerate(masters):
        cell = copy.deepcopy(cell)
        if solution[k] and k in match:
            cell.source = mine[match[k]].source
        cells += [cell, *following.get(k, [])]
    out.cells = cells
    _unique_cell_ids(out)
    return out, [*kernel_notes, *notes]


def _unique_cell_ids(nb: NotebookNode) -> None:
    """Master cells keep their ids; a student cell whose id is missing, invalid or taken gets a fresh one."""
    taken = {c.get("id") for c in nb.cells if _grade_id(c)}
    serial = 0
    for cell in nb.cells:
        if _grade_id(cell):
            continue
        cell_id = cell.get("id")
        while not isinstance(cell_id, str) or not _CELL_ID.match(cell_id) or cell_id in taken:
            serial += 1
            cell_id = f"student-{serial}"
        cell.id = cell_id
        taken.add(cell_id)


def sanitize(path: Path, assignment: str, notebook: str, student: str, db_url: str) -> Sanitized:
    """The notebook to execute, rebuilt from the master copy, and what the grader undid.

    ``student`` and ``db_url`` are not needed: the master copy is rebuilt from solutions/, the same
    notebook the gradebook was registered from (``gradebook.register`` refuses any other).
    """
    nb, problem = read_submission(path)
    if nb is None:
        return Sanitized(results.CORRUPT, problem)
    course = _course(assignment, notebook)
    if course is None:
        return Sanitized(results.GRADER_ERROR, f"{assignment}/{notebook} is not a notebook of this course")
    try:
        rebuilt, notes = rebuild(nb, *course)
        rebuilt, _ = ClearOutput().preprocess(rebuilt, {})
        nbformat.validate(rebuilt)
    except Exception as error:  # metadata so odd that the rebuild fails must not stop the batch
        return Sanitized(results.CORRUPT, f"the grader could not rebuild it: {type(error).__name__}: {error}"[:500])
    return Sanitized(results.OK, notebook=rebuilt, notes=notes)


def for_the_sandbox(nb: NotebookNode) -> NotebookNode:
    """The sanitized notebook as a sandbox may see it: the hidden tests of the course's test cells cleared, as in the
    released notebook. They run only in the judge, on the exported data; in the run, a later cell could read them
    (IPython's ``In``, the notebook file itself) and a message could carry them out. Only the master's grade cells
    are cleared: a student's own cell that names the markers is the student's business."""
    seen = copy.deepcopy(nb)
    for cell in seen.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            kept, hiding = [], False
            for line in cell.source.splitlines(keepends=True):
                if HIDDEN_BEGIN in line:
                    hiding = True
                elif hiding and HIDDEN_END in line:
                    hiding = False
                elif not hiding:
                    kept.append(line)
            cell.source = "".join(kept)
    return seen
