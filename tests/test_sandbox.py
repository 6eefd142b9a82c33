"""The sandbox: what untrusted code inside can see, reach and leave behind, and every limit's status.

Each test runs a small Python script inside with this venv's interpreter. Tests that need bubblewrap are
skipped (and said so loudly, never counted as passed) where it cannot run; the rest also cover --no-sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from grader.wall import cpu_pool, sandbox, scratch_folders
from grader.wall.sandbox import Limits, run, unavailable_reason
from grader.wall.scratch_folders import cleanup_stale, copy_out, make_scratch

REPO = Path(__file__).resolve().parent.parent
REASON = unavailable_reason()
if REASON is not None:
    warnings.warn(f"sandbox tests NOT RUN (skipped, not passed): {REASON}", stacklevel=1)
needs_bwrap = pytest.mark.skipif(REASON is not None, reason=f"NOT RUN, not counted as passed: {REASON}")


@pytest.fixture
def scratch():
    path = make_scratch()
    yield path
    shutil.rmtree(path, ignore_errors=True)


MINUTE = Limits(seconds=60)


def _python(scratch: Path, log: Path, code: str, *args: str, limits: Limits = MINUTE, **options):
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(scratch), "PYTHONDONTWRITEBYTECODE": "1"}
    result = run([sys.executable, "-c", code, *args], scratch=scratch, env=env, limits=limits, log_path=log,
                 **options)
    return result, log.read_text(errors="replace") if log.exists() else ""


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def _tagged(tag: str, *, inside: bool = False) -> list[psutil.Process]:
    """Live processes with ``tag`` as an argument; with ``inside``, only the sandboxed command's own (in another PID
    namespace, not bwrap)."""
    ours = os.readlink("/proc/self/ns/pid")
    found = []
    for process in psutil.process_iter(["cmdline", "status", "name"]):
        with contextlib.suppress(OSError):
            if tag not in (process.info["cmdline"] or []) or process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if not inside or (process.info["name"] != "bwrap" and os.readlink(f"/proc/{process.pid}/ns/pid") != ours):
                found.append(process)
    return found


def _tag() -> str:
    return f"{random.randint(1000, 9999)}.{random.randint(100000, 999999)}"  # a `sleep` nobody else runs


PROBE = """
import json, os, sys
paths = json.loads(sys.argv[1])
result = {"uid": os.getuid(), "euid": os.geteuid(), "tmp": sorted(os.listdir("/tmp"))}
def attempt(name, action):
    try:
        result[name] = action()
    except OSError as error:
        result[name] = type(error).__name__
def write(path):
    with open(path, "w") as file:
        file.write("x")
    return "written"
