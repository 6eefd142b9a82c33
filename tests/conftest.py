"""Shared fixtures. Tests marked ``gpu`` need a GPU, and tests marked ``sandbox`` grade through the real
pipeline, which needs bubblewrap: without either they are skipped and counted aloud, never passed."""

from __future__ import annotations

import inspect
import os
import tempfile

import pytest
import torch

import course

course.device.configure()  # before any test module defines a Triton kernel
# New gradebooks are copied from one made earlier (grader.score.gradebook.register): within this process and the graders
# it starts, never from an earlier session's cache.
os.environ["GRADER_CACHE"] = tempfile.mkdtemp(prefix="grader-cache-")


def _language_namespaces() -> list[object]:
    import triton.language as tl

    return [tl, tl.core, tl.math, tl.core.tensor, tl.core.tensor_descriptor_base]


# Triton 3.6's interpreter patches triton.language's builtins when an interpreted kernel calls a @triton.jit helper,
# and never puts them back (InterpretedFunction.__call__): a real compile later in the same process then fails
# ("'ir.value' object has no attribute 'dtype'"). The grader builds in fresh processes; a test process must undo it.
_LANGUAGE_AS_IMPORTED = [(namespace, dict(vars(namespace))) for namespace in _language_namespaces()]


@pytest.fixture(autouse=True)
def _triton_language_as_imported():
    yield
    for namespace, names in _LANGUAGE_AS_IMPORTED:
        current = vars(namespace)
        for name in [n for n, value in current.items() if n not in names and not inspect.ismodule(value)]:
            delattr(namespace, name)  # a submodule imported since stays: sys.modules would not bind it again
        for name, value in names.items():
            if current.get(name, value) is not value or name not in current:
                setattr(namespace, name, value)


HAS_GPU = torch.cuda.is_available()
NO_GPU = "needs a CUDA GPU: NOT RUN, not counted as passed"
NO_SANDBOX = "needs the sandbox"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (``make test``): a worker per CPU on a CPU-only machine; none beside a GPU, whose timed tests
    must have the machine to themselves."""
    return 0 if HAS_GPU else len(os.sched_getaffinity(0))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from grader.wall.sandbox import unavailable_reason

    no_sandbox = unavailable_reason()
    for item in items:
        if not HAS_GPU and item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))
        elif no_sandbox and item.get_closest_marker("sandbox") is not None:
            item.add_marker(pytest.mark.skip(reason=f"{NO_SANDBOX} ({no_sandbox}): NOT RUN, not counted as passed"))


# Where CI is set, a test that cannot run for want of the sandbox or a browser fails instead of being skipped: a
# green CI must have graded through the sandbox. (No CI machine has a GPU: GPU tests stay skipped, counted aloud.)
CI_MUST_RUN = ("sandbox", "bubblewrap", "bwrap", "chromium")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if NO_GPU not in reason and any(word in reason for word in CI_MUST_RUN):
            report.outcome = "failed"
            report.longrepr = f"CI is set, and this test could not run here: {reason}"


def _skipped_for(terminalreporter, reason: str) -> int:  # noqa: ANN001
    """Tests skipped for ``reason``, counted from their reports (under xdist the workers, not this process,
    collected them)."""
    return sum(1 for report in terminalreporter.stats.get("skipped", [])
               if isinstance(report.longrepr, tuple) and reason in str(report.longrepr[2]))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    no_sandbox = _skipped_for(terminalreporter, NO_SANDBOX)
    if no_sandbox:
        terminalreporter.write_sep("=", f"{no_sandbox} grading tests did NOT run (no sandbox here)", yellow=True)
        terminalreporter.write_line("They are skipped, not passed. Install bubblewrap (apt-get install bubblewrap).")
    not_run = _skipped_for(terminalreporter, NO_GPU)
    if not_run:
        terminalreporter.write_sep("=", f"{not_run} GPU tests did NOT run (no GPU on this machine)", yellow=True)
        terminalreporter.write_line("They are skipped, not passed. Run `make test` on a GPU machine to run them.")
    elif HAS_GPU:
        terminalreporter.write_sep("=", f"GPU tests ran on {torch.cuda.get_device_name(0)}", green=True)
