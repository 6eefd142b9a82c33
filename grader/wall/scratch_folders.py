"""A sandboxed run's scratch folders: made under the system temp folder with their owner's pid, handed to the
sandbox's user, copied out of without following a link, and removed once the grader that made them is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import psutil

SANDBOX_UID = 65534  # nobody


OWNER_FILE = "owner.pid"


_STALE_GRACE_SECONDS = 3600.0


_TEMP_DIR = Path(tempfile.gettempdir())


def _as_root() -> bool:
    return os.geteuid() == 0


def make_scratch(prefix: str = "gpu-course-run-") -> Path:
    """mkdtemp under the system temp dir, writes owner.pid (this process's pid), made writable for the sandbox user."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    # owner.pid stays the grader's (read-only for the sandbox user); the directory becomes the sandbox's.
    (scratch / OWNER_FILE).write_text(f"{os.getpid()}\n", encoding="utf-8")
    if _as_root():
        _own_scratch(scratch)
    return scratch


def _own_scratch(scratch: Path) -> None:
    # Group root lets bwrap, which has dropped its capabilities by then, enter it for --chdir.
    os.chown(scratch, SANDBOX_UID, 0)
    os.chmod(scratch, 0o750)


def _is_stale(directory: Path) -> bool:
    owner = directory / OWNER_FILE
    try:
        info = owner.lstat()
        pid = int(owner.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        info = None
    if info is None or info.st_uid != os.geteuid():
        # Missing, unreadable or replaced by the sandboxed code: judge by age only.
        with contextlib.suppress(OSError):
            return time.time() - directory.lstat().st_mtime > _STALE_GRACE_SECONDS
        return False
    try:
        # A live process with that pid that started after owner.pid was written is a reused pid.
        return psutil.Process(pid).create_time() > info.st_mtime + 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def cleanup_stale(tmp_root: Path = _TEMP_DIR, prefix: str = "gpu-course-") -> list[Path]:
    """Delete scratch dirs named prefix* left by a grader that was killed (their owner pid, written in a file
    `owner.pid` inside, is no longer alive); return what was removed."""
    removed = []
    for directory in sorted(Path(tmp_root).glob(f"{prefix}*")):
        if directory.is_dir() and not directory.is_symlink() and _is_stale(directory):
            shutil.rmtree(directory, ignore_errors=True)
            if not directory.exists():
                removed.append(directory)
    return removed


def _chown_tree(scratch: Path) -> None:
    _own_scratch(scratch)
    for root, dirs, files in os.walk(scratch):
        for name in dirs + files:
            if Path(root, name) != scratch / OWNER_FILE:
                os.chown(Path(root, name), SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)


def copy_out(source: Path, destination: Path) -> None:
    """Copy a file or folder a sandbox wrote: regular files only, never through a link (which could
    point at the grader's own files), folders walked without following links."""
    try:
        mode = os.lstat(source).st_mode
    except OSError:
        return
    if stat.S_ISDIR(mode):
        for folder, _, files in os.walk(source, followlinks=False):
            for name in files:
                path = Path(folder) / name
                copy_out(path, destination / path.relative_to(source))
        return
    try:
        handle = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return
    with os.fdopen(handle, "rb") as data:
        if not stat.S_ISREG(os.fstat(data.fileno()).st_mode):
            return
        destination.parent.mkdir(parents=True, exist_ok=True)
        with open(destination, "wb") as copy:
            shutil.copyfileobj(data, copy)
