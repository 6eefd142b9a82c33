"""One grader per output folder: ``OUT/.grader.lock``, held for the grader's whole life.

``held(out)`` takes an exclusive ``flock`` on the file and writes in it who holds it (pid, host, since when, the
command), which a second grader finding it held names in its refusal (``OutBusy``). The kernel drops a flock when
its holder dies, however it dies (SIGKILL included), so a dead grader's lock is no lock; the record a killed grader
leaves is replaced, saying so. A clean release empties the record (the file stays: removing it would let a grader
waiting on the old file and one creating a new file both hold "the" lock).

What is relied on: on a local filesystem, flock alone. On NFS, Linux turns flock into a POSIX lock the server keeps
(NFSv4, or NFSv3 with lockd), which holds across hosts; but mounts with ``nolock`` or ``local_lock``, Lustre's
``localflock``, BeeGFS without global locks and the like keep it within one host, and some refuse it (then only the
record is used). So the record counts too: its grader refreshes the file's time every ``REFRESH_SECONDS``, and a
record of another host refreshed within ``STALE_SECONDS`` refuses as a held lock does. A record of this host whose
pid is gone (or reused since), or of another host no longer refreshed, is a dead grader's: cleared.

The same process taking it again (the command, then ``pipeline.grade`` within it) counts it, never takes it twice: a
second flock of one process on a new open file would wait for itself.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil

LOCK_NAME = ".grader.lock"
REFRESH_SECONDS = 30.0
STALE_SECONDS = 180.0  # a record of another host not refreshed for this long is a dead grader's
WAIT_SECONDS = 2.0  # between tries, with --wait
_STARTING_SECONDS = 1.0  # a new holder writes its record just after taking the flock: read it again meanwhile


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lock, as its record says."""

    pid: int
    host: str
    since: float  # seconds since the epoch
    command: str
    refreshed: float  # the lock file's modification time

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"pid {self.pid} on {self.host}, since {when}" + (f" ({self.command})" if self.command else "")

    def gone(self) -> bool:
        """Known to have ended: this host's pid is gone or names a later process; another host's record is no
        longer refreshed."""
        if self.host != socket.gethostname():
            return time.time() - self.refreshed > STALE_SECONDS
        try:
            return psutil.Process(self.pid).create_time() > self.since + 1.0
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False


class OutBusy(RuntimeError):
    """Another grader holds OUT; the message names it."""

    def __init__(self, out: Path, holder: Holder | None, why: str = "") -> None:
        self.holder = holder
        who = holder.describe() if holder is not None else "one that has not written its name yet"
        stop = f" or stop it (`kill {holder.pid}` on {holder.host}: what it finished is kept)" if holder else ""
        super().__init__(f"another grader is grading {out}: {who}{why}. One grader per output folder: wait for "
                         f"it to end (`grade --wait` waits for it){stop}")


@dataclass
class _Lock:
    fd: int
    locked: bool  # False where this filesystem refuses flock: the record alone holds it
    count: int = 1
    stop: threading.Event = field(default_factory=threading.Event)


_held: dict[Path, _Lock] = {}
_registry = threading.Lock()


@contextlib.contextmanager
def held(out: Path, *, wait: bool = False, log: Callable[[str], None] = print) -> Iterator[None]:
    """Hold OUT's lock within; ``OutBusy`` at once where another grader holds it (``wait``: wait for it, saying
    so once)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out.resolve() / LOCK_NAME
    with _registry:
        mine = _held.get(path)
        if mine is not None:
            mine.count += 1
    if mine is None:
        mine = _take(path, out, wait, log)
        with _registry:
            _held[path] = mine
    try:
        yield
    finally:
        with _registry:
            mine.count -= 1
            last = mine.count == 0
            if last:
                del _held[path]
        if last:
            _release(mine)


def busy(out: Path) -> Holder | None:
    """The other grader holding OUT's lock now, or None where none does (nothing is taken)."""
    path = out.resolve() / LOCK_NAME
    with _registry:
        if path in _held:
            return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        locked = _flock(fd)
        holder = _read(fd)
        if locked is False:
            return holder or Holder(0, "?", time.time(), "", time.time())
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return holder if holder is not None and _counts(holder, bool(locked)) else None
    finally:
        os.close(fd)


