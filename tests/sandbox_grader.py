"""A grader-like process for tests/test_sandbox.py: sandbox.run() on a command that never ends by itself.

Usage: python tests/sandbox_grader.py SCRATCH LOG TAG. The test SIGKILLs this process while the sandboxed
command (which leaves a detached `sleep TAG` behind too) is running, then checks that nothing of it survives.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from grader.wall import sandbox

INSIDE = """
import subprocess, sys, time
subprocess.Popen(["sleep", sys.argv[1]], start_new_session=True)
time.sleep(float(sys.argv[1]))
"""

if __name__ == "__main__":
    scratch, log, tag = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(scratch)}
    sandbox.run([sys.executable, "-c", INSIDE, tag], scratch=scratch, env=env, limits=sandbox.Limits(seconds=120),
                log_path=log)
