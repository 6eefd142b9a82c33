"""Compile the builder's TTGIR to GPU binaries in the judge's Triton cache, before the judge starts.

The sandboxed builder (``grader.kernel_build.build_kernels``) stops at TTGIR. ``compile_built`` runs Triton's compiler
on those files for the grading GPU's target, in ``python -P -m grader.kernel_build.compile_ttgir REQUEST.json``, a
process of the grader's own without a GPU (``CUDA_VISIBLE_DEVICES=""``), writing into the Triton cache
the judge is started with. The judge (``grader.replay.gpu_replay.load_kernels``) then compiles the same text for the
same target with the same options: a cache hit, so it only loads and launches while it holds the GPU.
Triton's cache key (``triton.compiler.compiler.compile``, ``get_cache_key``) is Triton's own hash, the
IR text's (not its path), ptxas's version with the arch, the options (from the TTGIR: warps and CTAs;
the rest defaults and TRITON_* knobs) and Triton's cache-invalidating environment variables: all equal
here and in the judge, which both take the grader's environment (CUDA_VISIBLE_DEVICES differs and the
judge sets TRITON_INTERPRET, neither of them in the key). The cache's groups name absolute paths: the
judge must use the same folder.

Why outside the sandbox: the input is IR text, each file checked against its index entry's digest
(``grader.kernel_build.built_index.built_ttgir``, in the grader before the process starts), and nothing of the
notebook's
Python exists here: the only code that
runs is Triton's compiler and the grader's, exactly what the judge ran on the same files before (it
compiled them itself), and the cache it fills is the judge's own. Why a process of its own: a compiler
that aborts on a file ends that process, not the grader; the kernel it was compiling gets an error and
the others are compiled in a new process. Why no GPU: it never needs one, and it must not use (or wait
for) a GPU that a judge is timing on.

A kernel the compiler refuses gets its message in ``COMPILED`` (``compiled.json`` in the built folder),
where the judge reports it as it reports its own compile errors, instead of compiling it again. CUDA C
entries of the index are already binaries and are left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from grader.intake.layout import REPO
from grader.kernel_build.built_index import COMPILED, built_ttgir, compile_error
from grader.run.execute import Outcome
from grader.score import results
from grader.wall.sandbox import SANDBOX_NICE


def _intact(built: Path) -> dict[str, dict[str, str]]:
    """Launch key -> {"file", "kernel"} of each Triton entry of the index whose file matches its digest (CUDA C
    modules are already binaries; a changed file is the judge's to refuse, saying so)."""
    index_file = built / "index.json"
    index = json.loads(index_file.read_text(encoding="utf-8")) if index_file.is_file() else {}
    found = {}
    for key, entry in index.items():
        if not isinstance(entry, dict) or "error" in entry or entry.get("cuda"):
            continue
        try:
            built_ttgir(built, entry)
        except ValueError:
            continue
        found[str(key)] = {"file": str(built / Path(str(entry["file"])).name), "kernel": str(entry.get("kernel"))}
    return found


def _compile_one(file: str, kernel: str, target: Any) -> str | None:
    """Compile one TTGIR file into the cache, as the judge calls the compiler; its error message or None."""
    from course.compiler import compile_triton

    try:
        compile_triton(file, target)
    except Exception as error:  # a TTGIR the compiler refuses is the kernel's error, not the grader's
        return compile_error(kernel, error)
    return None


def compile_all(request: dict[str, Any]) -> None:
    """The child's side: compile each of the request's kernels not yet in the progress file, recording each one's
    outcome there before the next starts (``"compiling"`` names the one in hand, should the compiler abort on it).
    It imports Triton and ``course.compiler`` alone (no PyTorch): the files were checked already."""
    from triton.backends.compiler import GPUTarget

    progress_file = Path(request["progress"])
    progress = json.loads(progress_file.read_text(encoding="utf-8"))
    target = GPUTarget(**request["target"])
    for key, kernel in request["kernels"].items():
        if key not in progress["done"]:
            results.write_json_atomic(progress_file, {**progress, "compiling": key})
            progress["done"][key] = _compile_one(kernel["file"], kernel["kernel"], target)
            results.write_json_atomic(progress_file, {**progress, "compiling": None})


def _run(argv: list[str], env: dict[str, str], cwd: Path, log: Path, seconds: float) -> int | None:
    """Run argv in a process group of its own; its exit code, or None when it ran past ``seconds`` (then the whole
    group is killed: the compiler's own ptxas included)."""
    # Below the judges' priority, as the sandboxed stages: a judge timing on its GPU must get its CPU at once.
    nice = [tool, "-n", str(SANDBOX_NICE)] if (tool := shutil.which("nice")) else []
    with open(log, "ab") as out:
        child = subprocess.Popen([*nice, *argv], env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            return child.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            return None


def compile_built(built: Path, target: dict[str, Any], cache: Path, log: Path, timeout: float) -> Outcome:
    """Compile the built folder's TTGIR files for ``target`` into the Triton cache ``cache`` (the judge's), in
    processes of their own without a GPU, within ``timeout`` seconds in all; per-kernel errors go to ``COMPILED``.

    Status OK, or GRADER_ERROR where the stage itself failed (the judge still compiles whatever is not cached)."""
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-compile-"))
    progress_file = scratch / "progress.json"
    request = scratch / "request.json"
    # As flow.task.grader_environment (not imported: the build stage imports this module). Only the binary and its
    # metadata are kept of the later stages (not LLVM IR nor PTX: 60% of a kernel's files), all the judge reads.
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "CUDA_VISIBLE_DEVICES": "", "TRITON_STORE_BINARY_ONLY": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    argv = [sys.executable, "-P", "-m", "grader.kernel_build.compile_ttgir", str(request)]
    problem = ""
    record = built / COMPILED
    try:
        if record.is_dir() and not record.is_symlink():
            shutil.rmtree(record)  # whatever the sandboxed builder left under this name is not the stage's record
        record.unlink(missing_ok=True)
        log.write_bytes(b"")
        results.write_json_atomic(progress_file, {"done": {}, "compiling": None})
        kernels = _intact(built)
        request.write_text(json.dumps({"kernels": kernels, "target": target, "progress": str(progress_file)}),
                           encoding="utf-8")
        cache.mkdir(parents=True, exist_ok=True)
        while not problem:
            code = _run(argv, env, scratch, log, timeout - (time.perf_counter() - started))
            progress = results.read_json(progress_file)
            aborted = progress.get("compiling")
            if code is None:
                problem = f"compiling the kernels ran past its {timeout:g} s limit"
            elif code == 0:
                break
            elif aborted is None:  # it died outside any kernel's compile: nothing to blame on a kernel
                problem = f"the kernel compiler ended with exit code {code}"
            else:  # the compiler aborted on this kernel: its error, and a new process for the others
                progress["done"][aborted] = compile_error(kernels[aborted]["kernel"],
                                                          f"the compiler stopped (exit code {code})")
                results.write_json_atomic(progress_file, {**progress, "compiling": None})
        errors = {key: message for key, message in results.read_json(progress_file)["done"].items() if message}
        results.write_json_atomic(record, {"target": target, "errors": errors})
    except (OSError, ValueError, KeyError) as error:
        problem = f"the kernel compile stage failed: {type(error).__name__}: {error}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    timings = {"compile": time.perf_counter() - started}
    if problem:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n{problem}\n")
    return Outcome(results.GRADER_ERROR, problem, timings) if problem else Outcome(results.OK, "", timings)


def main(argv: list[str]) -> int:
    compile_all(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
