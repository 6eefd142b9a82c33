"""The push autograder's service, piece by piece: a request is checked throughout (grader/push/push_request.py), the
branch's record decides what is graded (grader/push/push_state.py), the roster names the student
(grader/push/push_roster.py) and the service answers what it refuses without grading (grader/push/push_service.py).
The workflow's own steps against the service: tests/test_workflows.py."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import time
from pathlib import Path

import pytest

from grader.push import push_request, push_roster, push_service, push_state
from grader.push.push_request import RequestError, git_blob_id

REPO = Path(__file__).resolve().parent.parent
W1D1 = "week1/day1_host_baseline.ipynb"
DAY4 = "week1/day4_first_triton_kernel.ipynb"
SHA, OLD = "a" * 40, "b" * 40
NAME = "4242-7-1." + "0123456789abcdef" * 2


def _fields(**changes: str) -> dict[str, str]:
    return {"format": "1", "repository": "classroom/alice-repo", "repository_id": "4242", "run_id": "7",
            "run_attempt": "1", "ref": "refs/heads/main", "sha": SHA, "deadline": str(int(time.time()) + 600),
            **changes}


def _tar(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return data.getvalue()


def _request(notebooks: dict[str, bytes] | None = None, listing: list[str] | None = None,
             fields: dict[str, str] | None = None, commits: list[str] | None = None,
             extra: dict[str, bytes] | None = None) -> bytes:
    """A request as the job writes it: each of ``notebooks`` listed as a regular file with its blob, then the
    ``listing`` lines as given."""
    notebooks = {W1D1: b"{}"} if notebooks is None else notebooks
    blobs = {path: git_blob_id(content) for path, content in notebooks.items()}
    lines = [f"100644 {blob} 0\t{path}" for path, blob in blobs.items()] + (listing or [])
    files = {"request": "".join(f"{k}={v}\n" for k, v in (fields or _fields()).items()).encode(),
             "commits": "\n".join(commits or [SHA, OLD]).encode() + b"\n",
             "notebooks": "\n".join(lines).encode() + b"\n",
             **{f"blobs/{blobs[path]}": content for path, content in notebooks.items()}, **(extra or {})}
    return _tar(files)


def test_a_request_as_the_job_writes_it_is_read_whole():
    request = push_request.parse(NAME, _request({W1D1: b"{}", DAY4: b"[]"}))
    assert (request.repository, request.branch, request.sha, request.commits) == (
        "classroom/alice-repo", "main", SHA, (SHA, OLD))
    assert [(n.path, n.course.key, n.content) for n in request.notebooks] == [
        (W1D1, "week1/day1_host_baseline", b"{}"), (DAY4, "week1/day4_first_triton_kernel", b"[]")]
    assert request.skipped == ()


def test_paths_that_are_no_course_notebook_files_are_listed_with_why_and_never_read():
    listing = [f"120000 {'c' * 40} 0\t{DAY4}", f"160000 {'d' * 40} 0\tweek1/day5_memory.ipynb",
               f"100644 {'e' * 40} 0\tweek1/scratch.ipynb", f"100644 {'f' * 40} 0\tweek1/day6_tiling.ipynb"]
    request = push_request.parse(NAME, _request(listing=listing))
    assert [n.path for n in request.notebooks] == [W1D1]
    assert {s.path: s.reason.split(" (")[0] for s in request.skipped} == {
        DAY4: "a symbolic link in git, not a notebook file",
        "week1/day5_memory.ipynb": "a submodule, not a notebook file", "week1/scratch.ipynb": "not a course notebook",
        "week1/day6_tiling.ipynb": "its content was not sent"}


@pytest.mark.parametrize("case, data, message", [
    ("an empty request file", _tar({"request": b"", "notebooks": f"100644 {'c' * 40} 0\t{W1D1}\n".encode(),
                                           f"blobs/{'c' * 40}": b"{}"}), "the request file lacks"),
    ("a link in the tar", _tar({}, {"request": "/work/main/solutions/week1/day1_host_baseline.ipynb"}),
     "not a regular file"),
    ("an unexpected file", _request(extra={"course/check.py": b"x"}), "unexpected file: `course/check.py`"),
    ("a blob no path names", _request(extra={f"blobs/{'c' * 40}": b"x"}), "content no listed notebook names"),
    ("another repository id", _request(fields=_fields(repository_id="1")), "repository_id is not the one its name"),
    ("a tag", _request(fields=_fields(ref="refs/tags/v1")), "ref is not valid"),
    ("a repository name with a newline", _request(fields=_fields(repository="a/b\nsha=1")), "unexpected line"),
    ("a history that is not the commit's", _request(commits=[OLD]), "does not start at the pushed commit"),
    ("not a tar", b"junk" * 2000, "not a readable tar file"),
])
def test_a_request_that_does_not_fit_is_refused_whole(case, data, message):
    with pytest.raises(RequestError, match=message.replace("(", r"\(")):
        push_request.parse(NAME, data)


def test_content_that_is_not_the_blob_it_claims_is_refused():
    data = _request({W1D1: b"{}"})
    forged = data.replace(b"{}" + b"\0", b"[]" + b"\0", 1)
    assert forged != data
    with pytest.raises(RequestError, match="is not blob"):
        push_request.parse(NAME, forged)


def test_the_request_file_is_never_read_through_a_link_nor_past_its_limit(tmp_path):
    (tmp_path / "link").symlink_to(REPO / "solutions" / W1D1)
    with pytest.raises(RequestError, match="cannot be opened as a regular file"):
        push_request.read(tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RequestError, match="not a regular file"):
        push_request.read(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 11)
    with pytest.raises(RequestError, match="larger than"):
        push_request.read(tmp_path / "big", limit=10)


def test_a_notebook_is_graded_when_its_blob_differs_from_the_one_recorded():
    request = push_request.parse(NAME, _request({W1D1: b"{}", DAY4: b"[]"}))
    assert [n.path for n in push_state.changed(push_state.BranchState(), request.notebooks)] == [W1D1, DAY4]
    recorded = push_state.BranchState(OLD, {W1D1: git_blob_id(b"{}"), DAY4: git_blob_id(b"old")})
    assert [n.path for n in push_state.changed(recorded, request.notebooks)] == [DAY4]
    assert push_state.history_note(recorded, request) == ""
    gone = push_state.BranchState("c" * 40, {})
    assert push_state.history_note(gone, request).startswith("The last graded commit ccccccc is not in this branch's")


def test_the_record_keeps_the_old_blob_of_a_notebook_the_grader_failed_on(tmp_path):
    request = push_request.parse(NAME, _request({W1D1: b"{}", DAY4: b"[]"}))
    before = push_state.BranchState(OLD, {DAY4: git_blob_id(b"old"), "week1/day5_memory.ipynb": "d" * 40})
    after = push_state.recorded(before, request, graded={W1D1})
    assert after == push_state.BranchState(SHA, {W1D1: git_blob_id(b"{}"), DAY4: git_blob_id(b"old")})
    push_state.save(tmp_path, "Classroom/Alice-Repo", "refs/heads/main", after)
    assert push_state.load(tmp_path, "classroom/alice-repo", "refs/heads/main") == after
    assert push_state.load(tmp_path, "classroom/alice-repo", "refs/heads/other") == push_state.BranchState()


def test_the_roster_names_the_student_of_each_repository(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("repository,student\n# a comment\nClassroom/Alice-Repo,alice\n\nclassroom/bob-repo, Bob B \n")
    assert push_roster.load(roster) == {"classroom/alice-repo": "alice", "classroom/bob-repo": "Bob B"}
    for text, message in [("repo,name\n", "header"), ("repository,student\na/b,x\nA/B,y\n", "listed twice"),
                          ("repository,student\nnot-a-repository,x\n", "line 2"),
                          ("repository,student\na/b,../x\n", "line 2")]:
        roster.write_text(text)
        with pytest.raises(push_roster.RosterError, match=message):
            push_roster.load(roster)


def _service(tmp_path: Path) -> push_service.Service:
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o710)
    spool.chmod(0o710)
    (tmp_path / "roster.csv").write_text("repository,student\nclassroom/alice-repo,alice\n")
    service = push_service.Service(spool, tmp_path / "roster.csv", spool / "state", settings=None,
                                   unavailable="no grading in this test", log=lambda line: None)
    push_service.prepare(service.spool, service.state)
    return service


def test_the_spool_is_made_with_modes_that_let_the_runner_drop_requests_and_read_only_its_answer(tmp_path):
    service = _service(tmp_path)
    modes = {name: stat.S_IMODE(os.stat(service.spool / name).st_mode) & ~stat.S_ISGID
             for name in ("inbox", "outbox", "work", "state")}
    assert modes == {"inbox": 0o1730, "outbox": 0o710, "work": 0o700, "state": 0o700}
    service.spool.chmod(0o770)
    with pytest.raises(push_service.SpoolError, match="writable by it alone"):
        push_service.prepare(service.spool, service.state)


def test_what_is_not_a_request_is_answered_or_removed_unread(tmp_path):
    service = _service(tmp_path)
    (service.inbox / NAME).symlink_to(REPO / "solutions" / W1D1)
    (service.inbox / "not-a-request").write_text("x")
    (service.inbox / ".half-written").write_text("x")  # a job still writing it: left alone
    assert push_service.serve(service, once=True) == 2  # "no grading in this test"
    answer = service.outbox / NAME
    assert (answer / "status").read_text() == "2\n"
    assert "Not graded: the request cannot be opened as a regular file" in (answer / "summary.md").read_text()
    assert stat.S_IMODE(os.stat(answer).st_mode) == 0o750
    assert sorted(os.listdir(service.inbox)) == [".half-written"]


def test_a_folder_in_the_inbox_is_answered_once_even_where_it_cannot_be_removed(tmp_path):
    service = _service(tmp_path)
    lines: list[str] = []
    service.log = lines.append
    (service.inbox / NAME / "sealed").mkdir(parents=True)
    (service.inbox / NAME / "sealed" / "file").write_text("x")
    (service.inbox / NAME / "sealed").chmod(0o500)  # as another account's folder would be (root removes it anyway)
    try:
        for _ in range(2):
            push_service.serve(service, once=True)
    finally:
        if (service.inbox / NAME).exists():
            (service.inbox / NAME / "sealed").chmod(0o700)
    assert sum(line.startswith(f"{NAME}: answered 2") for line in lines) == 1
    assert "not a regular file" in (service.outbox / NAME / "summary.md").read_text()


def test_a_request_the_job_stopped_waiting_for_is_not_graded(tmp_path):
    service = _service(tmp_path)
    (service.inbox / NAME).write_bytes(_request(fields=_fields(deadline=str(int(time.time()) - 1))))
    assert push_service.handle(service, NAME) == 2
    assert "the job had stopped waiting" in (service.outbox / NAME / "summary.md").read_text()
    assert not os.listdir(service.state) or os.listdir(service.state) == [".lock"]


def test_one_service_at_a_time(tmp_path):
    service = _service(tmp_path)
    with push_service.serving(service.state), pytest.raises(push_service.SpoolError, match="another"):
        push_service.serve(service, once=True)


def test_pushed_takes_regular_files_only_never_a_link(tmp_path):
    from grader.push import pushed

    (tmp_path / "week1").mkdir()
    (tmp_path / W1D1).write_text("{}")
    (tmp_path / DAY4).symlink_to(REPO / "solutions" / DAY4)
    (tmp_path / "week2").symlink_to(REPO / "solutions" / "week2")  # a whole week folder linked
    chosen = pushed.select(tmp_path, [W1D1, DAY4, "week2/day1_profiling.ipynb", "README.md", "week1/day5_memory.ipynb"])
    assert [(nb.key, content) for nb, content in chosen.notebooks] == [("week1/day1_host_baseline", b"{}")]
    assert [(path, why.split(" (")[0].split(":")[0]) for path, why in chosen.ignored] == [
        (DAY4, "a symbolic link, not a notebook file"), ("week2/day1_profiling.ipynb", "week2 is not a folder"),
        ("README.md", "not a course notebook at its course path"), ("week1/day5_memory.ipynb", "deleted")]