def _take(path: Path, out: Path, wait: bool, log: Callable[[str], None]) -> _Lock:
    said = False
    while True:
        try:
            return _try(path, out, log)
        except OutBusy as refused:
            if not wait:
                raise
            if not said:
                log(f"waiting: {refused.args[0].split('. One grader')[0]}")
                said = True
        time.sleep(WAIT_SECONDS)


def _try(path: Path, out: Path, log: Callable[[str], None]) -> _Lock:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        locked = _flock(fd)
        holder = _read(fd)
        deadline = time.monotonic() + _STARTING_SECONDS
        while locked is False and (holder is None or holder.gone()) and time.monotonic() < deadline:
            time.sleep(0.05)  # a grader that has just taken it and not yet written its record
            holder = _read(fd)
        if locked is False:
            raise OutBusy(out, holder)
        if holder is not None and _counts(holder, bool(locked)):
            age = time.time() - holder.refreshed
            raise OutBusy(out, holder, f" (its lock file was refreshed {age:.0f} s ago, as a running grader does; "
                                       f"one that is gone is cleared after {STALE_SECONDS:.0f} s)"
                          if holder.host != socket.gethostname() else "")
        if holder is not None:
            log(f"note: {out} was locked by a grader that is gone ({holder.describe()}): cleared")
        _write(fd)
        if locked is None:  # no flock here: two graders starting at once both wrote; the later record stands
            time.sleep(0.2)
            holder = _read(fd)
            if holder is None or (holder.pid, holder.host) != (os.getpid(), socket.gethostname()):
                raise OutBusy(out, holder)
            log(f"note: {out}'s filesystem refuses flock: one grader per folder rests on its lock record alone")
    except BaseException:
        os.close(fd)  # which drops the flock
        raise
    mine = _Lock(fd, bool(locked))
    threading.Thread(target=_refresh, args=(mine,), name="out-lock", daemon=True).start()
    return mine


def _counts(holder: Holder, locked: bool) -> bool:
    """Whether a record found beside a free (or unsupported) flock still holds OUT: this host's flock is the
    answer where it works, but another host's grader may hold a flock this host cannot see."""
    if holder.pid == os.getpid() and holder.host == socket.gethostname():
        return False
    if locked and holder.host == socket.gethostname():
        return False
    return not holder.gone()


def _flock(fd: int) -> bool | None:
    """True: taken; False: another holds it; None: this filesystem refuses flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as error:
        if error.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            return None
        raise
    return True


def _read(fd: int) -> Holder | None:
    """The record in the lock file; None when it is empty (free) or unreadable."""
    try:
        fields = dict(line.split(": ", 1) for line in os.pread(fd, 65536, 0).decode().splitlines() if ": " in line)
        return Holder(int(fields["pid"]), fields["host"], datetime.fromisoformat(fields["since"]).timestamp(),
                      fields.get("command", ""), os.fstat(fd).st_mtime)
    except (OSError, ValueError, KeyError):
        return None


def _write(fd: int) -> None:
    run_as_module = sys.argv[0].endswith(os.path.join("grader", "__main__.py"))
    command = shlex.join(["python", "-m", "grader", *sys.argv[1:]] if run_as_module else sys.argv)
    command = command.replace("\n", " ")[:300]
    record = (f"pid: {os.getpid()}\nhost: {socket.gethostname()}\nsince: {datetime.now(UTC).isoformat()}\n"
              f"command: {command}\n")
    os.ftruncate(fd, 0)
    os.pwrite(fd, record.encode(), 0)
    os.fsync(fd)


def _refresh(mine: _Lock) -> None:
    while not mine.stop.wait(REFRESH_SECONDS):
        with contextlib.suppress(OSError):
            os.utime(mine.fd)


def _release(mine: _Lock) -> None:
    mine.stop.set()
    with contextlib.suppress(OSError):
        os.ftruncate(mine.fd, 0)  # empty while still held: whoever takes it next finds no record to clear
        if mine.locked:
            fcntl.flock(mine.fd, fcntl.LOCK_UN)
    os.close(mine.fd)
