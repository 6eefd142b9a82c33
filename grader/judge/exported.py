"""The run's export as the judge reads it, and the master test cells run on its answers: each answer decoded
from JSON (or refused as unsupported, for the items that read it alone).
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from grader.judge.parts import bounded

MAX_ANSWER_BYTES = 16 * 2**20


class Unsupported:
    """An answer the grader does not take (a subclass of int, an array it cannot load...): equal to nothing."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"<unsupported: {self.why}>"

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


def _load_array(path: Path) -> Any:
    try:
        array = np.load(path, allow_pickle=False)
    except Exception as error:  # a pickled object array, a truncated or foreign file: this answer only
        return Unsupported(f"its array file cannot be read ({type(error).__name__}: {str(error)[:200]})")
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        return Unsupported("its array file holds no array of numbers or booleans")
    return array


def decode_answer(data: Any, arrays: Path) -> Any:
    """One exported answer as a value; an ``Unsupported`` (never an exception) for anything else."""
    if not isinstance(data, dict):
        return Unsupported("malformed")
    if "value" in data and type(data["value"]) in (bool, int, float, str, type(None), Unsupported):
        return data["value"]
    if "float" in data and data["float"] in ("nan", "inf", "-inf"):
        return float(data["float"])
    if data.get("ellipsis") is True:
        return ...
    if isinstance(data.get("list"), list):
        return [decode_answer(v, arrays) for v in data["list"]]
    if isinstance(data.get("tuple"), list):
        return tuple(decode_answer(v, arrays) for v in data["tuple"])
    if isinstance(data.get("dict"), dict):
        return {str(k): decode_answer(v, arrays) for k, v in data["dict"].items()}
    if isinstance(data.get("array"), str):
        path = arrays / Path(data["array"]).name
        if not path.is_file() or path.stat().st_size > MAX_ANSWER_BYTES:
            return Unsupported("missing or oversized array")
        array = _load_array(path)
        if data.get("torch") and isinstance(array, np.ndarray):
            import torch

            return torch.from_numpy(array)
        return array
    return Unsupported(str(data.get("unsupported", "unknown")))


def _unsupported_in(value: Any) -> Unsupported | None:
    """The first unsupported part of a decoded answer, or None."""
    if isinstance(value, Unsupported):
        return value
    parts = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    return next((found for part in parts if (found := _unsupported_in(part))), None)


def _names_read(source: str) -> set[str]:
    try:
        return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
    except (SyntaxError, ValueError):
        return set()


def run_tests(tests: list[dict[str, str]], answers: dict[str, Any], arrays: Path) -> dict[str, dict[str, Any]]:
    """Run each master test cell against the exported answers; a verdict per grade id.

    A test that reads an answer the grader cannot take fails with "unsupported answer" and why; the
    other tests are not affected.
    """
    import torch

    import course

    base: dict[str, Any] = {"course": course, "math": math, "np": np, "torch": torch}
    for name, data in answers.items():
        if not (isinstance(data, dict) and data.get("missing")):
            try:
                base[name] = decode_answer(data, arrays)
            except RecursionError:
                base[name] = Unsupported("nested too deeply")
    unsupported = {name: found for name in answers if (found := _unsupported_in(base.get(name)))}
    verdicts = {}
    for test in tests:
        read = sorted(_names_read(test["source"]) & set(unsupported))
        if read:
            verdicts[test["grade_id"]] = {"passed": False,
                                          "message": f"unsupported answer: {read[0]}: {unsupported[read[0]].why}"}
            continue
        try:
            exec(compile(test["source"], f"<test {test['grade_id']}>", "exec"), dict(base))
            verdicts[test["grade_id"]] = {"passed": True, "message": ""}
        except AssertionError as error:
            verdicts[test["grade_id"]] = {"passed": False, "message": bounded(str(error)) or "an assertion failed"}
        except NameError as error:
            missing = bounded(getattr(error, "name", None) or str(error), 80)
            verdicts[test["grade_id"]] = {"passed": False, "message": f"{missing} is not defined in your notebook "
                                          "(its cell may have failed, been deleted or never run)"}
        except Exception as error:  # a wrong kind of answer makes a master test raise: a failed item
            verdicts[test["grade_id"]] = {"passed": False, "message": bounded(f"{type(error).__name__}: {error}")}
    return verdicts


def _parse_int(digits: str) -> int | Unsupported:
    """An int of the export, or Unsupported where Python would refuse it (too many digits): that answer only."""
    try:
        return int(digits)
    except ValueError:
        return Unsupported(f"an int of {len(digits.lstrip('-'))} digits")


def read_export(folder: Path) -> dict[str, Any]:
    path = folder / "export.json"
    if not path.is_file():
        return {}
    if path.stat().st_size > 64 * 2**20:
        return {"error": "the export is larger than 64 MiB"}
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_int=_parse_int)
    except (ValueError, RecursionError) as error:
        return {"error": f"the export is not readable: {type(error).__name__}"}
    return data if isinstance(data, dict) else {}


def _calls_of(export: dict[str, Any], spec_id: str) -> tuple[dict[str, Any], str | None]:
    entry = (export.get("kernels") or {}).get(spec_id)
    if not isinstance(entry, dict):
        return {}, "the notebook run did not reach the grader's recording cell (see the notebook's status)"
    return (entry.get("calls") if isinstance(entry.get("calls"), dict) else {}), entry.get("error")
