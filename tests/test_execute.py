"""Every way a run can end is a status: finished, a cell over its limit, the notebook over its limit, a dead kernel."""

from pathlib import Path

import nbformat
import pytest

from grader.run.execute import Job, execute, scrubbed_environment
from grader.score import results
from grader.wall import sandbox


def _notebook(folder, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nb.ipynb"
    nbformat.write(nb, str(path))
    return path


def _run(tmp_path, *sources, **limits):
    path = _notebook(tmp_path / "work", *sources)
    job = Job(notebook=str(path), workdir=str(tmp_path / "work"), device="cpu", log=str(tmp_path / "run.log"),
              sandbox=sandbox.unavailable_reason() is None, **limits)
    return job, execute(job)


def test_a_finished_run_is_ok_and_keeps_errors_as_outputs(tmp_path):
    job, outcome = _run(tmp_path, "print('hello')", "1 / 0", "print('after')")
    assert outcome.status == results.OK, outcome.message
    executed = nbformat.read(str(job.executed_path), as_version=4)
    assert executed.cells[-1].outputs[0]["text"].strip() == "after"
    assert outcome.timings["kernel_start"] > 0


def test_parameters_are_injected(tmp_path):
    job, outcome = _run(tmp_path, "print(device, grading)")
    executed = nbformat.read(str(job.executed_path), as_version=4)
    assert "cpu True" in executed.cells[-1].outputs[0]["text"]


def test_a_cell_over_its_limit_is_a_timeout(tmp_path):
    _, outcome = _run(tmp_path, "import time\ntime.sleep(60)", cell_timeout=3)
    assert outcome.status == results.TIMEOUT and "cell" in outcome.message


def test_a_cell_spinning_on_the_cpu_is_interrupted_at_its_limit(tmp_path):
    """A busy loop, not a wait: the interrupt lands between bytecodes, and the traceback is kept."""
    job, outcome = _run(tmp_path, "print('starting', flush=True)\nwhile True:\n    pass", cell_timeout=3)
    assert outcome.status == results.TIMEOUT and "cell" in outcome.message
    [cell] = [c for c in nbformat.read(str(job.executed_path), as_version=4).cells if "while True" in c.source]
    assert cell.outputs[0]["text"].strip() == "starting"
    assert any(o.get("ename") == "KeyboardInterrupt" for o in cell.outputs), cell.outputs


# The kernel sends a cell's reply, then its "idle" status; a run paused in between (the GPU gate stops it while a
# judge holds its GPU) delays the second. Here the kernel itself sleeps there, once.
_IDLE_LATE = """
import time
kernel = get_ipython().kernel
publish = kernel._publish_status
def late_idle(status, *args, **kwargs):
    if status == "idle":
        kernel._publish_status = publish
        time.sleep(SECONDS)
    return publish(status, *args, **kwargs)
kernel._publish_status = late_idle
"""


def test_a_run_paused_between_a_cell_s_reply_and_its_last_output_is_not_a_timeout(tmp_path):
    job, outcome = _run(tmp_path, _IDLE_LATE.replace("SECONDS", "6"), "print('after')", cell_timeout=30)
    assert outcome.status == results.OK, outcome.message
    executed = nbformat.read(str(job.executed_path), as_version=4)
    assert executed.cells[-1].outputs[0]["text"].strip() == "after"


def test_a_cell_whose_last_output_never_comes_is_a_timeout(tmp_path):
    _, outcome = _run(tmp_path, _IDLE_LATE.replace("SECONDS", "600"), "print('after')", cell_timeout=4,
                      notebook_timeout=60)
    assert outcome.status == results.TIMEOUT and "cell" in outcome.message


def test_a_notebook_over_its_limit_is_killed(tmp_path):
    _, outcome = _run(tmp_path, "import time\ntime.sleep(60)", cell_timeout=100, notebook_timeout=8)
    assert outcome.status == results.TIMEOUT and "notebook" in outcome.message


def test_a_dead_kernel_is_a_status(tmp_path):
    _, outcome = _run(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert outcome.status == results.KERNEL_DIED


def test_the_notebook_sees_a_scrubbed_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    env = scrubbed_environment(Job(notebook="x", workdir=str(tmp_path), device="cpu"))
    assert "SECRET_TOKEN" not in env
    assert env["HOME"].startswith(str(tmp_path)) and env["COURSE_DEVICE"] == "cpu" and env["COURSE_GRADING"] == "1"
    # matplotlib's font list is there already: made once by the grader, not again by every run
    assert [p.name.startswith("fontlist-") for p in Path(env["MPLCONFIGDIR"]).iterdir()] == [True]


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_the_device_reaches_the_notebook(tmp_path, device, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the grader's own: the sandbox names the run's one GPU
    env = scrubbed_environment(Job(notebook="x", workdir=str(tmp_path), device=device, gpu="1"))
    assert env["COURSE_DEVICE"] == device and "CUDA_VISIBLE_DEVICES" not in env


CACHE = "import os, tempfile\nopen(os.path.join(tempfile.gettempdir(), 'cache.bin'), 'wb').write(b'x' * {} * 2**20)"


@pytest.mark.parametrize(("source", "status"), [
    (CACHE.format(3), results.OK),  # a compiler cache: over the printed-output limit, under the scratch quota
    ("print('x' * 3 * 2**20)", results.OUTPUT_LIMIT),  # the same amount printed: in the executed notebook
    (CACHE.format(12) + "\nimport time\ntime.sleep(30)", results.SCRATCH_LIMIT),
])
def test_printed_output_and_scratch_files_have_their_own_quotas(tmp_path, source, status):
    _, outcome = _run(tmp_path, source, output_bytes=2**20, scratch_bytes=8 * 2**20)
    assert outcome.status == status, outcome.message
