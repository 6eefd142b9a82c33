"""Shared fixtures. Tests marked ``gpu`` need a GPU, and tests marked ``sandbox`` grade through the real
pipeline, which needs bubblewrap: without either they are skipped and counted aloud, never passed."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

import course

course.device.configure()  # before any test module defines a Triton kernel
# New gradebooks are copied from one made earlier (grader.gradebook.register): within this process and the graders
# it starts, never from an earlier session's cache.
os.environ["GRADER_CACHE"] = tempfile.mkdtemp(prefix="grader-cache-")

HAS_GPU = torch.cuda.is_available()
NO_GPU = "needs a CUDA GPU: NOT RUN, not counted as passed"
NO_SANDBOX = "needs the sandbox"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (``make test``): a worker per CPU on a CPU-only machine; none beside a GPU, whose timed tests
    must have the machine to themselves."""
    return 0 if HAS_GPU else len(os.sched_getaffinity(0))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from grader.sandbox import unavailable_reason

    no_sandbox = unavailable_reason()
    for item in items:
        if not HAS_GPU and item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))
        elif no_sandbox and item.get_closest_marker("sandbox") is not None:
            item.add_marker(pytest.mark.skip(reason=f"{NO_SANDBOX} ({no_sandbox}): NOT RUN, not counted as passed"))


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
