import json
import time

from course import record


def test_events_go_to_the_metrics_file_when_asked(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv(record.ENV_METRICS_FILE, str(path))
    record.event("check", spec="x", passed=True, rel_error=float("inf"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[-1]["kind"] == "check" and lines[-1]["rel_error"] == "inf"


def test_nothing_is_written_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(record.ENV_METRICS_FILE, raising=False)
    monkeypatch.chdir(tmp_path)
    record.event("check", spec="x")
    assert not list(tmp_path.iterdir())


def test_timed_phase_leaves_out_compile_time():
    with record.timed_phase("checks"):
        time.sleep(0.05)
        record.add_compile_time(0.05)
    last = [e for e in record.events("phase") if e["name"] == "checks"][-1]
    assert last["seconds"] < 0.03
