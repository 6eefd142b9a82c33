"""Shared fixtures. GPU tests are marked ``gpu``: without a GPU they are skipped and counted aloud."""

from __future__ import annotations

import pytest
import torch

import course  # noqa: F401  (chooses the device before any test defines a Triton kernel)

HAS_GPU = torch.cuda.is_available()
_not_run: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: NOT RUN, not counted as passed")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
            _not_run.append(item.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if _not_run:
        terminalreporter.write_sep("=", f"{len(_not_run)} GPU tests did NOT run (no GPU on this machine)",
                                   yellow=True)
        terminalreporter.write_line("They are skipped, not passed. Run `make test` on a GPU machine to run them.")
    elif HAS_GPU:
        terminalreporter.write_sep("=", f"GPU tests ran on {torch.cuda.get_device_name(0)}", green=True)
