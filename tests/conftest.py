"""Shared fixtures. Tests marked ``gpu`` need a GPU, and tests marked ``sandbox`` grade through the real
pipeline, which needs bubblewrap: without either they are skipped and counted aloud, never passed."""

from __future__ import annotations

import pytest
import torch

import course  # noqa: F401  (chooses the device before any test defines a Triton kernel)

HAS_GPU = torch.cuda.is_available()
_not_run: list[str] = []
_no_sandbox: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from grader.sandbox import unavailable_reason

    no_sandbox = unavailable_reason()
    for item in items:
        if not HAS_GPU and item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU: NOT RUN, not counted as passed"))
            _not_run.append(item.nodeid)
        elif no_sandbox and item.get_closest_marker("sandbox") is not None:
            item.add_marker(pytest.mark.skip(reason=f"needs the sandbox ({no_sandbox}): NOT RUN, not counted as "
                                                    "passed"))
            _no_sandbox.append(item.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if _no_sandbox:
        terminalreporter.write_sep("=", f"{len(_no_sandbox)} grading tests did NOT run (no sandbox here)",
                                   yellow=True)
        terminalreporter.write_line("They are skipped, not passed. Install bubblewrap (apt-get install bubblewrap).")
    if _not_run:
        terminalreporter.write_sep("=", f"{len(_not_run)} GPU tests did NOT run (no GPU on this machine)",
                                   yellow=True)
        terminalreporter.write_line("They are skipped, not passed. Run `make test` on a GPU machine to run them.")
    elif HAS_GPU:
        terminalreporter.write_sep("=", f"GPU tests ran on {torch.cuda.get_device_name(0)}", green=True)
