"""The notebook's kernel source as the judge reads it: the kernels' definitions, where a launched kernel was
written, a graded function's banned launches, and the known interpreter-vs-GPU divergences it shows.
"""

from __future__ import annotations

from typing import Any

from grader.judge import provenance
from grader.kernel_build import build_kernels


def _notebook_cells(notebook_path: str) -> list[Any]:
    import nbformat

    return nbformat.read(notebook_path, as_version=4).cells  # the sanitized notebook: its syntax, never run


def _read_definitions(notebook_path: str) -> build_kernels.Definitions:
    return build_kernels.read_definitions([c.source for c in _notebook_cells(notebook_path) if c.cell_type == "code"])


def _kernel_sources(definitions: build_kernels.Definitions) -> dict[str, Any]:
    from course import divergence

    names = dict(definitions.kernel_names)  # k = triton.jit(f): the name k calls the kernel f
    return {name: divergence.KernelSource(name, source, first, definitions.aliases, names)
            for name, (source, first) in definitions.sources.items()}


def _launched(plan: Any) -> list[str]:
    launches = plan.get("launches") if isinstance(plan, dict) else None
    return [str(launch.get("kernel")) for launch in launches or [] if isinstance(launch, dict)]


def forbidden_problem(spec: Any, plan: Any, definitions: build_kernels.Definitions) -> str | None:
    """Why the plan's kernels break the spec's ban on some library calls (read from their source), or None."""
    if not spec.forbidden_calls or not isinstance(plan, dict):
        return None
    from course import divergence

    try:
        return divergence.forbidden_problem(_kernel_sources(definitions), _launched(plan), spec.forbidden_calls)
    except Exception as error:  # e.g. RecursionError on a pathological expression: refuse, as for any unknown call
        return f"the grader could not read the kernels' source ({type(error).__name__}), and this exercise bans " \
               f"{', '.join(spec.forbidden_calls)}"


def divergence_notes(spec: Any, calls: dict[str, Any], definitions: build_kernels.Definitions) -> list[str]:
    """For a CPU verdict: the known interpreter/GPU divergences in the kernels the recorded calls launched."""
    from course import divergence
    from course.spec import TOLERANCES

    plans = [call.get("plan") for call in calls.values() if isinstance(call, dict)]
    launched = sorted({name for plan in plans for name in _launched(plan)})
    try:
        found = divergence.scan(_kernel_sources(definitions), launched, spec.tolerance < TOLERANCES["tf32"])
    except Exception:  # notes only: a source the reader cannot handle leaves the verdict as it is
        return []
    return [f"NOTE the GPU may disagree: [{d.code}] {d.kernel}, line {d.line}: {d.detail or d.rule.title}; "
            f"on a GPU {d.rule.gpu}" for d in found]


def _allowed(spec: Any, cells: list[Any]) -> provenance.Allowed | None:
    """The kernels ``spec`` may launch (those its kernel_cells define), or None when any kernel may count."""
    return provenance.allowed_kernels(cells, spec.kernel_cells) if spec.kernel_cells else None
