"""``python -m bench --list`` and ``python -m bench NAME [ARGS...]``: one entry point for every measurement."""

from __future__ import annotations

import runpy
import subprocess
import sys
from collections.abc import Sequence

from bench.registry import BENCH, SUITE, find


def listing() -> str:
    """Every measurement's name and what it measures, one a line."""
    width = max(len(m.name) for m in SUITE)
    return "\n".join(f"{m.name:<{width}}  {m.what}" for m in SUITE)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: python -m bench --list | NAME [ARGS...]   (NAME --help: its own options)\n\n{listing()}")
        return 0 if args else 2
    if args[0] == "--list":
        print(listing())
        return 0
    measurement = find(args[0])
    if measurement is None:
        print(f"no measurement named {args[0]!r}; `python -m bench --list` names them", file=sys.stderr)
        return 2
    if measurement.target.endswith(".sh"):
        return subprocess.run(["bash", str(measurement.path), *args[1:]], cwd=BENCH.parent).returncode
    sys.argv = [str(measurement.path), *args[1:]]
    try:
        runpy.run_module(f"bench.{measurement.target}", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
