"""A push's grading request: the file the autograding job hands the grading service, and its validation.

The job runs the student's workflow file, so nothing in a request is trusted; everything is checked here, where
the service reads it. A request is one uncompressed tar file, written into the spool's inbox under a name starting
with a dot and renamed, once complete, to ``<repository id>-<run id>-<run attempt>.<token>``. The token (32 hex
digits the job draws) also names the outbox folder the answer goes to, so one job cannot guess another's.

Members, and nothing else:

- ``request``: ``key=value`` lines: ``format`` (1), ``repository`` (owner/name), ``repository_id``, ``run_id``,
  ``run_attempt`` (the three the file name holds), ``ref`` (``refs/heads/<branch>``), ``sha`` (the pushed
  commit) and ``deadline`` (Unix seconds: when the job stops waiting);
- ``commits``: the pushed commit and its ancestors, newest first (``git rev-list --max-count=2000 HEAD``);
- ``notebooks``: ``git ls-files -s -- 'week*/*.ipynb'`` of the pushed commit: mode, blob id, stage, path;
- ``blobs/<blob id>``: the content of each regular file listed there at a course path (``git cat-file blob``),
  checked here against its id, so a link in git (mode 120000) is never read as a notebook.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

from grader.intake.layout import MAX_NOTEBOOK_BYTES, CourseNotebook, course_notebooks, shown

FORMAT = "1"
NAME = re.compile(r"^(?P<id>(?P<repository_id>[0-9]{1,20})-(?P<run_id>[0-9]{1,20})-(?P<run_attempt>[0-9]{1,6}))"
                  r"\.(?P<token>[0-9a-f]{32})$")
MAX_REQUEST_BYTES = 256 * 2**20
MAX_COMMITS = 2000
MAX_LISTED = 1000  # lines of ``notebooks``
_REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")
_BRANCH_REF = re.compile(r"^refs/heads/[^\x00-\x1f\x7f]{1,240}$")
_OBJECT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_LISTED = re.compile(r"^(?P<mode>[0-7]{6}) (?P<blob>[0-9a-f]{40}|[0-9a-f]{64}) (?P<stage>[0-3])\t(?P<path>.+)$")
_KEYS = {"format", "repository", "repository_id", "run_id", "run_attempt", "ref", "sha", "deadline"}
_REGULAR_MODES = {"100644", "100755"}
_NOT_FILES = {"120000": "a symbolic link in git, not a notebook file (links are never followed)",
              "160000": "a submodule, not a notebook file"}


class RequestError(ValueError):
    """A request the service refuses as a whole; the message says why (it goes to the job's summary)."""


@dataclass(frozen=True)
class Notebook:
    """A course notebook of the pushed commit: its content, checked against its blob id."""

    path: str  # weekN/<name>.ipynb
    course: CourseNotebook
    blob: str
    content: bytes


@dataclass(frozen=True)
class Skipped:
    """A listed path that is not graded, and why (``path`` as a summary line can show it)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Request:
    name: str  # the inbox file's name, which is also the outbox folder's
    repository: str
    repository_id: str
    run_id: str
    run_attempt: str
    ref: str
    sha: str
    deadline: float
    commits: tuple[str, ...]
    notebooks: tuple[Notebook, ...]
    skipped: tuple[Skipped, ...]

    @property
    def branch(self) -> str:
        return self.ref.removeprefix("refs/heads/")


def valid_name(name: str) -> bool:
    return NAME.match(name) is not None


def git_blob_id(content: bytes, length: int = 40) -> str:
    """The id git gives ``content`` as a blob: SHA-1 (40 hex digits) or, in a SHA-256 repository, SHA-256 (64)."""
    digest = hashlib.sha1 if length == 40 else hashlib.sha256
    return digest(b"blob %d\0" % len(content) + content).hexdigest()


def read(path: Path, limit: int = MAX_REQUEST_BYTES) -> bytes:
    """The request file's bytes, read once: never through a link, never from anything but a regular file (a FIFO
    would block), never more than ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise RequestError(f"the request cannot be opened as a regular file ({error.strerror})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise RequestError("the request is not a regular file")
        if status.st_size > limit:
            raise RequestError(f"the request is larger than {limit // 2**20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise RequestError(f"the request is larger than {limit // 2**20} MiB")
    return data


def parse(name: str, data: bytes) -> Request:
    """The request in ``data``, checked throughout; raises RequestError for anything that does not fit."""
    named = NAME.match(name)
    if named is None:
        raise RequestError("the request's name is not <repository id>-<run id>-<run attempt>.<token>")
    members = _members(data)
    fields = _fields(members.pop("request", None))
    for key in ("repository_id", "run_id", "run_attempt"):
        if fields[key] != named[key]:
            raise RequestError(f"the request's {key} is not the one its name gives")
    commits = _commits(members.pop("commits", None), fields["sha"])
    listing = members.pop("notebooks", None)
    if listing is None:
        raise RequestError("the request has no notebook listing")
    notebooks, skipped = _notebooks(listing, members)
    if members:
        raise RequestError(f"the request holds content no listed notebook names: {_shown(sorted(members)[0])}")
    return Request(name=name, repository=fields["repository"], repository_id=fields["repository_id"],
                   run_id=fields["run_id"], run_attempt=fields["run_attempt"], ref=fields["ref"], sha=fields["sha"],
                   deadline=float(fields["deadline"]), commits=commits, notebooks=notebooks, skipped=skipped)


def _members(data: bytes) -> dict[str, bytes]:
    """The tar's regular files by name; a link, a device, an unexpected name or a repeated one refuses it."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for count, member in enumerate(archive, start=1):
                if count > MAX_LISTED + 8:
                    raise RequestError("the request holds too many files")
                name = member.name.removeprefix("./")
                if member.isdir() and name in ("", ".", "blobs"):
                    continue
                if not member.isreg():
                    raise RequestError(f"the request holds {_shown(name)}, which is not a regular file")
                blob = name.removeprefix("blobs/")
                if name not in ("request", "commits", "notebooks") and not (
                        name.startswith("blobs/") and _OBJECT.match(blob)):
                    raise RequestError(f"the request holds an unexpected file: {_shown(name)}")
                if name in found:
                    raise RequestError(f"the request holds {_shown(name)} twice")
                stream = archive.extractfile(member)
                found[name] = stream.read() if stream else b""
    except (tarfile.TarError, EOFError) as error:
        raise RequestError(f"the request is not a readable tar file ({error})") from None
    return found


def _fields(raw: bytes | None) -> dict[str, str]:
    if raw is None:
        raise RequestError("the request has no request file")
    fields: dict[str, str] = {}
    for line in _lines(raw, "request"):
        key, sep, value = line.partition("=")
        if not sep or key not in _KEYS or key in fields:
            raise RequestError(f"the request file has an unexpected line: {_shown(line)}")
        fields[key] = value
    if set(fields) != _KEYS:
        raise RequestError(f"the request file lacks {', '.join(sorted(_KEYS - set(fields)))}")
    if fields["format"] != FORMAT:
        raise RequestError(f"the request's format is {_shown(fields['format'])}, not {FORMAT}")
    checks = {"repository": _REPOSITORY, "ref": _BRANCH_REF, "sha": _OBJECT,
              "repository_id": re.compile(r"^[0-9]{1,20}$"), "run_id": re.compile(r"^[0-9]{1,20}$"),
              "run_attempt": re.compile(r"^[0-9]{1,6}$"), "deadline": re.compile(r"^[0-9]{1,12}(\.[0-9]{1,6})?$")}
    for key, pattern in checks.items():
        if not pattern.match(fields[key]):
            raise RequestError(f"the request's {key} is not valid: {_shown(fields[key])}")
    return fields


def _commits(raw: bytes | None, sha: str) -> tuple[str, ...]:
    commits = tuple(_lines(raw or b"", "commits"))
    if not commits or commits[0] != sha:
        raise RequestError("the request's history does not start at the pushed commit")
    if len(commits) > MAX_COMMITS or not all(_OBJECT.match(c) and len(c) == len(sha) for c in commits):
        raise RequestError(f"the request's history is not at most {MAX_COMMITS} commit ids")
    return commits


def _notebooks(raw: bytes, blobs: dict[str, bytes]) -> tuple[tuple[Notebook, ...], tuple[Skipped, ...]]:
    """The course notebooks listed, each with its checked content, and every other listed path with why it is not
    graded. The blobs used are taken out of ``blobs``."""
    by_path = {f"{nb.assignment}/{nb.name}.ipynb": nb for nb in course_notebooks()}
    notebooks: list[Notebook] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    used: set[str] = set()
    lines = _lines(raw, "notebooks")
    if len(lines) > MAX_LISTED:
        raise RequestError(f"the request lists more than {MAX_LISTED} files")
    for line in lines:
        listed = _LISTED.match(line)
        if listed is None:
            raise RequestError(f"the notebook listing has an unexpected line: {_shown(line)}")
        mode, blob, path = listed["mode"], listed["blob"], listed["path"]
        if path in seen:
            raise RequestError(f"the notebook listing names {_shown(path)} twice")
        seen.add(path)
        course = by_path.get(path)
        if course is None:
            skipped.append(Skipped(printable(path), "not a course notebook (the course's are weekN/<name>.ipynb, "
                                                 "named as released)"))
        elif mode not in _REGULAR_MODES:
            skipped.append(Skipped(path, _NOT_FILES.get(mode, f"not a regular file (git mode {mode})")))
        elif listed["stage"] != "0":
            skipped.append(Skipped(path, "an unmerged file (a merge conflict)"))
        elif f"blobs/{blob}" not in blobs:
            skipped.append(Skipped(path, f"its content was not sent (larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB?)"))
        else:
            content = blobs[f"blobs/{blob}"]
            used.add(f"blobs/{blob}")
            if git_blob_id(content, len(blob)) != blob:
                raise RequestError(f"the content sent for {path} is not blob {blob}")
            if len(content) > MAX_NOTEBOOK_BYTES:
                skipped.append(Skipped(path, f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB"))
            else:
                notebooks.append(Notebook(path, course, blob, content))
    for key in used:
        del blobs[key]
    return tuple(sorted(notebooks, key=lambda n: n.path)), tuple(skipped)


def _lines(raw: bytes, what: str) -> list[str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError(f"the request's {what} file is not UTF-8") from None
    return [line for line in text.split("\n") if line]


def printable(text: str, limit: int = 120) -> str:
    """Text from a request as a summary line can show it: printable, no backquotes, not too long."""
    text = "".join(c if c.isprintable() and c != "`" else "?" for c in shown(text))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _shown(text: str) -> str:
    return f"`{printable(text)}`"
