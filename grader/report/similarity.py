"""Similar submissions: per course notebook, the pairs of students whose code is unusually alike, for a TA to read.

The comparison is copydetect's (winnowed k-gram fingerprints, as MOSS): its tokenizer replaces every name with
one letter, so renamed variables and functions still match, and drops comments and whitespace. What is compared
is what each student wrote for the notebook, read from the sanitized notebook the grader stored
(``OUT/runs/<student>/<assignment>/<notebook>/sanitized.ipynb``): the answer (nbgrader ``solution``) cells,
which the sanitizer found by the master's metadata even where a student broke it, and the cells the student
added; the course's own cells there are the master's, so a student's edits to them never count. The quiz
answers are not compared (a right number is the same for everybody). Every line of the released notebook (the
stubs of the answer cells, the course's imports and helpers) is copydetect boilerplate: sharing it is not
sharing. C and CUDA sources kept in Python string constants (``SGEMM_V1 = r\"\"\"...\"\"\"``) are compared as C
code, since Python's tokenizer would see each one as a single string.

A pair is listed when the larger of its two shares (the part of a student's code found in the other's) reaches
``THRESHOLD`` and at least ``MIN_SHARED`` characters of tokens are shared. The page is a list to read, never a
verdict: two students who both followed the course's hints closely can share much.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import re
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib.metadata import version
from pathlib import Path
from urllib.parse import quote

import jinja2
import nbformat
import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import highlight_overlap
from markupsafe import Markup
from nbformat import NotebookNode

from course.answers import QUIZZES
from grader.intake.layout import find_course_notebook
from grader.score import results
from grader.score.results import NotebookResult

PAGE = "similarity.html"
NOISE = 25  # copydetect's noise threshold: the k-gram length, in characters of tokenized code (its default)
GUARANTEE = 25  # a match this long is always found (copydetect's default: every k-gram is a fingerprint)
THRESHOLD = 0.5  # the larger share of a pair that lists it
MAX_CHARS = 200_000  # of one student's code for one notebook (a course answer is a few thousand)
SHOWN = 60  # pairs of a notebook whose code the page shows side by side (its table lists them all)
MIN_SHARED = 60  # characters of tokenized code shared, at least (about two lines): tiny answers match by chance
# Statuses without a sanitized notebook: nothing of the student's to compare.
_NOT_READ = (results.MISSING, results.CORRUPT, results.AMBIGUOUS)
# A string constant of at least this many lines holds source code (CUDA C), compared as C.
_SOURCE_LINES = 3
_TRIPLE = re.compile(r"[rRbBuUfF]{0,2}(\"\"\"|''')(.*?)\1", re.S)
_FENCED = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)```", re.S)

_templates = jinja2.Environment(loader=jinja2.PackageLoader("grader", "templates"),
                                autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined)


@dataclass
class Code:
    """What one student wrote for one notebook, as one text: each cell under a comment naming it."""

    student: str
    href: str  # the student's feedback page, relative to OUT
    source: str
    cells: list[str] = field(default_factory=list)  # "answer cell <grade id>" or "own cell <n>"


@dataclass
class Pair:
    a: Code
    b: Code
    share_a: float  # the part of a's code (tokens, boilerplate left out) found in b's
    share_b: float
    shared: int  # characters of tokenized code a shares with b
    marked_a: Markup  # a's code, HTML-escaped, the shared parts in <mark>
    marked_b: Markup

    @property
    def score(self) -> float:
        return max(self.share_a, self.share_b)


@dataclass
class NotebookSimilarity:
    key: str
    students: int  # students whose code was compared
    without_code: list[str]  # submitted, but nothing of their own beyond the stubs (or no notebook stored)
    pairs_compared: int
    median: float | None  # the median pair's score: what "alike" means in this notebook
    pairs: list[Pair]  # listed, most alike first
    error: str = ""  # why the notebook could not be compared (the other notebooks still are)

    @property
    def anchor(self) -> str:
        return "similar-" + self.key.replace("/", "-")


# ---------------------------------------------------------------------------------------------------------
# What counts: the student's cells of a sanitized notebook, without the course's.

def _nbgrader(cell: NotebookNode) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


@cache
def _released(assignment: str, notebook: str) -> NotebookNode | None:
    course = find_course_notebook(assignment, notebook)
    if course is None or not course.student_path.is_file():
        return None
    return nbformat.read(str(course.student_path), as_version=4)


def quiz_cells(released: NotebookNode | None, key: str) -> set[str]:
    """Grade ids of the answer cells that hold quiz answers (``name = ...`` for a quiz of the notebook)."""
    names = {answer.name for answer in QUIZZES.get(key, ())}
    if released is None or not names:
        return set()
    assigns = re.compile(r"^\s*(" + "|".join(map(re.escape, sorted(names))) + r")\s*=", re.M)
    return {_nbgrader(c).get("grade_id", "") for c in released.cells
            if c.cell_type == "code" and _nbgrader(c).get("solution") and assigns.search(c.source)}


def boilerplate(released: NotebookNode | None) -> str:
    """Everything the course gave the students: the released notebook's code cells and the code in its text."""
    if released is None:
        return ""
    parts = [c.source for c in released.cells if c.cell_type == "code"]
    parts += [block for c in released.cells if c.cell_type == "markdown" for block in _FENCED.findall(c.source)]
    return "\n\n".join(parts)


