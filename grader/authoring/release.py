"""Release: solution notebooks -> student notebooks, through nbgrader's own preprocessors.

``master_version`` is what nbgrader's generate_assignment stores in the gradebook (solutions
replaced by stubs, hidden tests still in, checksums recorded); ``student_version`` is what
students get (hidden tests removed, checksums recomputed). Both are deterministic, so a test can
regenerate the student notebooks and compare them with the committed ones.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
import textwrap
from pathlib import Path
from typing import Any

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    LockCells,
)
from nbgrader.utils import is_solution

from course import answers, grading_table
from grader.intake.layout import CourseNotebook, course_notebooks

NBFORMAT_VERSION = 4
HIDDEN_BEGIN = "BEGIN HIDDEN TESTS"  # matched as nbgrader's ClearHiddenTests matches it
HIDDEN_END = "END HIDDEN TESTS"
HIDDEN_DEFAULT_NOTE = "the grader checks the value of your answer"
# A solution region opened with this marker holds what only the reference uses (a second kernel for shapes the
# exercise does not ask students to treat apart, its source and module): the student's copy loses the whole region,
# with no stub.
REFERENCE_ONLY = "### BEGIN SOLUTION (reference only)"


class ReleaseError(ValueError):
    """A solution notebook that the release rules cannot turn into a student notebook."""


class ClearSolutionsAndAnswers(ClearSolutions):
    """nbgrader's ClearSolutions, except that a region assigning one quiz answer becomes that answer's stub line.

    nbgrader replaces a whole solution cell with its stub when no region is left in it, so the answer regions
    are rewritten here, in the same pass, rather than before it.
    """

    def preprocess_cell(self, cell: NotebookNode, resources: dict[str, Any], cell_index: int
                        ) -> tuple[NotebookNode, dict[str, Any]]:
        where = resources["nbgrader"]
        if cell.cell_type == "code" and is_solution(cell) and REFERENCE_ONLY in cell.source:
            cell.source = split_reference_only(cell.source, self.end_solution_delimeter)[0]
            if self.begin_solution_delimeter not in cell.source:  # nbgrader would stub the whole cell
                raise ReleaseError(f"a cell with a region after {REFERENCE_ONLY!r} needs a region the student writes")
        quiz = {answer.name for answer in answers.QUIZZES.get(f"{where['assignment']}/{where['notebook']}", ())}
        if quiz and cell.cell_type == "code" and is_solution(cell):
            stubbed, answered = self._stub_regions(cell.source, self.code_stub[resources["language"]], quiz)
            if answered:
                cell.source = stubbed
                return cell, resources
        return super().preprocess_cell(cell, resources, cell_index)

    def _stub_regions(self, source: str, code_stub: str, quiz: set[str]) -> tuple[str, bool]:
        """``source`` with every region stubbed, and whether one of them assigned an answer of ``quiz``."""
        lines, region, indent, answered = [], None, "", False
        for line in source.split("\n"):
            if self.begin_solution_delimeter in line:
                region, indent = [], re.match(r"\s*", line).group(0)
            elif self.end_solution_delimeter in line and region is not None:
                name = _answer_name("\n".join(region), quiz)
                answered |= name is not None
                stub = answers.stub_line(name) if name else code_stub
                lines += [indent + stub_line for stub_line in stub.split("\n")]
                region = None
            elif region is not None:
                region.append(line)
            else:
                lines.append(line)
        return "\n".join(lines), answered and region is None


def split_reference_only(source: str, end_marker: str) -> tuple[str, set[str]]:
    """``source`` without its reference-only regions, and the names those regions bound. Each region must stand at
    the top level and hold only function and class definitions and assignments to plain names."""
    kept: list[str] = []
    names: set[str] = set()
    region: list[str] | None = None
    for line in source.split("\n"):
        if line.strip() == REFERENCE_ONLY:
            if line != REFERENCE_ONLY or region is not None:
                raise ReleaseError(f"{REFERENCE_ONLY!r} must start a line of its own, outside any other region")
            region = []
        elif region is not None and end_marker in line:
            names |= _bound_names("\n".join(region))
            region = None
        elif region is not None:
            region.append(line)
        else:
            kept.append(line)
    if region is not None:
        raise ReleaseError(f"a region after {REFERENCE_ONLY!r} is never closed")
    return re.sub(r"\n{3,}", "\n\n\n", "\n".join(kept)).strip("\n"), names


def _bound_names(region: str) -> set[str]:
    try:
        body = ast.parse(region).body
    except SyntaxError as error:
        raise ReleaseError(f"a region after {REFERENCE_ONLY!r} is not valid Python: {error}") from None
    definitions = [node for node in body if isinstance(node, ast.FunctionDef | ast.ClassDef)]
    assignments = [node for node in body if isinstance(node, ast.Assign)
                   and all(isinstance(target, ast.Name) for target in node.targets)]
    if not body or len(definitions) + len(assignments) < len(body):
        raise ReleaseError(f"a region after {REFERENCE_ONLY!r} may hold only definitions and assignments to names")
    return {node.name for node in definitions} | {target.id for node in assignments for target in node.targets}


def check_reference_only_unused(solution: NotebookNode, master: NotebookNode, end_marker: str) -> None:
    """Refuse a master copy that still names what a reference-only region defined: the student's copy would break."""
    removed: set[str] = set()
    for cell in solution.cells:
        if cell.cell_type == "code" and REFERENCE_ONLY in cell.source:
            removed |= split_reference_only(cell.source, end_marker)[1]
    for cell in master.cells:
        used = {name for name in removed if cell.cell_type == "code" and re.search(rf"\b{name}\b", cell.source)}
        if used:
            raise ReleaseError(f"the student's copy would still use {sorted(used)}, defined only for the reference")


