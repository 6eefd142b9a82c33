"""The sandbox sees only what a student may see: the public fixture ``probe_for_secrets`` (tests/adversarial/) hunts
for the course's secrets from inside a graded run, on this machine's device (the CPU here, a GPU where there is
one), and finds none of them, while the same probe run outside the sandbox finds them (so it can fail).

Planted for the probe: an earlier grading output inside the checkout (``build/``) and another user's
world-readable file outside /tmp. The checkout's ``.git``, ``solutions/`` and ``tests/`` are the real ones."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import nbformat
import pytest

from grader.flow.settings import Settings, resolve_device
from grader.pipeline import grade
from tests.adversarial.build import build, fixtures
from tests.adversarial.expected import EXPECTED

REPO = Path(__file__).resolve().parent.parent
NAME = "day4_first_triton_kernel-probe_for_secrets"
PROBE = fixtures()[NAME].added[0][1]
MARKERS = dict(zip(("earlier_out", "other_user"), re.findall(r'"(gpu-course-probe-[\w-]+\.txt)"', PROBE), strict=True))
DEVICE, DEVICE_NAME = resolve_device("auto")


@pytest.fixture(scope="module")
def planted():
    """An earlier OUT inside the checkout, and a world-readable file of another user (uid 1000 where we are root)."""
    earlier = REPO / "build" / f"probe-earlier-out-{uuid.uuid4().hex[:8]}"
    (earlier / "results" / "alice").mkdir(parents=True)
    (earlier / "results" / "alice" / MARKERS["earlier_out"]).write_text("a classmate's grade\n")
    other = Path(tempfile.mkdtemp(prefix="gpu-course-other-user-", dir="/var/tmp"))
    other.chmod(0o755)
    note = other / MARKERS["other_user"]
    note.write_text("someone else's notes\n")
    note.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(other, 1000, 1000)
        os.chown(note, 1000, 1000)
    yield {"earlier_out": earlier, "other_user": other}
    shutil.rmtree(earlier, ignore_errors=True)
    shutil.rmtree(other, ignore_errors=True)


def _summary(text: str) -> dict:
    lines = [line for line in text.splitlines() if line.startswith("PROBE SUMMARY ")]
    assert lines, f"the probe printed no summary: {text[-2000:]}"
    return json.loads(lines[-1].removeprefix("PROBE SUMMARY "))


def test_outside_the_sandbox_the_probe_finds_the_secrets(planted, tmp_path):
    (tmp_path / "probe.py").write_text(PROBE, encoding="utf-8")
    done = subprocess.run([sys.executable, str(tmp_path / "probe.py")], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    found = "\n".join(_summary(done.stdout)["found"])
    assert f"a git repository: {REPO / '.git'}" in found
    assert "git showed a solution notebook" in found or shutil.which("git") is None
    assert f"the checkout's solutions/: {REPO / 'solutions'}" in found
    assert f"the checkout's tests/: {REPO / 'tests'}" in found
    summary = _summary(done.stdout)
    if not summary["capped"]:
        assert str(planted["earlier_out"]) in found and str(planted["other_user"]) in found, found


@pytest.mark.sandbox
@pytest.mark.slow
def test_inside_the_sandbox_the_probe_finds_nothing_and_gets_its_honest_grade(planted, tmp_path):
    build(tmp_path / "class", [NAME])
    out = tmp_path / "out"
    results = grade(tmp_path / "class", out, Settings(DEVICE, DEVICE_NAME, runs=1), log=lambda _: None)
    result = next(r for r in results if r.student == NAME and r.notebook == "day4_first_triton_kernel")
    mismatch = EXPECTED[NAME].mismatch(DEVICE, result.status, {i.item: i.score for i in result.items})
    assert not mismatch, f"{mismatch}: {result.message}"
    executed = nbformat.read(out / "runs" / NAME / "week1" / "day4_first_triton_kernel" / "executed.ipynb", 4)
    printed = "".join(output.get("text", "") for cell in executed.cells for output in cell.get("outputs", []))
    summary = _summary(printed)
    assert summary["found"] == [], summary
    # The probe really looked: it walked the runtime it was given, to its end.
    assert summary["walked"] > 10_000 and not summary["capped"] and summary["roots"] > 5, summary
