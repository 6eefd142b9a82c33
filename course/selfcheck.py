"""``python -m course.selfcheck NOTEBOOK``: run your notebook top to bottom and read each graded cell's verdict.

A copy of the notebook runs in a fresh kernel, so your file is left as it is. The check sees only what
you see: the visible tests. Hidden tests and the performance items are decided by the grader, on its
GPU, and the total says how many points depend on them.

On the CPU, a kernel's test may also print a warning about a known difference between Triton's interpreter
and a GPU (``course.divergence``); the check repeats it under the item whose test cell printed it.

Exit status:
  0  every visible test passed, and no kernel drew a GPU warning;
  1  an item failed here, is unfinished (a stub, an answer left as ...) or did not run; this wins over 3;
  2  the file could not be checked at all;
  3  every visible test passed, but a kernel drew a GPU warning: the grader's GPU run may fail it.
A warning comes from reading the kernel's source, not from running it, so a kernel it flags may still be
right; the status of its own lets a script tell "passed" from "passed, but look at the warnings".
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from course.answers import NOT_ANSWERED
from course.divergence import RULES

ROOT = Path(__file__).resolve().parent.parent
KERNEL_NAME = "gpu-kernels-course"
PERF_PREFIX = "perf_"
STUB = "raise NotImplementedError()"
STILL_A_STUB = "not graded yet: still a stub"
PENDING_GPU = "pending a GPU run"
_COPY_SUFFIX = re.compile(r"(-Copy\d+| \(\d+\))+$")  # JupyterLab's "Duplicate", a browser's second download
EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE, EXIT_WARNED = 0, 1, 2, 3


class Unusable(Exception):
    """The notebook cannot be checked (missing, corrupt, not a course notebook, no kernel)."""


@dataclass
class Verdict:
    grade_id: str
    points: float
    text: str
    ok: bool  # nothing visible failed or is missing
    visible: bool  # the visible tests alone decide these points
    details: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # interpreter/GPU divergence warnings its test cell printed
    checked_in_part: bool = False  # a visible check passed; hidden tests decide the points


def read_notebook(path: Path) -> NotebookNode:
    if not path.is_file():
        raise Unusable(f"{path}: no such file")
    try:
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
    except Exception as error:  # nbformat raises several kinds for a damaged file
        first = (str(error).strip().splitlines() or [""])[0]
        raise Unusable(f"{path} is not a readable notebook ({type(error).__name__}: {first[:200]}); "
                       "download a fresh copy of the course notebook and move your code into it") from None
    if not any(_nbgrader(cell).get("grade") for cell in nb.cells):
        raise Unusable(f"{path} has no graded cells: it is not one of the course's notebooks")
    return nb


def name_notes(path: Path) -> list[str]:
    """What the grader will think of the file's name."""
    base = _COPY_SUFFIX.sub("", path.stem)
    released = sorted(p.relative_to(ROOT) for p in ROOT.glob(f"week*/{base}.ipynb"))
    if not released:
        return [f"note: no course notebook is called {base}.ipynb; the grader looks for the released names"]
    if path.stem != base:
        return [f"note: this is a copy; submit it as {released[0].as_posix()} (the grader looks for that name)"]
    return []


def _nbgrader(cell: NotebookNode) -> dict[str, Any]:
    return cell.get("metadata", {}).get("nbgrader", {})


def _error(cell: NotebookNode) -> NotebookNode | None:
    return next((out for out in cell.get("outputs", []) if out.output_type == "error"), None)


def _is_stub_error(error: NotebookNode) -> bool:
    return error.ename == "NotImplementedError" or "not implemented yet" in error.evalue


def _printed(cell: NotebookNode) -> str:
    text = "".join(out.text for out in cell.get("outputs", []) if out.output_type == "stream")
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _has_code(source: str) -> bool:
    return any(line.strip() and not line.strip().startswith("#") for line in source.splitlines())


