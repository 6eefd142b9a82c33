"""Compare a grading run of the corpus with expected.py (for runs made outside pytest, e.g. on a GPU machine).

    python3 -m grader grade CLASS --out OUT --device gpu --seed 20261122 ...
    python3 tests/adversarial/check_results.py OUT gpu

Prints one line per fixture (OK, or what differs) and exits 1 if any differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from grader.score.stored import load_results  # noqa: E402
from tests.adversarial.build import fixtures  # noqa: E402
from tests.adversarial.expected import EXPECTED  # noqa: E402


def main(out: str, device: str) -> int:
    attacked = {name: fixture.notebook for name, fixture in fixtures().items()}
    found = {r.student: r for r in load_results(Path(out)) if f"{r.assignment}/{r.notebook}" == attacked.get(r.student)}
    bad = 0
    for name, expected in sorted(EXPECTED.items()):
        result = found.get(name)
        if result is None:
            print(f"{name:<36} NOT GRADED")
            bad += 1
            continue
        mismatch = expected.mismatch(device, result.status, {i.item: i.score for i in result.items})
        note_ok = bool(result.integrity) or not expected.tamper_note
        ok = not mismatch and note_ok
        bad += not ok
        detail = "" if ok else f" {mismatch} note={note_ok}"
        print(f"{name:<36} {'OK' if ok else 'DIFFERS'} {result.score:g}{detail}")
    print(f"{len(EXPECTED) - bad} of {len(EXPECTED)} fixtures got their expected {device} verdict")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