def student_code(nb: NotebookNode, released: NotebookNode | None, skip: set[str]) -> tuple[str, list[str]]:
    """The student's answer cells (not those in ``skip``) and their own code cells, each under a comment naming it.
    A cell the course gave unchanged is not theirs."""
    given = {c.source.strip() for c in released.cells} if released is not None else set()
    parts, names, own = [], [], 0
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        meta = _nbgrader(cell)
        grade_id = meta.get("grade_id")
        if grade_id and meta.get("solution") and grade_id not in skip:
            name = f"answer cell {grade_id}"
        elif not grade_id and cell.source.strip() not in given:
            own += 1
            name = f"own cell {own}"
        else:
            continue
        names.append(name)
        parts.append(f"# ── {name} ──\n{cell.source.rstrip()}\n")
    return "\n".join(parts), names


def _from_result(result: NotebookResult, skip: set[str]) -> tuple[str, list[str]]:
    """The answer cells kept in the result, when its sanitized notebook is gone."""
    parts, names = [], []
    for cell in result.code:
        grade_id, source = str(cell.get("id", "")), str(cell.get("source", ""))
        if grade_id in skip or not source.strip():
            continue
        names.append(f"answer cell {grade_id}")
        parts.append(f"# ── answer cell {grade_id} ──\n{source.rstrip()}\n")
    return "\n".join(parts), names


def sanitized_path(out: Path, result: NotebookResult) -> Path:
    """Where the grader stores the notebook it ran (grader.pipeline.run_dir)."""
    student_id = getattr(result, "student_id", "") or result.student
    return out / "runs" / student_id / result.assignment / result.notebook / "sanitized.ipynb"


# ---------------------------------------------------------------------------------------------------------
# Fingerprints and pairs (copydetect).

def _strings(source: str) -> list[tuple[int, int]]:
    """Where the string constants of several lines (C and CUDA sources) lie in ``source``: their contents' spans."""
    return [(m.start(2), m.end(2)) for m in _TRIPLE.finditer(source) if m.group(2).count("\n") >= _SOURCE_LINES]


@dataclass
class _Prints:
    code: Code
    python: CodeFingerprint
    c: CodeFingerprint | None
    spans: list[tuple[int, int]]  # the C sources' spans in code.source, in the order of the C text

    @property
    def coverage(self) -> float:
        return float(self.python.token_coverage + (self.c.token_coverage if self.c else 0))


def _hashes(text: str, language: str) -> np.ndarray:
    if not text.strip():
        return np.array([], dtype=np.int64)
    prints = CodeFingerprint(f"boilerplate.{language}", NOISE, 1, fp=io.StringIO(text), language=language)
    return np.unique(np.array(sorted(prints.hashes), dtype=np.int64))


def _prints(code: Code, python_boilerplate: np.ndarray, c_boilerplate: np.ndarray) -> _Prints:
    window = GUARANTEE - NOISE + 1
    python = CodeFingerprint("answer.py", NOISE, window, boilerplate=python_boilerplate,
                             fp=io.StringIO(code.source), language="python")
    spans = _strings(code.source)
    c = None
    if spans:
        c_text = "\n".join(code.source[start:end] for start, end in spans)
        c = CodeFingerprint("answer.cu", NOISE, window, boilerplate=c_boilerplate, fp=io.StringIO(c_text),
                            language="cuda")
    return _Prints(code, python, c, spans)


def _intervals(slices: np.ndarray) -> list[tuple[int, int]]:
    if slices.size == 0:
        return []
    return [(int(s), int(e)) for s, e in zip(slices[0], slices[1], strict=True) if e > s]


