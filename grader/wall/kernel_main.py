"""The Jupyter kernel of a grading run: ipykernel's own, ended without Python's shutdown.

Once the kernel has answered papermill's shutdown request (or been interrupted, for a cell past its limit, which
still leaves the traceback in the notebook), nothing in the process is needed: the executed notebook and the export
are written by then, so the process ends without Python's finalization (``grader.wall.exit_now``).
"""

from ipykernel import kernelapp

from grader.wall.exit_now import exit_now

if __name__ == "__main__":
    kernelapp.launch_new_instance()
    exit_now(0)
