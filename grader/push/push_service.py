"""The push autograder's grading service: it grades what autograding jobs hand it, as the course's own account.

An autograding job runs the workflow file of a student's repository, so it is untrusted: it never runs the
course's Python and cannot read the course checkout. It drops one request (``grader/push/push_request.py``) into the
spool's inbox; this service, running as the course account from the course checkout (``python -P -m grader
serve-pushes SPOOL``), takes each request, checks it again, grades the course notebooks that differ from the
last graded version of that branch (``grader/push/push_state.py``) under the student's name from the course's roster
(``grader/push/push_roster.py``), and answers in the request's outbox folder, which the job reads:

    SPOOL/inbox/             the runner's group may create entries, not list them (mode 1730)
    SPOOL/outbox/<name>/     summary.md, index.html, feedback/, and status (the exit code the job ends with);
                             the folder appears whole (renamed into place), status in it
    SPOOL/work/<name>/       the grading's own folder (results, logs), the course account's alone
    STATE (default SPOOL/state)  what was last graded on each branch, the course account's alone

Requests are graded one at a time, oldest first. Outbox and work folders are removed after ``keep_days``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grader.push import push_request, push_roster, push_state, pushed
from grader.push.push_request import Request, RequestError

if TYPE_CHECKING:
    from grader.flow.settings import Settings

INBOX_MODE = 0o1730
OUTBOX_MODE = 0o710
PRIVATE_MODE = 0o700
ANSWER_DIR_MODE, ANSWER_FILE_MODE = 0o750, 0o640
STALE_TEMPORARY_SECONDS = 24 * 3600  # a job's half-written request left in the inbox


class SpoolError(RuntimeError):
    """The spool cannot be served safely (wrong owner or modes, another service already serving it)."""


@dataclass
class Service:
    spool: Path
    roster: Path
    state: Path
    settings: Settings | None  # None: nothing can be graded here (``unavailable`` says why)
    unavailable: str = ""
    keep_days: float = 7.0
    log: Callable[[str], None] = print
    _stuck: set[str] = field(default_factory=set)  # inbox entries this account cannot remove: skipped

    @property
    def inbox(self) -> Path:
        return self.spool / "inbox"

    @property
    def outbox(self) -> Path:
        return self.spool / "outbox"

    @property
    def work(self) -> Path:
        return self.spool / "work"


def prepare(spool: Path, state: Path) -> None:
    """The spool's folders, made or set to their modes; the spool itself must be this account's and writable by
    no one else (its group, the runner's, only passes through it)."""
    try:
        info = os.lstat(spool)
    except FileNotFoundError:
        raise SpoolError(f"{spool} does not exist: make it as the docs say (docs/AUTOGRADING.md)") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise SpoolError(f"{spool} must be a folder owned by this account and writable by it alone "
                         f"(mode {stat.filemode(info.st_mode)})")
    for path, mode in ((spool / "inbox", INBOX_MODE), (spool / "outbox", OUTBOX_MODE), (spool / "work", PRIVATE_MODE),
                       (state, PRIVATE_MODE)):
        path.mkdir(exist_ok=True)
        if path.is_symlink() or os.lstat(path).st_uid != os.getuid():
            raise SpoolError(f"{path} must be a folder owned by this account")
        # chmod drops a set-group-id bit the folder inherited: keep it, so answers stay in the spool's group
        path.chmod(mode | (os.lstat(path).st_mode & stat.S_ISGID))


@contextlib.contextmanager
def serving(state: Path) -> Iterator[None]:
    """One service at a time per state folder (two would grade one branch twice and race on its record)."""
    with open(state / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SpoolError(f"another grading service is serving {state}") from None
        yield


def serve(service: Service, once: bool = False, poll_seconds: float = 5.0) -> int:
    """Answer every request in the inbox, oldest first; with ``once``, those queued now, then return. 0, or 2
    where nothing can be graded here (each request is answered with why first)."""
    prepare(service.spool, service.state)
    with serving(service.state):
        if not os.stat(service.spool).st_mode & stat.S_ISGID:
            service.log(f"note: {service.spool} has no set-group-id bit, so answers belong to this account's own "
                        "group: the runner's account can read them only if it is in that group")
        if service.unavailable:
            service.log(f"error: {service.unavailable}; every request is answered with it")
        while True:
            for name in pending(service):
                handle(service, name)
            clean(service)
            if once or service.unavailable:
                return 2 if service.unavailable else 0
            time.sleep(poll_seconds)


def pending(service: Service) -> list[str]:
    """The inbox's complete requests, oldest first; a job's temporary file left for a day is removed."""
    found = []
    for entry in os.scandir(service.inbox):
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if entry.name in service._stuck:
            continue
        if entry.name.startswith("."):
            if time.time() - info.st_mtime > STALE_TEMPORARY_SECONDS:
                _discard(service, Path(entry.path))
        elif push_request.valid_name(entry.name):
            found.append((info.st_mtime, entry.name))
        else:
            _discard(service, Path(entry.path))
    return [name for _, name in sorted(found)]


def handle(service: Service, name: str) -> int:
    """Take request ``name`` out of the inbox, grade it, answer it; returns the status answered."""
    path = service.inbox / name
    try:
        data = push_request.read(path)
    except RequestError as error:
        _discard(service, path)
        return answer(service, name, 2, _refused(str(error)))
    path.unlink(missing_ok=True)
    try:
        request = push_request.parse(name, data)
    except RequestError as error:
        return answer(service, name, 2, _refused(str(error)))
    service.log(f"{name}: {request.repository} {request.ref} {request.sha[:12]}, "
                f"{len(request.notebooks)} course notebook(s)")
    if time.time() > request.deadline:
        return answer(service, name, 2, _refused("the job had stopped waiting before the service reached it; "
                                                 "nothing was graded or recorded"))
    if service.unavailable or service.settings is None:
        return answer(service, name, 2, _refused(f"{service.unavailable}: nothing was graded"))
    try:
        roster = push_roster.load(service.roster)
    except push_roster.RosterError as error:
        service.log(f"error: {error}")
        return answer(service, name, 2, _refused("the course's roster cannot be read (the course staff are told "
                                                 "in the service's log): nothing was graded"))
    student = roster.get(request.repository.casefold())
    if student is None:
        return answer(service, name, 2, _refused(
            f"the repository `{request.repository}` is not on the course's roster of student repositories: nothing "
            "was graded. If it is yours, ask the course staff to add it."))
    try:
        return _grade(service, request, student)
    except Exception as error:  # the grader's fault, never the student's: say so and record nothing
        service.log(f"{name}: the grading failed:\n{traceback.format_exc()}")
        return answer(service, name, 2, _refused(
            f"the grading service failed ({type(error).__name__}: {push_request.printable(str(error), 200)}); "
            "nothing was recorded, so the next run grades these notebooks again"))


def _grade(service: Service, request: Request, student: str) -> int:
    assert service.settings is not None
    state = push_state.load(service.state, request.repository, request.ref)
    chosen = push_state.changed(state, request.notebooks)
    notes = [f"Graded as `{student}`: repository `{request.repository}`, branch "
             f"`{push_request.printable(request.branch)}`, commit `{request.sha[:7]}`."]
    if note := push_state.history_note(state, request):
        notes.append(f"**{note}**")
    elif not state.commit:
        notes.append("Nothing of this branch was graded before: every course notebook in it is graded.")
    out = service.work / request.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    results = []
    if chosen:
        settings = _hiding(service.settings, service)
        results = pushed.grade_notebooks([(n.course, n.content) for n in chosen], student, out, settings,
                                         log=lambda line: service.log(f"{request.name}: {line}"))
    push_state.save(service.state, request.repository, request.ref,
                    push_state.recorded(state, request, pushed.graded_to_a_result(results)))
    graded_now = {n.path for n in chosen}
    unchanged = [n.path for n in request.notebooks if n.path not in graded_now]
    summary = pushed.summary_markdown(
        results, service.settings.device_name, notes=notes, unchanged=unchanged,
        skipped=[(s.path, s.reason) for s in request.skipped],
        nothing="No course notebook differs from the version last graded on this branch: nothing was graded.")
    for result in results:
        service.log(f"{request.name}: {result.assignment}/{result.notebook}: {result.status}")
    return answer(service, request.name, 1 if pushed.not_graded_normally(results) else 0, summary, pages=out)


def _hiding(settings: Settings, service: Service) -> Settings:
    """The settings, with the spool, the state and the roster hidden from every sandboxed run."""
    from dataclasses import replace

    hidden = (str(service.spool.resolve()), str(service.state.resolve()), str(service.roster.resolve()))
    return replace(settings, hide=(*settings.hide, *hidden))


def _refused(why: str) -> str:
    return f"## Autograder\n\nNot graded: {why}\n\n{pushed.FEEDBACK_NOTE}\n"


def answer(service: Service, name: str, status: int, summary: str, pages: Path | None = None) -> int:
    """Write the request's outbox folder whole, then rename it into place: the job sees all of it or none."""
    service.log(f"{name}: answered {status}" + ("" if status == 0 else f": {' '.join(summary.split())[:300]}"))
    final = service.outbox / name
    temporary = service.outbox / f".{name}.tmp"
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    (temporary / "summary.md").write_text(summary, encoding="utf-8")
    if pages is not None and (pages / "index.html").is_file():
        shutil.copy2(pages / "index.html", temporary / "index.html")
        shutil.copytree(pages / "feedback", temporary / "feedback",
                        ignore=shutil.ignore_patterns(".*"), dirs_exist_ok=True)
    (temporary / "status").write_text(f"{status}\n", encoding="utf-8")
    for folder, _, files in os.walk(temporary):
        os.chmod(folder, ANSWER_DIR_MODE)
        for file in files:
            os.chmod(os.path.join(folder, file), ANSWER_FILE_MODE)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(temporary, final)
    return status


def clean(service: Service) -> None:
    """Outbox and work folders older than ``keep_days`` go."""
    horizon = time.time() - service.keep_days * 86400
    for folder in (service.outbox, service.work):
        for entry in os.scandir(folder):
            if entry.stat(follow_symlinks=False).st_mtime < horizon:
                shutil.rmtree(entry.path, ignore_errors=True)


def _discard(service: Service, path: Path) -> None:
    """Remove something that is not a request. A folder the runner made and filled cannot be emptied by this
    account; it is named in the log once, for the course staff to remove, and skipped from then on."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as error:
        service._stuck.add(path.name)
        service.log(f"cannot remove {path} from the inbox ({error.strerror}): remove it by hand")