attempt("solution", lambda: open(paths["solution"]).read())
attempt("submissions", lambda: os.listdir(paths["submissions"]))
attempt("gradebook", lambda: open(paths["gradebook"]).read())
attempt("write_out", lambda: write(os.path.join(paths["out"], "grade.json")))
attempt("write_repo", lambda: write(os.path.join(paths["repo"], "sandbox-was-here")))
attempt("write_var_tmp", lambda: write(os.path.join(paths["var_tmp"], "sandbox-was-here")))
attempt("write_tmp", lambda: write("/tmp/sandbox-was-here"))
attempt("write_scratch", lambda: write("answer.json"))
attempt("write_grader_made_dir", lambda: write(os.path.join("home", "cache")))
print(json.dumps(result))
"""


@pytest.fixture
def course_files():
    """World-readable stand-ins for solutions/, other submissions, OUT and the gradebook, outside /tmp (which the
    sandbox replaces anyway), so only `hide` can keep them from the sandbox."""
    root = Path(tempfile.mkdtemp(prefix="gpu-course-test-", dir="/var/tmp"))
    (root / "solutions").mkdir()
    (root / "solutions" / "day7.py").write_text("THE ANSWER")
    (root / "subs" / "alice").mkdir(parents=True)
    (root / "out").mkdir()
    (root / "gradebook.db").write_text("GRADES")
    (root / "writable").mkdir()
    for path in (root, *root.rglob("*")):
        path.chmod(0o777 if path.is_dir() else 0o644)
    paths = {"solution": str(root / "solutions" / "day7.py"), "submissions": str(root / "subs"),
             "gradebook": str(root / "gradebook.db"), "out": str(root / "out"), "repo": str(REPO),
             "var_tmp": str(root / "writable")}
    yield root, paths
    shutil.rmtree(root, ignore_errors=True)


@needs_bwrap
def test_the_host_is_not_there_and_only_scratch_is_writable(scratch, tmp_path, course_files):
    root, paths = course_files
    other = make_scratch()  # another student's run
    (scratch / "home").mkdir()  # made by the grader (root) before the run: still writable inside
    try:
        result, log = _python(scratch, tmp_path / "log", PROBE, json.dumps(paths))
        assert result.status == "ok", log
        seen = _last_json(log)
        # World-readable files anywhere else on the host are simply not in the sandbox's filesystem.
        for name in ("solution", "submissions", "gradebook"):
            assert seen[name] == "FileNotFoundError", (name, seen)
        for name in ("write_out", "write_repo", "write_var_tmp", "write_tmp"):
            assert seen[name] in ("OSError", "PermissionError", "FileNotFoundError"), (name, seen)
        assert seen["write_scratch"] == seen["write_grader_made_dir"] == "written", seen
        # No other scratch dir is visible; only the Python the command needs, when it lives under /tmp itself.
        needed = {Path(sys.prefix).resolve()}
        under_tmp = {p.relative_to("/tmp").parts[0] for p in needed if Path("/tmp") in p.parents}
        assert set(seen["tmp"]) == {scratch.name} | under_tmp, seen
        assert (scratch / "answer.json").read_text() == "x"
        assert not (root / "writable" / "sandbox-was-here").exists() and not (REPO / "sandbox-was-here").exists()
    finally:
        shutil.rmtree(other, ignore_errors=True)


@needs_bwrap
def test_a_path_the_command_needs_is_bound_read_only_and_hide_covers_what_lies_inside_it(scratch, tmp_path,
                                                                                        course_files):
    root, paths = course_files
    env_root = {"PYTHONPATH": str(root)}  # the command names the folder: it is bound, read-only

    def probe(**options):
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(scratch), **env_root}
        result = run([sys.executable, "-c", PROBE, json.dumps(paths)], scratch=scratch, env=env, limits=MINUTE,
                     log_path=tmp_path / "log", **options)
        log = (tmp_path / "log").read_text(errors="replace")
        assert result.status == "ok", log
        return _last_json(log)

    seen = probe()  # the control: what the command names, it sees
    assert seen["solution"] == "THE ANSWER" and seen["submissions"] == ["alice"], seen
    assert seen["write_var_tmp"] in ("OSError", "PermissionError"), seen
    seen = probe(hide=[root / "solutions", root / "subs", root / "gradebook.db", root / "missing"])
    assert seen["solution"] == "FileNotFoundError" and seen["submissions"] == [], seen
    assert seen["gradebook"] in ("", "PermissionError"), seen  # /dev/null on a nodev mount: not even that


def test_the_grader_checkout_is_never_bound_even_when_the_environment_names_it(scratch):
    env = {"PATH": os.defpath, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO.parent)])}
    command = sandbox._bwrap_command([sys.executable, "-c", "pass"], scratch, env, (), (), 3)
    bound = {command[i + 1] for i, word in enumerate(command) if word in ("--ro-bind", "--bind")}
    assert str(REPO) not in bound and str(REPO.parent) not in bound
    assert not any(Path(path) in REPO.parents for path in bound if path != "/")
    assert "/" not in bound  # nothing binds the host's root


@needs_bwrap
def test_inside_runs_as_an_unprivileged_user(scratch, tmp_path):
    code = "import os; print(os.getuid(), os.geteuid(), os.getgid(), open('/proc/self/status').read())"
    result, log = _python(scratch, tmp_path / "log", code)
    assert result.status == "ok", log
    uid, euid, gid = (int(word) for word in log.split()[:3])
    assert uid != 0 and euid != 0 and gid != 0 and uid == scratch_folders.SANDBOX_UID
    assert "CapEff:\t0000000000000000" in log and "NoNewPrivs:\t1" in log


NETWORK = """
import json, socket, sys
result = {}
for host, port in (("1.1.1.1", 80), ("127.0.0.1", int(sys.argv[1]))):
    try:
        socket.create_connection((host, port), timeout=3).close()
        result[host] = "connected"
    except OSError as error:
        result[host] = type(error).__name__
