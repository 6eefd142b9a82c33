"""The one place where the grader runs untrusted student code.

``run`` starts a command under bubblewrap: new PID, network, IPC and UTS namespaces, as the
unprivileged user 65534, with the whole filesystem read-only, a fresh empty /tmp, the caller's
``hide`` paths covered by empty mounts, one scratch directory as the only writable place and, when
asked for, the device node of one GPU (``grader.gpu.gpu_nodes``). It runs at a lower scheduling priority
on a set of CPUs of its own while there are enough (``CpuPool``). A watchdog in the calling thread
polls every 0.1 s and kills the whole process tree past the wall time, memory (summed RSS), printed
output or scratch quota. Every way the command can end is a ``SandboxResult``; nothing the command
does raises here.

Printed output is what leaves the sandbox: the command's stdout and stderr (the log) and the scratch
entries the caller names in ``printed`` (for a notebook: the executed notebook, which holds every
cell's output, and the exported answers). Everything else written in scratch (HOME, TMPDIR, compiler
caches such as Triton's and inductor's) is a scratch file, deleted with the scratch directory, and has
its own, larger quota.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from grader.gpu import gpu_nodes
from grader.gpu.gpu_gate import Pausable
from grader.gpu.gpu_gate import process_tree as _tree
from grader.wall import process_table, wall_tree
from grader.wall.cpu_pool import CPUS
from grader.wall.scratch_folders import SANDBOX_UID, _as_root, _chown_tree, make_scratch
from grader.wall.usage import _resident_bytes, _written_bytes

# Tasks (processes and threads) the sandbox user may have. A Jupyter kernel with torch and Triton
# uses about 60-100 on a 16-core machine; the cap stops a fork bomb long before the machine's limit.
MAX_TASKS = 4096
# Sandboxed commands run below the grader and the judge, which times kernels. An unprivileged process cannot
# raise its priority back (RLIMIT_NICE is 0), so this holds for hostile code too.
SANDBOX_NICE = 10
_POLL_SECONDS = 0.1
_FILES_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class Limits:
    seconds: float = 1800.0  # wall clock for the whole sandboxed command
    memory_bytes: int = 8 * 2**30  # total resident memory of every process in the sandbox
    output_bytes: int = 64 * 2**20  # printed output: the stdout/stderr log + the scratch entries named `printed`
    scratch_bytes: int = 2 * 2**30  # every other file in scratch (compiler caches, temporary files)
    cpus: int | None = None  # CPUs the command may run on (a set of its own while there are enough); None: all


@dataclass
class SandboxResult:
    # "ok", "failed", "timeout", "memory", "output_limit", "scratch_limit", "error" (the sandbox could not start), or
    # the GPU gate's "gpu_hang" or "gpu_memory" (it stopped the run for what it did on its GPU)
    status: str
    returncode: int | None
    message: str
    seconds: float
    peak_memory_bytes: int


def _tool(name: str) -> str | None:
    """Absolute path from the grader's own PATH: the command's environment may have none."""
    return shutil.which(name)


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when bubblewrap can run a sandbox here; otherwise why not (e.g. 'bwrap is not installed')."""
    if _tool("bwrap") is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    if _as_root() and _tool("setpriv") is None:
        return "setpriv is not installed (it drops root to the sandbox user; apt-get install util-linux)"
    true = _tool("true")
    if true is None:
        return "no `true` command to test the sandbox with"
    scratch = make_scratch("gpu-course-probe-")
    try:
        log = scratch.parent / f"{scratch.name}.log"
        result = _run([true], scratch, {"PATH": os.defpath}, Limits(seconds=60), log, (), (), (), None, True, None)
        text = log.read_text(errors="replace").strip() if log.exists() else ""
        log.unlink(missing_ok=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result.status != "ok":
        return f"bubblewrap cannot start a sandbox here: {text[-300:] or result.message}"
    return None


# Host folders the runtime needs, read-only: programs, libraries (the GPU driver's too) and the compilers Triton runs.
# A top-level link (/bin -> usr/bin on a merged /usr) is made as the same link.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Of /etc, what the dynamic loader, the C compiler's `cc` (a Debian alternative) and the clock read. The accounts
# and hosts files come from the wall tree (grader.wall.wall_tree): the host's list of users stays outside.
ETC_PATHS = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime", "/etc/nsswitch.conf")
_OWN_CHECKOUT = Path(__file__).resolve().parents[2]


def _needed_paths(argv: Sequence[str], env: dict[str, str]) -> set[Path]:
    """Read-only paths the command needs: the Python install, the command's own prefix, the PYTHONPATH and
    LD_LIBRARY_PATH entries and the CUDA toolkit. Never the grader's checkout or a folder above it (its .git keeps
    every solution); a virtual environment inside it is bound alone."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             env.get("CUDA_HOME", ""), env.get("CUDA_PATH", "")}
    executable = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if executable is not None:
        paths |= {os.path.dirname(executable), str(Path(executable).resolve().parent.parent)}
    for variable in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        paths |= {entry for entry in env.get(variable, "").split(os.pathsep) if entry}
    found = {Path(path).resolve() for path in paths if os.path.isabs(path) and os.path.exists(path)}
    return {path for path in found if path != _OWN_CHECKOUT and path not in _OWN_CHECKOUT.parents}


def _outermost(paths: set[Path]) -> list[Path]:
    """``paths`` without those inside another of them, shallowest first."""
    ordered = sorted(paths, key=lambda p: (len(p.parts), str(p)))
    kept: list[Path] = []
    for path in ordered:
        if not any(top == path or top in path.parents for top in kept):
            kept.append(path)
    return kept


def _system_binds() -> list[str]:
    command = ["--perms", "0755", "--dir", "/etc"]
    for name in SYSTEM_PATHS:
        if os.path.islink(name):
            command += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            command += ["--ro-bind", name, name]
    for name in ETC_PATHS:
        if os.path.exists(name):
            command += ["--ro-bind", name, name]
    etc = wall_tree.tree() / "etc"
    for name in sorted(os.listdir(etc)):
        command += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    return command


def _bwrap_command(argv: Sequence[str], scratch: Path, env: dict[str, str], hide: Sequence[Path],
                   devices: Sequence[Path], status_fd: int) -> list[str]:
    """The sandbox's filesystem is an allowlist on an empty root: the system folders, the command's Python and the
    paths its environment names (the wall tree among them), the GPU's nodes, and the scratch folder, writable. The
    root, and everything but the scratch folder, is read-only."""
    command = [str(_tool("bwrap")), "--json-status-fd", str(status_fd), "--die-with-parent", "--new-session",
               "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--dev", "/dev", "--proc", "/proc", "--dir", "/tmp", *_system_binds()]
    if devices:
        command += ["--ro-bind", "/sys", "/sys"]  # the driver reads the GPU's PCI topology there
    for device in devices:
        command += ["--dev-bind", str(device), str(device)]
    bound = _outermost({path for path in _needed_paths(argv, env)
                        if not any(Path(top) == path or Path(top) in path.parents for top in SYSTEM_PATHS)})
    made: set[Path] = {Path("/"), Path("/tmp")}
    for path in bound:
        command += _parent_dirs(path, made) + ["--ro-bind", str(path), str(path)]
    for path in sorted((Path(p).resolve() for p in hide), key=lambda p: len(p.parts)):
        inside = any(top == path or top in path.parents for top in (*bound, *map(Path, SYSTEM_PATHS)))
        if not inside:
            continue  # not in the sandbox at all
        if path.is_dir():
            command += ["--tmpfs", str(path), "--remount-ro", str(path)]
        elif path.exists():
            command += ["--ro-bind", "/dev/null", str(path)]
    command += _parent_dirs(scratch, made) + ["--bind", str(scratch), str(scratch), "--remount-ro", "/",
                                              "--chdir", str(scratch)]
    if _as_root():
        # bwrap run by root keeps every capability for the command unless told; setpriv needs only these.
        command += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add",
                    "CAP_SETPCAP", "--", str(_tool("setpriv")),
                    f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--inh-caps=-all",
                    "--bounding-set=-all", "--no-new-privs", "--"]
    else:
        command += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns",
                    "--"]
    return command + list(argv)


def _parent_dirs(path: Path, made: set[Path]) -> list[str]:
    """Make the folders above ``path`` on the sandbox's root, enterable by its user (bwrap would make them 0700)."""
    command = []
    for parent in reversed(path.parents):
        if parent not in made:
            command += ["--perms", "0755", "--dir", str(parent)]
            made.add(parent)
    return command


def _cpu_share(cpus: Sequence[int] | None) -> list[str]:
    """The command prefix that runs a command on ``cpus`` (all when None) at the sandbox's priority.

    The CPU set is advice honest code follows (OpenMP and torch size their thread pools from it); a process can
    widen its own affinity again. The priority holds: an unprivileged process cannot raise it."""
    prefix = []
    if cpus is not None and (taskset := _tool("taskset")) is not None:
        prefix += [taskset, "--cpu-list", ",".join(map(str, cpus))]
    if (nice := _tool("nice")) is not None:
        prefix += [nice, "-n", str(SANDBOX_NICE)]
    return prefix


def _exited(child: subprocess.Popen[bytes]) -> bool:
    """Whether the child has exited, without reaping it: while it is unreaped, its pid (which is also the id of its
    process group and session) cannot be reused, so killing by those ids cannot hit an unrelated process."""
    try:
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _leftovers(child: subprocess.Popen[bytes], seen: dict[int, psutil.Process]) -> list[psutil.Process]:
    """Every live process of the run: the child's tree, its group and session, and every descendant ever seen
    (without the sandbox, a process that called setsid and lost its parent is found only there)."""
    found = {process.pid: process for process in (*_tree(child.pid), *seen.values())}
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if child.pid in (os.getpgid(process.pid), os.getsid(process.pid)):
                found.setdefault(process.pid, process)
    found.pop(os.getpid(), None)
    return [process for process in found.values() if _alive(process)]


def _kill_everything(child: subprocess.Popen[bytes], seen: dict[int, psutil.Process]) -> None:
    """SIGKILL every process of the run, then reap the child. In the sandbox the PID namespace dies with its init
    anyway; this also covers the run without the sandbox."""
    for _ in range(100):
        left = _leftovers(child, seen)
        if not left:
            break
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        # Not the child itself: psutil would reap it, and its pid must stay pinned until the end.
        psutil.wait_procs([process for process in left if process.pid != child.pid], timeout=0.1)
    child.wait()


def run(argv: list[str], *, scratch: Path, env: dict[str, str], limits: Limits, log_path: Path,
        hide: Sequence[Path] = (), gpu: str | None = None, printed: Sequence[str] = (),
        sandbox: bool = True, pause: Pausable | None = None) -> SandboxResult:
    """Run argv with cwd=scratch. ``gpu``: the grader's CUDA index of the one GPU the command may use (None: no GPU;
    inside, CUDA_VISIBLE_DEVICES names it by UUID). ``printed``: top-level scratch entries that count as printed
    output. sandbox=False runs it as a plain child process (the TA's explicit --no-sandbox), with the same limits
    and kill-on-exit, and the GPU chosen by CUDA_VISIBLE_DEVICES only. ``pause``: the run's handle at the GPU gate
    (``grader.gpu.gpu_gate``), which may freeze the run while a judge times; frozen seconds do not count against the
    time limit."""
    if not argv:
        raise ValueError("run() needs a command")
    if gpu is not None and not isinstance(gpu, str):
        raise TypeError(f"gpu is a CUDA index such as '0' or None (no GPU), not {gpu!r}")
    scratch = Path(scratch).resolve()
    if not scratch.is_dir():
        raise ValueError(f"scratch {scratch} is not a directory")
    if sandbox:
        reason = unavailable_reason()
        if reason is not None:
            return SandboxResult("error", None, f"the sandbox could not start: {reason}", 0.0, 0)
    devices: tuple[Path, ...] = ()
    if gpu is not None:
        try:
            if sandbox:
                given = gpu_nodes.binding(gpu_nodes.cuda_device(gpu))
                devices, visible = given.nodes, given.visible
            else:
                visible = gpu_nodes.cuda_visible(gpu)
        except gpu_nodes.GpuUnavailable as error:
            return SandboxResult("error", None, f"the sandbox could not start: GPU {gpu}: {error}", 0.0, 0)
        env = {**env, "CUDA_VISIBLE_DEVICES": visible}
    else:
        env = {**env, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, also where no sandbox hides the nodes
    cpus = CPUS.take(limits.cpus) if limits.cpus is not None else None
    try:
        return _run(argv, scratch, env, limits, Path(log_path), hide, devices, tuple(printed), cpus, sandbox, pause)
    finally:
        if cpus is not None:
            CPUS.give_back(cpus)


def _run(argv: Sequence[str], scratch: Path, env: dict[str, str], limits: Limits, log_path: Path,
         hide: Sequence[Path], devices: Sequence[Path], printed: Sequence[str], cpus: Sequence[int] | None,
         sandbox: bool, pausable: Pausable | None) -> SandboxResult:
    started = time.monotonic()

    def running() -> float:  # the seconds the run could run: frozen time does not count
        return time.monotonic() - started - (pausable.paused_seconds() if pausable is not None else 0.0)

    def result(status: str, returncode: int | None, message: str, peak: int = 0) -> SandboxResult:
        return SandboxResult(status, returncode, message, running(), peak)

    def over_quota() -> str | None:
        output, files = _written_bytes(scratch, log_path, printed)
        if output > limits.output_bytes:
            return "output_limit"
        return "scratch_limit" if files > limits.scratch_bytes else None

    status_read, status_write = os.pipe() if sandbox else (-1, -1)
    command = list(argv)
    if sandbox:
        if _as_root():
            _chown_tree(scratch)
        command = _bwrap_command(argv, scratch, env, hide, devices, status_write)
    command = _cpu_share(cpus) + command
    prlimit = _tool("prlimit")
    if prlimit is not None:
        # RLIMIT_FSIZE caps any one file: the larger quota. RLIMIT_NPROC counts every task of a real uid on the
        # machine, so it is set only where that uid is the sandbox's own (root drops to 65534 inside; root is exempt).
        nproc = [f"--nproc={MAX_TASKS}"] if sandbox and _as_root() else []
        fsize = max(limits.output_bytes, limits.scratch_bytes)
        command = [prlimit, f"--fsize={fsize}", *nproc, "--", *command]
    with open(log_path, "wb") as log:
        try:
            child = subprocess.Popen(command, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     pass_fds=(status_write,) if sandbox else ())
        except OSError as error:
            if sandbox:
                os.close(status_read)
            return result("error", None, f"could not start {command[0]}: {error}")
        finally:
            if sandbox:
                os.close(status_write)
    if pausable is not None:
        pausable.attach(child.pid)
    seen: dict[int, psutil.Process] = {}
    peak, stopped, pause, files_looked = 0, None, 0.005, -float("inf")
    try:
        while not _exited(child):
            time.sleep(pause)
            pause = min(2 * pause, _POLL_SECONDS)
            processes = process_table.tree(child.pid)
            seen.update((process.pid, process) for process in processes)
            resident = _resident_bytes(processes)
            peak = max(peak, resident)
            if running() > limits.seconds:
                stopped = "timeout"
            elif resident > limits.memory_bytes:
                stopped = "memory"
            elif time.monotonic() - files_looked >= _FILES_POLL_SECONDS:
                # Walking the scratch folder costs a stat per file; any one file is capped by RLIMIT_FSIZE anyway.
                stopped, files_looked = over_quota(), time.monotonic()
            if stopped is not None:
                break
    finally:
        _kill_everything(child, seen)
    statuses = _read_available(status_read) if sandbox else ""
    if pausable is not None and pausable.stopped is not None:  # the GPU gate stopped it (grader.gpu.gpu_gate)
        status, message = pausable.stopped
        return result(status, child.returncode, message, peak)
    if stopped is None:
        output, files = _written_bytes(scratch, log_path, printed)
        # A write cut short by RLIMIT_FSIZE (SIGXFSZ) ends at the quota exactly.
        if output >= limits.output_bytes:
            stopped = "output_limit"
        elif files >= limits.scratch_bytes:
            stopped = "scratch_limit"
    messages = {
        "timeout": f"ran past its {limits.seconds:g} s time limit; stopped",
        "memory": f"used more than {limits.memory_bytes / 2**30:.1f} GiB of memory; stopped",
        "output_limit": f"printed more than {_size(limits.output_bytes)} (cell outputs, the run's log and exported "
                        "answers); stopped",
        "scratch_limit": f"wrote more than {_size(limits.scratch_bytes)} of files in its scratch folder (caches and "
                         "temporary files); stopped",
    }
    if stopped is not None:
        return result(stopped, child.returncode, messages[stopped], peak)
    if sandbox and '"exit-code"' not in statuses:
        return result("error", child.returncode, f"the sandbox could not start: {_bwrap_error(log_path)}", peak)
    returncode = child.returncode
    if returncode == 0:
        return result("ok", 0, "finished normally", peak)
    if returncode < 0 or (sandbox and returncode > 128):
        number = -returncode if returncode < 0 else returncode - 128
        with contextlib.suppress(ValueError):
            return result("failed", returncode, f"was killed by {signal.Signals(number).name}", peak)
    return result("failed", returncode, f"exited with code {returncode}", peak)


def _size(count: int) -> str:
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.1f} MiB"


def _read_available(fd: int) -> str:
    """What bwrap wrote on its status pipe; never blocks."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def _bwrap_error(log_path: Path) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "bwrap failed"
    return next((line for line in reversed(lines) if line.startswith("bwrap:")), "bwrap failed")[:300]


def main() -> int:
    """``python -m grader.wall.sandbox``: 0 when a sandbox starts here, else 1 and why (CI runs it before the suite)."""
    reason = unavailable_reason()
    if reason is not None:
        print(f"error: the grader's sandbox cannot run on this machine: {reason}", file=sys.stderr)
        return 1
    print("the grader's sandbox runs here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
