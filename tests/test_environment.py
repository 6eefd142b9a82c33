"""environment.yml and the pip requirements must list the same packages at the same versions."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pins(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line.lower() for line in lines if line}


def test_environment_yml_matches_the_requirements():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    conda_pins = {p.lower() for p in pip_section if not p.startswith("-e")}
    pip_pins = _pins(ROOT / "requirements" / "torch-cpu.txt") | _pins(ROOT / "requirements" / "base.txt")
    assert conda_pins == pip_pins


def test_constraints_agree_with_the_direct_pins():
    constraints = dict(p.split("==") for p in _pins(ROOT / "requirements" / "constraints.txt"))
    for pin in _pins(ROOT / "requirements" / "base.txt"):
        name, version = pin.split("==")
        normalized = {k.replace("_", "-"): v for k, v in constraints.items()}
        assert normalized.get(name.replace("_", "-"), version) == version, pin
