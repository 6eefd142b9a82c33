"""course.dispatch_mode: a dispatch mode (the recorder's, the guard's) that does not import Dynamo by itself,
and still works beside torch.compile once Dynamo is loaded."""

from __future__ import annotations

import subprocess
import sys

WATCH = """
import sys, torch
from torch.utils._python_dispatch import TorchDispatchMode
from course.dispatch_mode import LazyDynamoDispatchMode
seen = []
class Watch({base}):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {{}}))
with Watch():
    torch.empty(3).fill_(1.0)
print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo", len(seen))
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_lazy_mode_sees_every_op_without_importing_dynamo():
    assert _run(WATCH.format(base="LazyDynamoDispatchMode")) == "no dynamo 2"
    # the control: torch's own base imports Dynamo at the mode's first op (the 1.7 s this saves)
    assert _run(WATCH.format(base="TorchDispatchMode")) == "dynamo 2"


def test_a_compiled_function_runs_under_the_mode_once_dynamo_is_loaded():
    code = WATCH.format(base="LazyDynamoDispatchMode") + """
double = torch.compile(lambda x: x * 2 + 1, backend="eager")
with Watch():
    out = double(torch.ones(3))
assert torch.equal(out, torch.full((3,), 3.0)) and "torch._dynamo" in sys.modules
print("compiled", len(seen) > 2)
"""
    assert _run(code).splitlines()[-1] == "compiled True"
