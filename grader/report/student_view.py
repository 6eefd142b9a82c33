"""What a student's own grading shows (``check``, ``pushed`` and the push service): hidden tests' messages left out,
untouched stubs named as such."""

from __future__ import annotations

from grader.score.results import ItemResult, NotebookResult


def still_a_stub(item: ItemResult) -> bool:
    """An item whose every message says the answer is still the released stub."""
    from course.answers import NOT_ANSWERED

    lines = [line for line in item.message.splitlines() if line.strip()]
    stub = ("NotImplementedError", "is not defined in your notebook", NOT_ANSWERED)
    return item.score == 0 and bool(lines) and all(any(s in line for s in stub) for line in lines)


def stub_verdict(item: ItemResult) -> str:
    """What an untouched item says: a quiz answer left at its ``...``, or code still the released stub."""
    from course.answers import NOT_ANSWERED

    return "not answered yet" if NOT_ANSWERED in item.message else "not graded yet: still a stub"


def without_hidden_material(result: NotebookResult) -> None:
    """A student's own grading shows what the hidden tests cover, not their messages (which can give answers away)."""
    from grader.authoring.release import hidden_test_notes, master_version
    from grader.intake.layout import find_course_notebook

    notebook = find_course_notebook(result.assignment, result.notebook)
    hidden = hidden_test_notes(master_version(notebook)) if notebook else {}
    for item in result.items:
        if item.item in hidden and item.status != "passed" and not still_a_stub(item):
            item.message = f"did not pass the grader's hidden tests ({hidden[item.item]})"
