"""The Jupyter kernel of a grading run: ipykernel's own, ended without Python's shutdown.

Once the kernel has answered papermill's shutdown request (or been interrupted, for a cell past its limit, which
still leaves the traceback in the notebook), nothing in the process is needed: the executed notebook and the export
are written by then. Python's finalization of a process holding torch, Triton, matplotlib and IPython cost about
1.2 s of CPU per notebook on the CI-sized machine (bench/RESULTS.md), so the process ends at once instead.
"""

import os
import sys

from ipykernel import kernelapp

if __name__ == "__main__":
    kernelapp.launch_new_instance()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
