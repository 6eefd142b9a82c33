"""The package layout says what each module is: no module name means two things across ``course`` and ``grader``
(a reader of ``export`` or ``tma`` must not have to check which package it came from)."""

from __future__ import annotations

import pkgutil

import course
import grader


def _names(package) -> set[str]:
    return {m.name for m in pkgutil.iter_modules(package.__path__) if m.name != "__main__"}


def test_no_module_name_stands_in_both_packages():
    assert _names(course) and _names(grader)
    assert _names(course) & _names(grader) == set()
