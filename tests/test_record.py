import time

from course import record


def test_events_are_kept_in_memory_with_infinities_as_text():
    record.event("check", spec="x", passed=True, rel_error=float("inf"))
    last = record.events("check")[-1]
    assert last["spec"] == "x" and last["rel_error"] == "inf"


def test_timed_phase_leaves_out_compile_time():
    with record.timed_phase("checks"):
        time.sleep(0.05)
        record.add_compile_time(0.05)
    last = [e for e in record.events("phase") if e["name"] == "checks"][-1]
    assert last["seconds"] < 0.03
