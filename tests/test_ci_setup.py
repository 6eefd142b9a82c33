"""CI cannot pass without the sandbox: `.ci/run` with CI set stops before the suite, saying why, where bubblewrap
cannot start a sandbox; and the suite itself fails, rather than skips, a sandbox test that cannot run under CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _fake_bin(folder: Path) -> Path:
    """A bwrap that cannot start (as AppArmor's refusal of user namespaces looks), an `id` that is not root (so no
    package is installed), and a `make` that runs `setup` but only reports `test`."""
    folder.mkdir()
    scripts = {
        "bwrap": "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n",
        "id": "#!/bin/sh\necho 1000\n",
        "make": f'#!/bin/sh\nif [ "$1" = test ]; then echo "MAKE TEST RAN"; exit 0; fi\n'
                f'exec {shutil.which("make")} "$@"\n',
    }
    for name, text in scripts.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_ci_run_under_ci_fails_before_the_suite_where_bubblewrap_cannot_start(tmp_path):
    fake = _fake_bin(tmp_path / "bin")
    env = {**os.environ, "CI": "true", "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}",
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(REPO / ".ci" / "run")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert "the grader's sandbox cannot run on this machine" in output and "Permission denied" in output, output[-3000:]
    assert "MAKE TEST RAN" not in output


def test_under_ci_a_sandbox_test_that_cannot_run_fails_instead_of_skipping(tmp_path):
    (tmp_path / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    (tmp_path / "test_needs_it.py").write_text(
        "import pytest\n\n"
        "def test_grades_through_the_sandbox():\n"
        "    pytest.skip('NOT RUN, not counted as passed: the sandbox cannot run here (bwrap is not installed)')\n\n"
        "def test_needs_a_gpu():\n"
        "    from conftest import NO_GPU\n"
        "    pytest.skip(NO_GPU)\n")
    runs = {}
    for ci in ("", "true"):
        env = {**os.environ, "CI": ci, "PYTHONPATH": str(REPO)}
        runs[ci] = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                                   "-p", "no:xdist", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=300)
    assert runs[""].returncode == 0 and "2 skipped" in runs[""].stdout, runs[""].stdout[-2000:]
    assert runs["true"].returncode == 1, runs["true"].stdout[-2000:]
    assert "1 failed" in runs["true"].stdout and "1 skipped" in runs["true"].stdout, runs["true"].stdout[-2000:]
    assert "CI is set, and this test could not run here" in runs["true"].stdout