print(json.dumps(result))
"""


@needs_bwrap
def test_no_network(scratch, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=3).close()  # the control: it accepts from outside
        result, log = _python(scratch, tmp_path / "log", NETWORK, str(port))
    assert result.status == "ok", log
    seen = _last_json(log)
    assert seen["1.1.1.1"] != "connected" and seen["127.0.0.1"] != "connected", seen


LEAVE_BEHIND = """
import os, subprocess, sys, time
subprocess.Popen(["sleep", sys.argv[1]], start_new_session=True)
if os.fork() == 0:  # a daemon: double fork and a new session
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", sys.argv[2]])
    os._exit(0)
time.sleep(0.5)
alive = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        alive += open(f"/proc/{pid}/cmdline").read().split("\\0")[1:2] in ([sys.argv[1]], [sys.argv[2]])
    except OSError:
        pass
print("left behind:", alive)
"""


@needs_bwrap
def test_nothing_started_inside_outlives_the_run(scratch, tmp_path):
    detached, daemon = _tag(), _tag()
    result, log = _python(scratch, tmp_path / "log", LEAVE_BEHIND, detached, daemon)
    assert result.status == "ok", log
    assert "left behind: 2" in log  # the control: both were running when the command ended
    assert _tagged(detached) == [] and _tagged(daemon) == []


def test_without_the_sandbox_a_detached_child_is_killed_too(scratch, tmp_path):
    code = "import subprocess, sys, time\nsubprocess.Popen(['sleep', sys.argv[1]], start_new_session=True)\n" \
           "time.sleep(0.5)"
    detached = _tag()
    result, log = _python(scratch, tmp_path / "log", code, detached, sandbox=False)
    assert result.status == "ok", log
    assert _tagged(detached) == []


@needs_bwrap
def test_killing_the_grader_kills_everything_inside(scratch, tmp_path):
    tag = _tag()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    grader = subprocess.Popen([sys.executable, str(REPO / "tests" / "sandbox_grader.py"), str(scratch),
                               str(tmp_path / "log"), tag], env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 15
        while len(_tagged(tag, inside=True)) < 2 and time.monotonic() < deadline:  # python and its detached sleep
            time.sleep(0.05)
        inside = _tagged(tag, inside=True)
        assert len(inside) == 2, (tmp_path / "log").read_text() if (tmp_path / "log").exists() else "no log"
        assert all(process.uids().real == scratch_folders.SANDBOX_UID for process in inside)
    finally:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    _, alive = psutil.wait_procs(inside, timeout=5)
    assert alive == [] and _tagged(tag) == []  # nor bwrap


@pytest.mark.parametrize("use_sandbox", [pytest.param(True, marks=needs_bwrap), False])
def test_exit_codes_and_limits_become_statuses(scratch, tmp_path, use_sandbox):
    def check(code: str, limits: Limits = MINUTE, **options):
        return _python(scratch, tmp_path / "log", code, limits=limits, sandbox=use_sandbox, **options)

    result, log = check("print('hi')")
    assert (result.status, result.returncode, log) == ("ok", 0, "hi\n")

    result, _ = check("import os; os._exit(3)")
    assert (result.status, result.returncode, result.message) == ("failed", 3, "exited with code 3")

    result, _ = check("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert result.status == "failed" and "SIGSEGV" in result.message

    result, _ = check("import time; time.sleep(30)", Limits(seconds=1))
    assert result.status == "timeout" and 1 <= result.seconds < 5, result
    assert result.message == "ran past its 1 s time limit; stopped"

    # A notebook that would take 100 GB: touched memory in a loop, stopped at the limit (not by the kernel).
    grow = "chunks = []\nwhile True:\n    chunks.append(b'x' * (64 * 2**20))"
    result, _ = check(grow, Limits(seconds=60, memory_bytes=2**30))
    assert result.status == "memory" and 2**30 < result.peak_memory_bytes < 4 * 2**30, result
    assert result.message == "used more than 1.0 GiB of memory; stopped"

    # Printed output (the log and the scratch entries named `printed`) and every other file have separate quotas.
    quotas = Limits(seconds=60, output_bytes=2**20, scratch_bytes=4 * 2**20)
    forever = "\nimport time\ntime.sleep(30)"
    for code, status in (
        ("import sys\nwhile True:\n    sys.stdout.write('x' * 4096)", "output_limit"),  # printed output
        ("with open('shown.txt', 'wb') as f:\n    while True:\n        f.write(b'x' * 4096)", "output_limit"),
        ("open('shown.txt', 'wb').write(b'x' * 2 * 2**20)\nopen('cache', 'wb').write(b'x' * 2**20)" + forever,
         "output_limit"),  # under both quotas in all, but the printed part is over its own
        ("with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 65536)", "scratch_limit"),  # one file
        ("import time\nfor i in range(100000):\n    open(f'f{i}', 'wb').write(b'x' * 50000)\n"
         "    time.sleep(0.001)", "scratch_limit"),  # many files, each under the quota
        ("for i in range(8):\n    open(f's{i}', 'wb').truncate(2**20)" + forever, "scratch_limit"),  # sparse files
    ):
        result, _ = check(code, quotas, printed=("shown.txt",))
        assert result.status == status, (code, result)
        assert result.message == {
            "output_limit": "printed more than 1.0 MiB (cell outputs, the run's log and exported answers); stopped",
            "scratch_limit": "wrote more than 4.0 MiB of files in its scratch folder (caches and temporary files); "
                             "stopped"}[status]
        for path in scratch.iterdir():
            if path.name != scratch_folders.OWNER_FILE:
                path.unlink()
    # 3 MiB of cache files and 0.5 MiB printed: each under its own quota, though their sum is over the printed one.
    result, _ = check("open('shown.txt', 'wb').write(b'x' * 2**19)\nopen('cache', 'wb').write(b'x' * 3 * 2**20)",
                      quotas, printed=("shown.txt",))
    assert result.status == "ok", result


def test_cleanup_stale_removes_only_dirs_of_dead_graders(tmp_path):
    finished = subprocess.Popen(["true"])
    finished.wait()
    dead, alive, reused = (tmp_path / f"gpu-course-run-{name}" for name in ("dead", "alive", "reused"))
    for directory, pid in ((dead, finished.pid), (alive, os.getpid()), (reused, os.getpid())):
        directory.mkdir()
        (directory / "owner.pid").write_text(f"{pid}\n")
    # Written before this process started: the pid now belongs to someone else.
    started = psutil.Process().create_time()
    os.utime(reused / "owner.pid", (started - 100, started - 100))
    unrelated = tmp_path / "other-dir"
    unrelated.mkdir()
    assert sorted(cleanup_stale(tmp_path)) == sorted([dead, reused])
    assert alive.is_dir() and unrelated.is_dir() and not dead.exists() and not reused.exists()


def test_make_scratch_records_its_owner():
    path = make_scratch()
    try:
        assert path.parent == Path(tempfile.gettempdir()).resolve() and path.name.startswith("gpu-course-run-")
        assert (path / "owner.pid").read_text().strip() == str(os.getpid())
        assert path not in cleanup_stale(path.parent)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_copy_out_takes_regular_files_and_never_follows_links(tmp_path):
    secret = tmp_path / "grader-secret.txt"
    secret.write_text("the grader's own file")
    written = tmp_path / "scratch" / "export"
    (written / "arrays").mkdir(parents=True)
    (written / "export.json").write_text("{}")
    (written / "arrays" / "0.npy").write_bytes(b"data")
    (written / "stolen.json").symlink_to(secret)
    (written / "linked-folder").symlink_to(tmp_path)
    copy_out(written, tmp_path / "out")
    copied = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*"))
    assert copied == ["arrays", "arrays/0.npy", "export.json"]


@needs_bwrap
def test_a_hidden_folder_inside_another_hidden_folder_is_fine(scratch, tmp_path):
    # Outside /tmp (all of which the sandbox's fresh tmpfs hides anyway), as an OUT folder holding the class.
    out = Path(__file__).resolve().parent.parent / "build" / f"hidden-{os.getpid()}"
    (out / "submissions").mkdir(parents=True)
    try:
        result, log = _python(scratch, tmp_path / "log", "pass", hide=[out / "submissions", out])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    assert result.status == "ok", (result.message, log)


SHARE = "import json, os\nprint(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), 'nice': os.nice(0), " \
        "'cuda': os.environ.get('CUDA_VISIBLE_DEVICES')}))"


@pytest.mark.parametrize("use_sandbox", [pytest.param(True, marks=needs_bwrap), False])
def test_a_run_gets_its_own_cpus_at_a_lower_priority_and_no_gpu(tmp_path, use_sandbox):
    """Two runs at once, one CPU each: different CPUs where the machine has two, a lower priority, and (no GPU
    asked for) CUDA_VISIBLE_DEVICES empty even where no sandbox hides the device nodes."""
    scratches = [make_scratch(), make_scratch()]
    code = SHARE + "\nimport time\ntime.sleep(1)"
    try:
        with ThreadPoolExecutor(2) as pool:
            ran = list(pool.map(lambda i: _python(scratches[i], tmp_path / f"log{i}", code, sandbox=use_sandbox,
                                                  limits=Limits(seconds=60, cpus=1)), range(2)))
    finally:
        for path in scratches:
            shutil.rmtree(path, ignore_errors=True)
    seen = []
    for result, log in ran:
        assert result.status == "ok", log
        seen.append(_last_json(log))
    assert all(len(s["cpus"]) == 1 and s["cuda"] == "" for s in seen), seen
    assert seen[0]["nice"] == seen[1]["nice"] == min(19, os.nice(0) + sandbox.SANDBOX_NICE), seen
    if len(os.sched_getaffinity(0)) >= 2:
        assert seen[0]["cpus"] != seen[1]["cpus"], seen


@needs_bwrap
def test_sandboxed_code_cannot_raise_its_priority_back(scratch, tmp_path):
    code = "import os\ntry:\n    os.nice(-1)\n    print('raised')\nexcept PermissionError:\n    print('refused')"
    result, log = _python(scratch, tmp_path / "log", code)
    assert result.status == "ok" and log.strip() == "refused", log


def test_the_cpu_pool_hands_out_disjoint_sets_while_it_can_then_shares_evenly():
    pool = cpu_pool.CpuPool([0, 1, 2, 3])
    first, second = pool.take(2), pool.take(2)
    assert sorted(first + second) == [0, 1, 2, 3]
    third = pool.take(3)  # oversubscribed: the least used CPUs first
    assert len(set(third)) == 3
    pool.give_back(first)
    assert pool.take(2) == first  # free again: the ones given back
    assert pool.take(9) == [0, 1, 2, 3]


def test_cpus_per_run_share_the_cpus_evenly_and_overlap_only_to_reach_the_floor():
    assert cpu_pool.default_cpus_per_run(4, cpus=32) == 8
    assert cpu_pool.default_cpus_per_run(20, cpus=32) == 1
    assert cpu_pool.default_cpus_per_run(20, at_least=2, cpus=32) == 2  # 12 runs and 8 builds on two GPUs
    assert cpu_pool.default_cpus_per_run(6, at_least=2, cpus=32) == 5
    assert cpu_pool.default_cpus_per_run(3, at_least=2, cpus=1) == 1  # never more CPUs than there are