def _outside(intervals: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``intervals`` less ``holes``: a Python match that spans a C source does not mark the C source."""
    kept = []
    for start, end in intervals:
        for hole_start, hole_end in holes:
            if hole_start < end and start < hole_end:
                if start < hole_start:
                    kept.append((start, hole_start))
                start = max(start, hole_end)
        if start < end:
            kept.append((start, end))
    return kept


def _c_to_source(intervals: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Intervals of the C text (the spans joined by newlines) as intervals of the student's source."""
    placed, offset = [], 0
    for start, end in spans:
        length = end - start
        for lo, hi in intervals:
            lo, hi = max(lo, offset), min(hi, offset + length)
            if lo < hi:
                placed.append((start + lo - offset, start + hi - offset))
        offset += length + 1
    return placed


def _merged_list(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def _merged(intervals: list[tuple[int, int]]) -> np.ndarray:
    merged = _merged_list(intervals)
    return np.array([[m[0] for m in merged], [m[1] for m in merged]], dtype=np.int64).reshape(2, len(merged))


def _course_lines(source: str, given: set[str]) -> list[tuple[int, int]]:
    """The spans of the lines of ``source`` that the course gave (a stub's signature, a docstring) or that name a
    cell: never marked, since sharing them is not sharing."""
    spans, offset = [], 0
    for line in source.splitlines(keepends=True):
        text = line.strip()
        if text and (text in given or text.startswith("# ── ")):
            spans.append((offset, offset + len(line)))
        offset += len(line)
    return spans


def _marked(source: str, intervals: list[tuple[int, int]], given: set[str]) -> Markup:
    slices = _merged(_outside(_merged_list(intervals), _course_lines(source, given)))
    if slices.shape[1] == 0:
        return Markup.escape(source)
    text, _ = highlight_overlap(source, slices, "<mark>", "</mark>", escape_html=True)
    return Markup(text)  # noqa: S704 -- highlight_overlap escaped the code; only the marks are HTML


def compare(first: _Prints, second: _Prints) -> tuple[float, float, int, list, list]:
    """The shares of each student's code found in the other's, the characters shared, and where (intervals)."""
    overlap, (share_1, share_2), (slices_1, slices_2) = compare_files(first.python, second.python)
    shared_1 = float(share_1) * first.python.token_coverage
    shared_2 = float(share_2) * second.python.token_coverage
    where_1 = _outside(_intervals(slices_1), first.spans)
    where_2 = _outside(_intervals(slices_2), second.spans)
    if first.c is not None and second.c is not None:
        c_overlap, (c_1, c_2), (c_slices_1, c_slices_2) = compare_files(first.c, second.c)
        overlap += c_overlap
        shared_1 += float(c_1) * first.c.token_coverage
        shared_2 += float(c_2) * second.c.token_coverage
        where_1 += _c_to_source(_intervals(c_slices_1), first.spans)
        where_2 += _c_to_source(_intervals(c_slices_2), second.spans)
    share_a = shared_1 / first.coverage if first.coverage else 0.0
    share_b = shared_2 / second.coverage if second.coverage else 0.0
    return share_a, share_b, int(overlap), where_1, where_2


def similar_pairs(codes: list[Code], released: NotebookNode | None, threshold: float = THRESHOLD,
                  min_shared: int = MIN_SHARED) -> tuple[list[Pair], list[str], int, float | None]:
    """The pairs of ``codes`` that are unusually alike, most alike first; also the students with nothing of their
    own, the number of pairs compared and the median pair's score."""
    course = boilerplate(released)
    python_boilerplate = _hashes(course, "python")
    c_boilerplate = _hashes("\n".join(course[s:e] for s, e in _strings(course)), "cuda")
    given = {line.strip() for line in course.splitlines() if line.strip()}
    prints, empty = [], []
    for code in codes:
        found = _prints(code, python_boilerplate, c_boilerplate)
        (prints if found.coverage else empty).append(found)
    pairs, scores = [], []
    for first, second in itertools.combinations(prints, 2):
        share_a, share_b, shared, where_a, where_b = compare(first, second)
        share_a, share_b = float(share_a), float(share_b)
        scores.append(max(share_a, share_b))
        if max(share_a, share_b) >= threshold and shared >= min_shared:
            pairs.append(Pair(first.code, second.code, share_a, share_b, shared,
                              _marked(first.code.source, where_a, given), _marked(second.code.source, where_b, given)))
    pairs.sort(key=lambda p: (-p.score, -p.shared, p.a.student, p.b.student))
    return pairs, [p.code.student for p in empty], len(scores), statistics.median(scores) if scores else None


# ---------------------------------------------------------------------------------------------------------
# The class.

def _label(result: NotebookResult) -> str:
    student_id = getattr(result, "student_id", "") or result.student
    return result.student if student_id == result.student else f"{result.student} ({student_id})"


def _feedback_href(out: Path, result: NotebookResult) -> str:
    from grader.report.pages import page_path

    return quote(Path(os.path.relpath(page_path(out, result), out)).as_posix())


def build(out: Path, all_results: list[NotebookResult], threshold: float = THRESHOLD,
          min_shared: int = MIN_SHARED) -> list[NotebookSimilarity]:
    """Each notebook's similar pairs, from the sanitized notebooks under ``out`` of the submitted results."""
    by_notebook: dict[tuple[str, str], list[NotebookResult]] = defaultdict(list)
    for result in all_results:
        if result.status not in _NOT_READ:
            by_notebook[result.assignment, result.notebook].append(result)
    found = []
    for (assignment, notebook), mine in sorted(by_notebook.items()):
        key = f"{assignment}/{notebook}"
        released = _released(assignment, notebook)
        skip = quiz_cells(released, key)
        codes, unread = [], []
        for result in sorted(mine, key=lambda r: _label(r).casefold()):
            path = sanitized_path(out, result)
            try:
                source, cells = student_code(nbformat.read(str(path), as_version=4), released, skip)
            except (OSError, ValueError):  # gone (or unreadable): the answer cells the result kept
                source, cells = _from_result(result, skip)
            if not source.strip():
                unread.append(_label(result))
                continue
            if len(source) > MAX_CHARS:  # a notebook of generated code: its start is compared
                source, cells = source[:MAX_CHARS], [*cells, f"only its first {MAX_CHARS:,} characters compared"]
            codes.append(Code(_label(result), _feedback_href(out, result), source, cells))
        digest = _digest(key, released, codes, threshold, min_shared)
        view = _cached(out, key, digest)
        if view is None:
            try:
                pairs, empty, compared, median = similar_pairs(codes, released, threshold, min_shared)
            except Exception as error:  # odd code must not cost the class its pages: said on the page instead
                found.append(NotebookSimilarity(key, 0, sorted(unread, key=str.casefold), 0, None, [],
                                                f"not compared: {type(error).__name__}: {error}"[:300]))
                continue
            view = NotebookSimilarity(key, len(codes) - len(empty), sorted(unread + empty, key=str.casefold),
                                      compared, median, pairs)
            _store(out, key, digest, view)
        found.append(view)
    return found


# A class of 300 compares 44,850 pairs per notebook (about 15 s on one core): a notebook whose code did not change
# since the last page is read back from OUT, so a batch that regrades a few students redoes only their notebooks.
CACHE = ".similarity-cache"


def _digest(key: str, released: NotebookNode | None, codes: list[Code], threshold: float, min_shared: int) -> str:
    stamp = {"key": key, "course": boilerplate(released), "threshold": threshold, "min_shared": min_shared,
             "noise": NOISE, "guarantee": GUARANTEE, "copydetect": version("copydetect"), "format": 1,
             "codes": [asdict(code) for code in codes]}
    return hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()


def _cache_path(out: Path, key: str) -> Path:
    return out / CACHE / (key.replace("/", "-") + ".json")


def _cached(out: Path, key: str, digest: str) -> NotebookSimilarity | None:
    try:
        data = json.loads(_cache_path(out, key).read_text(encoding="utf-8"))
        if data.get("digest") != digest:
            return None
        view = data["view"]
        pairs = [Pair(Code(**p["a"]), Code(**p["b"]), p["share_a"], p["share_b"], p["shared"],
                      Markup(p["marked_a"]), Markup(p["marked_b"])) for p in view.pop("pairs")]  # noqa: S704
        return NotebookSimilarity(**view, pairs=pairs)
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or written by another version: compare again
        return None


def _store(out: Path, key: str, digest: str, view: NotebookSimilarity) -> None:
    data = {"digest": digest, "view": asdict(view)}
    results.write_json_atomic(_cache_path(out, key), data)


def render(notebooks: list[NotebookSimilarity], threshold: float = THRESHOLD, min_shared: int = MIN_SHARED) -> str:
    return _templates.get_template("similarity.html").render(
        notebooks=notebooks, threshold=threshold, min_shared=min_shared, noise=NOISE, shown=SHOWN,
        listed=sum(len(n.pairs) for n in notebooks))


def write_similarity_page(out: Path, results: list[NotebookResult]) -> Path:
    """Write ``OUT/similarity.html``, the pairs of similar submissions of each notebook; returns its path."""
    page = out / PAGE
    page.write_text(render(build(out, results)), encoding="utf-8")
    return page