def judge(nb: NotebookNode, on_gpu: bool, not_run: dict[int, str] | None = None) -> list[Verdict]:
    """One verdict per graded cell of an executed notebook; ``not_run`` maps cell index -> why it did not run."""
    hidden: dict[str, str] = nb.metadata.get("course", {}).get("hidden_tests", {})
    not_run = not_run or {}
    verdicts = []
    stub = ""  # the latest solution cell above that is still a stub
    for index, cell in enumerate(nb.cells):
        meta, error = _nbgrader(cell), _error(cell)
        if cell.cell_type != "code":
            continue
        if meta.get("solution") and (STUB in cell.source or (error is not None and _is_stub_error(error))):
            stub = meta.get("grade_id", f"cell {index}")
        if not meta.get("grade"):
            continue
        grade_id, points = meta.get("grade_id", f"cell {index}"), float(meta.get("points", 0))
        perf, note = grade_id.startswith(PERF_PREFIX), hidden.get(grade_id)
        visible = not perf and note is None
        # A test that cannot run yet because of a stub above, or a speed measured on a stub, grades nothing.
        still_a_stub = (error is not None and (_is_stub_error(error) or bool(stub and error.ename == "NameError"))
                        or bool(stub and ((note is not None and not _has_code(cell.source)) or (perf and on_gpu))))
        details: tuple[str, ...] = ()
        if index in not_run:
            text, ok = f"not run: {not_run[index]}", False
        elif still_a_stub:
            text, ok = STILL_A_STUB + (f" ({stub} above)" if stub else ""), False
        elif perf and not on_gpu:
            text, ok = "pending a GPU run", True
        elif error is not None and error.ename == "AssertionError" and f": {NOT_ANSWERED}" in error.evalue:
            text, ok = NOT_ANSWERED, False
        elif error is not None:
            lines = [line for line in error.evalue.splitlines() if line.strip()] or [""]
            text, ok = f"failed: {error.ename}: {lines[0]}" if lines[0] else f"failed: {error.ename}", False
            details = tuple(lines[1:9])
        elif not on_gpu and PENDING_GPU in _printed(cell):  # a CUDA C check without a GPU (course.check)
            text, ok, visible = "pending a GPU run", True, False
        elif perf:
            text, ok = f"preview: {_printed(cell) or '(nothing printed)'}", True
        elif note is not None and _has_code(cell.source):
            text, ok = f"visible part passed; the grader also runs hidden tests: {note}", True
        elif note is not None:
            text, ok = f"no visible test; the grader runs hidden tests: {note}", True
        else:
            text, ok = "passed (visible tests)", True
        verdicts.append(Verdict(grade_id, points, text, ok, visible, details))
    return verdicts


def other_errors(nb: NotebookNode) -> list[str]:
    """Cells that are not graded but raised, such as a solution cell with a syntax error."""
    lines = []
    for index, cell in enumerate(nb.cells):
        error = _error(cell) if cell.cell_type == "code" else None
        if error is None or _nbgrader(cell).get("grade"):
            continue
        name = _nbgrader(cell).get("grade_id", f"cell {index + 1}")
        what = "still a stub" if _is_stub_error(error) else f"{error.ename}: {(error.evalue.splitlines() or [''])[0]}"
        lines.append(f"  {name}: {what}")
    return lines


_WARNING = re.compile(r"^\s*(\[(?P<code>[\w-]+)\] .+)$")
_FIX = re.compile(r"^\s*Fix: (.+)$")


def printed_warnings(cell: NotebookNode) -> tuple[str, ...]:
    """The divergence warnings (``course.divergence.report``) in a cell's output, each with its fix, once each."""
    found: list[str] = []
    for line in "".join(out.text for out in cell.get("outputs", []) if out.output_type == "stream").splitlines():
        warning, fix = _WARNING.match(line), _FIX.match(line)
        if warning and warning["code"] in RULES:
            found.append(f"GPU warning: {warning[1]}")
        elif fix and found and "\n" not in found[-1]:  # the fix of the warning just above
            found[-1] += f"\n  fix: {fix[1]}"
    return tuple(dict.fromkeys(found))


