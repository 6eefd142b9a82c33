"""Every measurement ``python -m bench`` runs, read from ``bench/registry.toml``: its name, the module or shell
script that makes it, and what it measures."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Measurement:
    """One entry of the suite: ``target`` is a module of bench/ (``references``) or a shell script (``x.sh``)."""

    name: str
    target: str
    what: str

    @property
    def path(self) -> Path:
        return BENCH / (self.target if self.target.endswith(".sh") else f"{self.target}.py")


SUITE = tuple(Measurement(**entry) for entry in
              tomllib.loads((BENCH / "registry.toml").read_text(encoding="utf-8"))["measurement"])

# Modules of bench/ that are no measurement of their own: the harness and what measurements import.
LIBRARY = ("__init__", "__main__", "registry", "harness", "against_copy", "throughput", "graded_results", "judge_spans",
           "pipeline_simulation", "ncu_csv",
           "w1d7_limit_kernels", "w1d7_limit_profile", "w2d456_limit_kernels")


def find(name: str) -> Measurement | None:
    """The measurement of that name, or None."""
    return next((m for m in SUITE if m.name == name), None)
