"""Every GPU number the notebooks' prose states has a source that holds it.

The scan finds numbers with units in sentences that name a GPU, say "measured" or say "datasheet";
the registry (tests/prose_claims/*.toml, format in its README.md) says where each comes from, and
each entry is checked against its source. Pure text work: no GPU, no notebook run.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pytest

from course import peaks

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "tests" / "prose_claims"
SOLUTIONS = ROOT / "solutions"

GPU_NAMES = r"(?:H100|H200|H800|A100|B100|B200|GH200|L4|L40S?|T4|V100|RTX\s?\d{4})"
TRIGGER = re.compile(rf"\b{GPU_NAMES}\b|\bmeasured\b|\bdatasheet\b", re.IGNORECASE)
NUMBER = r"\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"
UNIT = (
    r"(?:\s*(?:[GT]B/s|[GT]FLOP/s|ns\b|µs|us\b|ms\b|[MG]Hz|W\b|%)|x\b"
    r"|\s+of\s+(?:the\s+)?(?:cuBLAS|torch|copy|reference|peak|library))"
)
CLAIM = re.compile(
    rf"(?<![\w.])(?:[x×]{NUMBER}\b|{NUMBER}(?:\s*(?:-|–|to)\s*{NUMBER})?{UNIT})"
)
NUM = re.compile(NUMBER)


@dataclass(frozen=True)
class Claim:
    """One number with a unit in a sentence that names a GPU, "measured" or "datasheet"."""

    notebook: str
    cell: int
    start: int
    end: int
    text: str
    sentence: str


@dataclass
class Entry:
    """One registry entry, where its text lies in the notebook, and what it is checked against."""

    raw: dict
    origin: str
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (cell, start, end)

    @property
    def label(self) -> str:
        return f"{self.origin}: {self.raw.get('text') or self.raw.get('regex')!r}"


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    """The notebook's markdown cells, whitespace collapsed, with inline code and maths blanked out."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = collapse("".join(cell["source"]))
        out.append((index, text))
    return out


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group(0))


def readable(text: str) -> str:
    """Same length as ``text``, with `code` and $maths$ replaced by spaces so their numbers are not read."""
    text = re.sub(r"`[^`]*`", _blank, text)
    return re.sub(r"\$[^$]*\$", _blank, text)


SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+(?=[A-Z(*#|-])|\s\|\s|\s-\s(?=\*\*)|(?<=\|)\s(?=\|)")


def sentences(text: str) -> list[tuple[int, int]]:
    """Spans of the sentences (and table cells, list items) of one collapsed markdown cell."""
    spans, start = [], 0
    for match in SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return spans


def find_claims(notebook: str, cells: list[tuple[int, str]]) -> list[Claim]:
    found = []
    for index, text in cells:
        plain = readable(text)
        for begin, stop in sentences(plain):
            sentence = plain[begin:stop]
            if not TRIGGER.search(sentence):
                continue
            for match in CLAIM.finditer(sentence):
                found.append(
                    Claim(notebook, index, begin + match.start(), begin + match.end(), match.group(0),
                          text[begin:stop])
                )
    return found


def solution_notebooks() -> list[Path]:
    return sorted(SOLUTIONS.glob("week*/*.ipynb"))


def notebook_name(path: Path) -> str:
    return path.relative_to(SOLUTIONS).with_suffix("").as_posix()


def load_registry(folder: Path = REGISTRY) -> list[Entry]:
    entries = []
    for toml in sorted(folder.glob("*.toml")):
        for number, raw in enumerate(tomllib.loads(toml.read_text(encoding="utf-8")).get("claim", [])):
            entries.append(Entry(raw, f"{toml.name}[{number}]"))
    return entries


def locate(entry: Entry, cells: list[tuple[int, str]]) -> None:
    """Record where the entry's text (or regex) occurs in the notebook's markdown."""
    if "regex" in entry.raw:
        pattern = re.compile(entry.raw["regex"])
    else:
        pattern = re.compile(re.escape(collapse(entry.raw["text"])))
    for index, text in cells:
        entry.spans.extend((index, m.start(), m.end()) for m in pattern.finditer(text))


def uncovered(claims: list[Claim], entries: list[Entry]) -> list[Claim]:
    return [
        claim for claim in claims
        if not any(
            cell == claim.cell and start <= claim.start and claim.end <= end
            for entry in entries for cell, start, end in entry.spans
        )
    ]


# ---- checking one entry against its source -------------------------------------------------------


def value_of(written: str) -> Decimal:
    return Decimal(written.replace(",", ""))


def half_unit(written: str) -> Decimal:
    """Half a unit of the last written digit: the rounding a number as written allows."""
    mantissa, _, exponent = written.replace(",", "").lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return Decimal(5).scaleb(-(decimals + 1) + (int(exponent) if exponent else 0))


def matches(written: str, value: object, raw: dict) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal) or not math.isfinite(value):
        return False
    source = Decimal(str(value)) * Decimal(str(raw.get("scale", 1)))
    if raw.get("percent"):
        source *= 100
    allowed = max(half_unit(written), Decimal(str(raw.get("tolerance", 0))))
    return abs(source - value_of(written)) <= allowed


def section_text(markdown: str, heading: str) -> str | None:
    lines = markdown.splitlines()
    for number, line in enumerate(lines):
        level = len(line) - len(line.lstrip("#"))
        if level and line[level:].startswith(" ") and heading in line:
            end = next(
                (i for i in range(number + 1, len(lines))
                 if (lv := len(lines[i]) - len(lines[i].lstrip("#"))) and lv <= level
                 and lines[i][lv:].startswith(" ")),
                len(lines),
            )
            return "\n".join(lines[number + 1:end])
    return None


def json_at(data: object, key: str) -> object:
    """The value at a dotted key path; a dict key that itself holds dots ("w1d7.matmul_fp32") is matched whole,
    the longest such key first."""
    parts = key.split(".")
    while parts:
        if isinstance(data, list):
            data, parts = data[int(parts[0])], parts[1:]
            continue
        if not isinstance(data, dict):
            raise KeyError(key)
        for size in range(len(parts), 0, -1):
            if (name := ".".join(parts[:size])) in data:
                data, parts = data[name], parts[size:]
                break
        else:
            raise KeyError(key)
    return data


def datasheet_entry(name: str) -> list[object]:
    return [row for row in (*(p for _, p in peaks._TABLE), *peaks.SM_TABLE) if row.gpu == name]


def problems_with_source(entry: Entry, root: Path = ROOT) -> list[str]:
    """What is wrong with one entry's numbers against its source (empty: all found)."""
    raw = entry.raw
    numbers = [str(n) for n in raw.get("numbers", [])]
    if not numbers:
        return ["no numbers listed"]
    source = str(raw.get("source", ""))
    if source.startswith("datasheet:"):
        rows = datasheet_entry(source.partition(":")[2].strip())
        keys = raw.get("keys") or ([raw["key"]] if "key" in raw else [])
        if not keys:
            return []  # a named datasheet figure peaks.py does not hold; the sentence must say so (checked apart)
        if not rows:
            return [f"{source!r} names no entry of course/peaks.py"]
        if len(keys) != len(numbers):
            return [f"{len(numbers)} numbers but {len(keys)} keys"]
        return [
            f"{written} is not {source} {key}"
            for written, key in zip(numbers, keys, strict=True)
            if not any(matches(written, getattr(row, key, None), raw) for row in rows)
        ]
    path = root / source
    if not source.startswith("bench/") or not path.is_file():
        return [f"source {source!r} is no file under bench/"]
    if path.suffix == ".json":
        keys = raw.get("keys") or ([raw["key"]] if "key" in raw else [])
        if len(keys) != len(numbers):
            return [f"{len(numbers)} numbers but {len(keys)} JSON keys"]
        data = json.loads(path.read_text(encoding="utf-8"))
        out = []
        for written, key in zip(numbers, keys, strict=True):
            try:
                value = json_at(data, key)
            except (KeyError, IndexError, ValueError, TypeError):
                out.append(f"{source} has no key {key!r}")
                continue
            if not isinstance(value, int | float) or not matches(written, value, raw):
                out.append(f"{written} is not {source}:{key} = {value!r}")
        return out
    text = path.read_text(encoding="utf-8")
    if "section" in raw:
        found = section_text(text, raw["section"])
        if found is None:
            return [f"{source} has no heading containing {raw['section']!r}"]
        text = found
    if "line" in raw:
        text = "\n".join(line for line in text.splitlines() if raw["line"] in line)
        if not text:
            return [f"no line of the section contains {raw['line']!r}"]
    values = [value_of(m.group(0)) for m in NUM.finditer(text)]
    return [
        f"{written} not found in {source}" + (f" section {raw['section']!r}" if "section" in raw else "")
        for written in numbers
        if not any(matches(written, v, raw) for v in values)
    ]


def problems_with_text(entry: Entry, cells: list[tuple[int, str]]) -> list[str]:
    raw = entry.raw
    out = []
    if not entry.spans:
        return ["its text is not in the notebook's markdown"]
    by_cell = dict(cells)
    for cell, start, end in entry.spans:
        piece = by_cell[cell][start:end]
        out += [f"{n!r} is not in its text" for n in map(str, raw.get("numbers", [])) if n not in piece]
        gpu = raw.get("gpu")
        if not gpu:
            out.append("no gpu named")
        elif gpu not in by_cell[cell]:
            out.append(f"the cell does not name {gpu}")
        if str(raw.get("source", "")).startswith("datasheet:") and "key" not in raw and "keys" not in raw:
            sentence = next(by_cell[cell][a:b] for a, b in sentences(by_cell[cell]) if a <= start < b + 1)
            if not re.search(r"datasheet|whitepaper", sentence, re.IGNORECASE):
                out.append("a datasheet figure whose sentence does not say so")
    return out


# ---- the tests -----------------------------------------------------------------------------------

NOTEBOOKS = solution_notebooks()


def check_notebook(notebook: str, cells: list[tuple[int, str]], entries: list[Entry]) -> list[str]:
    """Every problem of one notebook: unsourced claims, and its entries' text and sources."""
    mine = [e for e in entries if e.raw.get("notebook") == notebook]
    for entry in mine:
        entry.spans.clear()
        locate(entry, cells)
    problems = [
        f"cell {c.cell}: {c.text!r} has no registry entry, in: {c.sentence.strip()[:160]!r}"
        for c in uncovered(find_claims(notebook, cells), mine)
    ]
    for entry in mine:
        problems += [f"{entry.label}: {p}" for p in problems_with_text(entry, cells) + problems_with_source(entry)]
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[notebook_name(p) for p in NOTEBOOKS])
def test_every_gpu_claim_has_a_source_that_holds_it(path: Path) -> None:
    problems = check_notebook(notebook_name(path), markdown_cells(path), load_registry())
    assert not problems, "\n".join(problems)


def test_every_entry_names_a_solution_notebook() -> None:
    names = {notebook_name(p) for p in NOTEBOOKS}
    stray = [e.label for e in load_registry() if e.raw.get("notebook") not in names]
    assert not stray, f"entries naming no solution notebook: {stray}"


def _fixture_cells(text: str) -> list[tuple[int, str]]:
    return [(0, collapse(text))]


def test_an_unsourced_number_fails() -> None:
    cells = _fixture_cells(
        "Measured on an H100, the kernel reached 812 GB/s. The grid has 64 x 64 tiles and `BLOCK = 128`."
    )
    problems = check_notebook("fixture", cells, [])
    assert len(problems) == 1 and "'812 GB/s' has no registry entry" in problems[0], problems


@pytest.mark.parametrize("ratio", ["0.94 of the copy", "0.9 of the library", "0.91 of the reference", "0.83 of torch"])
def test_a_ratio_to_a_yardstick_is_a_claim(ratio: str) -> None:
    problems = check_notebook("fixture", _fixture_cells(f"On an H100 it reached {ratio} at 5003 x 12007."), [])
    assert len(problems) == 1 and f"'{ratio}' has no registry entry" in problems[0], problems


def test_an_entry_whose_source_does_not_hold_its_number_fails(tmp_path: Path) -> None:
    results = tmp_path / "bench" / "RESULTS.md"
    results.parent.mkdir()
    results.write_text(
        "# Results\n\n## Copy on an H100 (2026-12-07)\n\ncopy 2,960 GB/s, ratio 0.834\n\n## Other\n\n812\n"
    )
    (tmp_path / "bench" / "r.json").write_text(json.dumps({"runs": [{"gbps": 2961.4}], "w1.copy": {"gbps": 2960}}))
    cells = _fixture_cells("Measured on an H100, a copy reached 2960 GB/s (0.83 of torch).")
    good = {"notebook": "fixture", "text": "2960 GB/s (0.83 of torch)", "gpu": "H100",
            "numbers": ["2960", "0.83"], "source": "bench/RESULTS.md", "section": "Copy on an H100"}
    entry = Entry(good, "fixture")
    locate(entry, cells)
    assert not uncovered(find_claims("fixture", cells), [entry])
    assert problems_with_text(entry, cells) == []
    assert problems_with_source(entry, tmp_path) == []
    # the same number wrong by more than its rounding, or looked for in the wrong section, fails
    assert problems_with_source(Entry({**good, "numbers": ["2970", "0.83"]}, "f"), tmp_path)
    assert problems_with_source(Entry({**good, "numbers": ["812"]}, "f"), tmp_path)
    assert problems_with_source(Entry({**good, "section": "Other", "numbers": ["812"]}, "f"), tmp_path) == []
    # a JSON key path: 2961.4 rounds to 2961, not 2960
    as_json = {**good, "source": "bench/r.json", "numbers": ["2961"], "key": "runs.0.gbps"}
    assert problems_with_source(Entry(as_json, "f"), tmp_path) == []
    assert problems_with_source(Entry({**as_json, "numbers": ["2960"]}, "f"), tmp_path)
    assert problems_with_source(Entry({**as_json, "key": "runs.1.gbps"}, "f"), tmp_path)
    dotted = {**as_json, "numbers": ["2960"], "key": "w1.copy.gbps"}  # a key holding a dot is matched whole
    assert problems_with_source(Entry(dotted, "f"), tmp_path) == []
    # an entry whose text has left the notebook fails
    gone = Entry({**good, "text": "3000 GB/s"}, "f")
    locate(gone, cells)
    assert problems_with_text(gone, cells) == ["its text is not in the notebook's markdown"]


def test_datasheet_figures_are_checked_against_course_peaks() -> None:
    cells = _fixture_cells("The H100 SXM datasheet gives 67 TFLOP/s for fp32 and 3350 GB/s.")
    good = {"notebook": "fixture", "text": "67 TFLOP/s for fp32 and 3350 GB/s", "gpu": "H100",
            "numbers": ["67", "3350"], "source": "datasheet: H100 SXM", "keys": ["fp32_tflops", "memory_gbps"]}
    entry = Entry(good, "fixture")
    locate(entry, cells)
    assert not uncovered(find_claims("fixture", cells), [entry])
    assert problems_with_source(entry) == [] and problems_with_text(entry, cells) == []
    assert problems_with_source(Entry({**good, "numbers": ["60", "3350"]}, "f"))


@pytest.mark.parametrize(
    ("written", "value", "ok"),
    [("0.83", 0.834, True), ("0.83", 0.836, False), ("52", 51.5, True), ("7.8e-4", 7.84e-4, True),
     ("7.8e-4", 7.9e-4, False), ("42,751", 42751, True)],
)
def test_rounding_is_half_a_unit_of_the_last_written_digit(written: str, value: float, ok: bool) -> None:
    assert matches(written, value, {}) is ok