def annotate(nb: NotebookNode, verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts with the warnings their test cells printed, and whether hidden tests decide what passed.

    A warning is shown under the graded cell that printed it: the test that ran the kernel. Ungraded cells
    run only the course's own kernels (Day 6's divergence demo), so their warnings are not repeated.
    """
    hidden = nb.metadata.get("course", {}).get("hidden_tests", {})
    cells = {_nbgrader(c).get("grade_id", f"cell {i}"): c for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and _nbgrader(c).get("grade")}
    annotated = []
    for v in verdicts:
        cell = cells.get(v.grade_id)
        in_part = (v.ok and not v.visible and v.grade_id in hidden and not v.grade_id.startswith(PERF_PREFIX)
                   and cell is not None and _has_code(cell.source))
        warnings = printed_warnings(cell) if cell is not None else ()
        text = f"{v.text}; see the GPU warning below" if warnings else v.text
        annotated.append(dataclasses.replace(v, text=text, warnings=warnings, checked_in_part=in_part))
    return annotated


def exit_status(verdicts: list[Verdict]) -> int:
    """EXIT_FAILED when an item failed here, else EXIT_WARNED when a test printed a GPU warning, else EXIT_OK."""
    if not all(v.ok for v in verdicts):
        return EXIT_FAILED
    return EXIT_WARNED if any(v.warnings for v in verdicts) else EXIT_OK


def total_line(verdicts: list[Verdict]) -> str:
    """The points, by what decided them here; the failed line is never left out, as it sets the exit status."""
    failed = [v for v in verdicts if not v.ok]
    items = f" ({len(failed)} item{'s' if len(failed) != 1 else ''})" if failed else ""
    rows = [
        (sum(v.points for v in verdicts if v.ok and v.visible),
         "passed the visible tests; the grader runs them again on its GPU", False),
        (sum(v.points for v in verdicts if v.checked_in_part),
         "passed a visible check of form only (an answer's type, not its value); hidden tests decide them", False),
        (sum(v.points for v in failed), f"failed here, or are unfinished or not run{items}", True),
        (sum(v.points for v in verdicts if v.ok and not v.visible and not v.checked_in_part),
         "are decided only by the grader (hidden tests, speed on its GPU)", False),
    ]
    total = sum(v.points for v in verdicts)
    lines = [f"Of {total:g} points:"]
    lines += [f"  {points:>4g}  {text}" for points, text, always in rows if points or always]
    return "\n".join(lines)


def _kernel_name() -> str:
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL_NAME if KERNEL_NAME in KernelSpecManager().find_kernel_specs() else "python3"


def _inject_device(nb: NotebookNode, device: str) -> None:
    """Set the notebook's ``device`` parameter, after its parameters cell, as the grader's papermill does."""
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    cell = nbformat.v4.new_code_cell(f"device = {device!r}  # set by course.selfcheck")
    nb.cells.insert(tagged[0] + 1 if tagged else 0, cell)


def execute(nb: NotebookNode, device: str, timeout: float) -> dict[int, str]:
    """Run ``nb`` in place in a fresh kernel; returns the cells that did not run, with why.

    A timeout or a dead kernel becomes an error output of the cell that was running, so it reads like any error.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    # The kernel imports the same `course` as this process, wherever the student runs the check from.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "COURSE_DEVICE": device, "PYTHONPATH": path}
    current = {"index": -1}
    with tempfile.TemporaryDirectory(prefix="selfcheck-") as scratch:
        client = NotebookClient(nb, kernel_name=_kernel_name(), allow_errors=True, timeout=max(1, round(timeout)),
                                resources={"metadata": {"path": scratch}})
        client.on_cell_start = lambda cell, cell_index: current.update(index=cell_index)
        log = Path(scratch) / "kernel.log"
        try:
            with log.open("w") as stderr:
                client.execute(env=env, stderr=stderr)  # the kernel's own warnings stay out of the report
            return {}
        except CellTimeoutError:
            ename, evalue = "CellTimeoutError", f"this cell ran longer than {timeout:g} s (--timeout)"
        except DeadKernelError:
            said = [line for line in log.read_text(errors="replace").splitlines()
                    if line.strip() and not line.startswith("[IPKernelApp] WARNING")]
            ename = "DeadKernelError"
            evalue = (f"the kernel died while this cell ran: {' / '.join(said[-3:])}" if said else
                      "the kernel died while this cell ran, without a message: often a segmentation fault "
                      "(a load or store outside the tensors, in the interpreter)")
        except Exception as error:
            if current["index"] >= 0:
                raise
            raise Unusable(f"could not start a Python kernel ({type(error).__name__}: {error})") from None
    stopped = nb.cells[current["index"]]
    # Replaces the KeyboardInterrupt that stopping the kernel may have left there.
    stopped.outputs = [out for out in stopped.get("outputs", []) if out.output_type != "error"]
    stopped.outputs.append(nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[]))
    name = _nbgrader(stopped).get("grade_id", f"cell {current['index'] + 1}")
    return {i: f"{ename} in {name} above" for i in range(current["index"] + 1, len(nb.cells))}


