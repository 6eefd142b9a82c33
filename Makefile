# GPU kernels course: one entry point for students, TAs and CI.
# On a GPU runner that already has CUDA builds of torch and triton:
#   make setup SYSTEM_SITE_PACKAGES=1   (the venv sees them instead of installing CPU builds)

PYTHON ?= python3
VENV ?= .venv
SYSTEM_SITE_PACKAGES ?=
SUBMISSIONS ?=
OUT ?= build/grades
NB ?= week1/day7_fast_matmul.ipynb
DEVICE ?= auto
NO_SANDBOX ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
REQUIREMENTS := requirements/base.txt requirements/constraints.txt $(if $(SYSTEM_SITE_PACKAGES),,requirements/torch-cpu.txt)

.PHONY: setup test lint release check-release grade check bench clean

setup: $(STAMP)

$(STAMP): $(REQUIREMENTS) pyproject.toml
	$(PYTHON) -m venv $(if $(SYSTEM_SITE_PACKAGES),--system-site-packages,) $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(SYSTEM_SITE_PACKAGES),,$(PY) -m pip install --quiet -r requirements/torch-cpu.txt -c requirements/constraints.txt)
	$(PY) -m pip install --quiet -r requirements/base.txt -c requirements/constraints.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name gpu-kernels-course --display-name "GPU kernels course"
	touch $(STAMP)

test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest

lint: setup
	$(PY) -m ruff check .

release: setup
	$(PY) -m grader release

check-release: setup
	$(PY) -m grader release --check

grade: setup
	$(PY) -m grader grade $(SUBMISSIONS) --out $(OUT) --device $(DEVICE) $(if $(NO_SANDBOX),--no-sandbox,)

check: setup
	$(PY) -m grader check $(NB) --device $(DEVICE) $(if $(NO_SANDBOX),--no-sandbox,)

bench: setup
	$(PY) bench/gpu_measurements.py

clean:
	rm -rf build .pytest_cache

.PHONY: student-bundle
# What students receive (released notebooks, course/, setup files; no solutions, grader or tests): DEST=... to move it.
student-bundle: setup
	$(PY) -m grader.bundle $(or $(DEST),build/student-bundle)
