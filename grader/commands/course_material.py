"""The verbs of the course's own material: ``release`` (student notebooks from the solutions), ``collect``
(a Canvas download into the class layout) and ``demo`` (the demo class).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.authoring import release


def cmd_release(args: argparse.Namespace) -> int:
    if args.check:
        problems = release.drifted()
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    for path in release.release():
        print(f"wrote {path}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from grader.intake.layout import course_notebooks
    from grader.lms import collect, roster

    course = sorted({nb.assignment for nb in course_notebooks()})
    if args.assignment not in course:
        print(f"error: no assignment is called {args.assignment!r} (there are {', '.join(course)})", file=sys.stderr)
        return 2
    try:
        people = roster.load(Path(args.roster))
        times = collect.read_times(Path(args.times)) if args.times else None
        done = collect.collect(Path(args.download), people, args.assignment, Path(args.out), times)
    except (roster.RosterError, collect.CollectError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(done.lines(args.assignment, Path(args.out), times is not None)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from grader.authoring import demo

    for path in demo.build(Path(args.destination)):
        print(f"wrote {path}")
    return 0