def _answer_name(region: str, quiz: set[str]) -> str | None:
    """The answer of ``quiz`` a solution region assigns (``name = <expression>``, nothing else), or None."""
    try:
        body = ast.parse(textwrap.dedent(region)).body
    except SyntaxError:
        return None
    if len(body) == 1 and isinstance(body[0], ast.Assign) and len(body[0].targets) == 1:
        target = body[0].targets[0]
        if isinstance(target, ast.Name) and target.id in quiz:
            return target.id
    return None


def _apply(preprocessors: list[Preprocessor], nb: NotebookNode, notebook: CourseNotebook) -> NotebookNode:
    resources = {"nbgrader": {"notebook": notebook.name, "assignment": notebook.assignment}}
    for preprocessor in preprocessors:
        nb, resources = preprocessor.preprocess(nb, resources)
    return nb


def read(path: Path) -> NotebookNode:
    return nbformat.read(str(path), as_version=NBFORMAT_VERSION)


def master_version(notebook: CourseNotebook) -> NotebookNode:
    """The instructor's master copy: stubs in the solution regions, hidden tests kept.

    A grader asks for each notebook's copy several times (the gradebook, the sanitizer, the tables): it is made
    once per version of the solution file and of the quiz answers whose stub lines it writes. nbgrader's metadata
    check runs on the student's copy, made from this.
    """
    stat = notebook.solution_path.stat()
    quiz = answers.QUIZZES.get(notebook.key, ())
    return copy.deepcopy(_master_copy(notebook, stat.st_mtime_ns, stat.st_size,
                                      tuple(answers.ANSWERS.get(answer.name) for answer in quiz)))


@functools.lru_cache(maxsize=64)
def _master_copy(notebook: CourseNotebook, mtime_ns: int, size: int, quiz: tuple[Any, ...]) -> NotebookNode:
    solution = read(notebook.solution_path)
    clear = ClearSolutionsAndAnswers()
    master = _apply([LockCells(), clear, ClearOutput(), ComputeChecksums()], copy.deepcopy(solution), notebook)
    check_reference_only_unused(solution, master, clear.end_solution_delimeter)
    return master


def hidden_test_notes(nb: NotebookNode) -> dict[str, str]:
    """Grade id -> what that test cell's hidden tests check, in the words of the comments just above them.

    Only those comments, which stay in the student's copy anyway; never the hidden code.
    """
    notes = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        lines = cell.source.splitlines()
        said = []
        for start in (i for i, line in enumerate(lines) if HIDDEN_BEGIN in line):
            above = []
            for line in reversed(lines[:start]):
                if not line.strip().startswith("#"):
                    break
                above.insert(0, line.strip().lstrip("#").strip())
            said.append(" ".join(part for part in above if part))
        if said:
            notes[cell.metadata.nbgrader["grade_id"]] = " ".join(s for s in said if s) or HIDDEN_DEFAULT_NOTE
    return notes


def student_version(notebook: CourseNotebook) -> NotebookNode:
    """The notebook students receive; ``metadata.course.hidden_tests`` says which cells the grader extends."""
    master = master_version(notebook)
    notes = hidden_test_notes(master)
    nb = _apply([ClearHiddenTests(), ClearMarkScheme(), ComputeChecksums(), CheckCellMetadata()],
                master, notebook)
    if notes:
        nb.metadata["course"] = {"hidden_tests": notes}
    return nb


def serialize(nb: NotebookNode) -> str:
    return nbformat.writes(nb, version=NBFORMAT_VERSION) + "\n"


def tabled_solution(notebook: CourseNotebook) -> tuple[NotebookNode, list[str]]:
    """The solution notebook with its grading table and every grade cell's points written from the table its specs
    declare (``course.grading_table``), and what that changed (empty: the file already says it)."""
    solution = read(notebook.solution_path)
    table = grading_table.for_notebook(notebook.key)
    if table is None:
        return solution, []
    try:
        return solution, grading_table.apply(solution, table)
    except ValueError as error:
        raise ReleaseError(str(error)) from None


def release(notebooks: list[CourseNotebook] | None = None) -> list[Path]:
    """Write every solution's grading table and points from its specs, then every student notebook from its
    solution; returns the paths written."""
    written = []
    for notebook in notebooks or course_notebooks():
        solution, changed = tabled_solution(notebook)
        if changed:
            notebook.solution_path.write_text(serialize(solution), encoding="utf-8")
            written.append(notebook.solution_path)
        notebook.student_path.parent.mkdir(parents=True, exist_ok=True)
        notebook.student_path.write_text(serialize(student_version(notebook)), encoding="utf-8")
        written.append(notebook.student_path)
    return written


def drifted(notebooks: list[CourseNotebook] | None = None) -> list[str]:
    """Solution notebooks whose grading table or points differ from their specs', and student notebooks that are
    missing or differ from what release would write now."""
    problems = []
    for notebook in notebooks or course_notebooks():
        changed = tabled_solution(notebook)[1]
        if changed:
            problems.append(f"{notebook.solution_path} differs from its specs ({'; '.join(changed)}): "
                            "run `make release`")
        path = notebook.student_path
        if not path.exists():
            problems.append(f"{path} is missing: run `make release`")
        elif path.read_text(encoding="utf-8") != serialize(student_version(notebook)):
            problems.append(f"{path} differs from its solution's release: run `make release`")
    return problems