def _resolve_device(mode: str) -> tuple[str, str]:
    """("gpu" or "cpu", a description) for --device."""
    import torch

    if mode == "cpu" or (mode == "auto" and not torch.cuda.is_available()):
        return "cpu", "the CPU (Triton's interpreter: small shapes, correctness only)"
    if not torch.cuda.is_available():
        raise Unusable("--device gpu was asked for, but no CUDA GPU is visible")
    return "gpu", f"a GPU ({torch.cuda.get_device_name(0)})"


_EXIT_HELP = "exit status:\n" + __doc__.split("Exit status:\n")[1].split("\nA warning")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.selfcheck", description=__doc__.splitlines()[0],
                                     epilog=_EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--device", choices=("auto", "gpu", "cpu"),
                        default=os.environ.get("COURSE_DEVICE", "auto").lower())
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one cell may run (default 600)")
    args = parser.parse_args(argv)
    try:
        nb = read_notebook(args.notebook)
        device, described = _resolve_device(args.device)
        print(f"Checking {args.notebook} on {described}.")
        for note in name_notes(args.notebook):
            print(note)
        _inject_device(nb, device)
        not_run = execute(nb, device, args.timeout)
    except Unusable as error:
        print(f"cannot check: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    verdicts = annotate(nb, judge(nb, on_gpu=device == "gpu", not_run=not_run))
    width = max(len(v.grade_id) for v in verdicts)
    print()
    for v in verdicts:
        print(f"  {v.grade_id:<{width}}  {v.points:>3g} pt{'s' if v.points != 1 else ' '}  {v.text}")
        for line in (*v.details, *"\n".join(v.warnings).splitlines()):
            print(f"  {'':<{width}}         {line}")
    others = other_errors(nb)
    if others:
        print("\nOther cells that raised an error:")
        print("\n".join(others))
    print("\n" + total_line(verdicts))
    warned = sum(len(v.warnings) for v in verdicts)
    if warned:
        print(f"\n{warned} GPU warning{'s' if warned != 1 else ''} above: the interpreter cannot show these "
              "differences from a GPU, so the grader's GPU run may fail a test that passed here.")
        if exit_status(verdicts) == EXIT_WARNED:
            print(f"Exit status {EXIT_WARNED}: the visible tests passed, but with a GPU warning.")
    return exit_status(verdicts)


if __name__ == "__main__":
    sys.exit(main())
