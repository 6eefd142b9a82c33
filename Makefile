# GPU kernels course: one entry point for students, TAs and CI.
# On a GPU runner that already has CUDA builds of torch and triton:
#   make setup SYSTEM_SITE_PACKAGES=1   (the venv sees them, also where that Python is a venv's, instead of
#   installing CPU builds)

PYTHON ?= python3
VENV ?= .venv
SYSTEM_SITE_PACKAGES ?=
SUBMISSIONS ?=
OUT ?= build/grades
NB ?= week1/day7_fast_matmul.ipynb
DEVICE ?= auto
NO_SANDBOX ?=
# Limits per notebook; empty means the grader's defaults, which `.venv/bin/python -m grader grade --help` shows.
CELL_TIMEOUT ?=
NOTEBOOK_TIMEOUT ?=
JUDGE_TIMEOUT ?=
MEMORY_GB ?=
SCRATCH_GB ?=
CPUS_PER_RUN ?=
REPLAY_TIMEOUT ?=
GPU_MEMORY_GB ?=
GPU_BUSY_SECONDS ?=
# How the batch is scheduled (empty: the grader's defaults): SCHEDULE=serial, GPUS=0,1, RUNS=8, BUILDS=4.
SCHEDULE ?=
GPUS ?=
RUNS ?=
BUILDS ?=
# EXECUTOR=slurm grades through Slurm (one array task per chunk of students); its sbatch options:
EXECUTOR ?=
SLURM_PARTITION ?=
SLURM_ACCOUNT ?=
SLURM_TIME ?=
SLURM_GRES ?=
# A TA's week: WEEK=week1 (or ASSIGNMENT=week1,week2) grades only that assignment's notebooks, keeping the other
# weeks' grades in OUT. TERM_FILE: due dates, late policy and extensions (default: term.toml here, when present).
WEEK ?=
ASSIGNMENT ?= $(WEEK)
TERM_FILE ?=
# `make grade` exits 1 when a notebook could not be graded normally, except for the demo class (no SUBMISSIONS),
# whose `crashes` student fails by design; ALLOW_UNGRADED=1 exits 0 for a real class too (the summary still lists them).
ALLOW_UNGRADED ?= $(if $(SUBMISSIONS),,1)
LIMITS = $(if $(CELL_TIMEOUT),--cell-timeout $(CELL_TIMEOUT),) $(if $(NOTEBOOK_TIMEOUT),--notebook-timeout $(NOTEBOOK_TIMEOUT),) \
	$(if $(JUDGE_TIMEOUT),--judge-timeout $(JUDGE_TIMEOUT),) $(if $(MEMORY_GB),--memory-gb $(MEMORY_GB),) \
	$(if $(SCRATCH_GB),--scratch-gb $(SCRATCH_GB),) $(if $(CPUS_PER_RUN),--cpus-per-run $(CPUS_PER_RUN),) \
	$(if $(REPLAY_TIMEOUT),--replay-timeout $(REPLAY_TIMEOUT),) $(if $(RUNS),--runs $(RUNS),) \
	$(if $(GPU_MEMORY_GB),--gpu-memory-gb $(GPU_MEMORY_GB),) $(if $(GPU_BUSY_SECONDS),--gpu-busy-seconds $(GPU_BUSY_SECONDS),)
SCHEDULING = $(if $(SCHEDULE),--schedule $(SCHEDULE),) $(if $(GPUS),--gpus $(GPUS),) $(if $(BUILDS),--builds $(BUILDS),) \
	$(if $(EXECUTOR),--executor $(EXECUTOR),) $(if $(SLURM_PARTITION),--slurm-partition $(SLURM_PARTITION),) \
	$(if $(SLURM_ACCOUNT),--slurm-account $(SLURM_ACCOUNT),) $(if $(SLURM_TIME),--slurm-time $(SLURM_TIME),) \
	$(if $(SLURM_GRES),--slurm-gres $(SLURM_GRES),)
# Offline runners: `make wheelhouse` downloads every wheel `make setup` installs into WHEELHOUSE, for WHEEL_PYTHON
# (e.g. 3.12) and WHEEL_PLATFORM (e.g. "manylinux_2_28_x86_64 manylinux2014_x86_64"; default: this machine's);
# there, `make setup OFFLINE=1` installs from WHEELHOUSE with no package index.
WHEELHOUSE ?= build/wheelhouse
WHEEL_PYTHON ?=
WHEEL_PLATFORM ?=
OFFLINE ?=
PIP_SOURCE = $(if $(OFFLINE),--no-index --find-links $(WHEELHOUSE),)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
REQUIREMENTS := requirements/base.txt requirements/constraints.txt $(if $(SYSTEM_SITE_PACKAGES),,requirements/torch-cpu.txt)

.PHONY: setup sandbox-tool wheelhouse test lint release check-release grade publish check bench clean

setup: $(STAMP) sandbox-tool

# The grader runs student code only under bubblewrap: as root on Debian or Ubuntu it is installed here, elsewhere
# the note says what to run (without it `make grade` refuses and the sandbox tests are skipped, loudly).
sandbox-tool:
	@command -v bwrap >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing bubblewrap (the grader's sandbox)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
		else \
			echo "note: bubblewrap is not installed, so the grader cannot sandbox student code and will not grade;" \
				"install it: sudo apt-get install bubblewrap (Debian, Ubuntu), sudo dnf install bubblewrap (Fedora)"; \
		fi; }

$(STAMP): $(REQUIREMENTS) pyproject.toml
	$(PYTHON) -m venv $(if $(SYSTEM_SITE_PACKAGES),--system-site-packages,) $(VENV)
	$(if $(SYSTEM_SITE_PACKAGES),$(PYTHON) -c 'import site; print(*site.getsitepackages(), sep="\n")' \
		> "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/outer-site-packages.pth",)
	$(PY) -m pip install --quiet --upgrade $(PIP_SOURCE) pip setuptools
	$(if $(SYSTEM_SITE_PACKAGES),,$(PY) -m pip install --quiet $(PIP_SOURCE) -r requirements/torch-cpu.txt -c requirements/constraints.txt)
	$(PY) -m pip install --quiet $(PIP_SOURCE) -r requirements/base.txt -c requirements/constraints.txt
	$(PY) -m pip install --quiet $(PIP_SOURCE) --no-build-isolation --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name gpu-kernels-course --display-name "GPU kernels course"
	touch $(STAMP)

# -n auto: a pytest worker per CPU on a CPU-only machine, none beside a GPU (tests/conftest.py); loadscope keeps each
# test file on one worker, so a file's graded class is graded once.
test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -n auto --dist loadscope

wheelhouse:
	$(PYTHON) -m pip download --quiet --only-binary=:all: --dest $(WHEELHOUSE) \
		$(if $(WHEEL_PYTHON),--python-version $(WHEEL_PYTHON),) $(foreach p,$(WHEEL_PLATFORM),--platform $(p)) \
		pip setuptools -r requirements/base.txt $(if $(SYSTEM_SITE_PACKAGES),,-r requirements/torch-cpu.txt) \
		-c requirements/constraints.txt
	@echo "wheels for an offline setup in $(WHEELHOUSE): there, make setup OFFLINE=1 WHEELHOUSE=$(WHEELHOUSE)"

lint: setup
	$(PY) -m ruff check .

release: setup
	$(PY) -m grader release

check-release: setup
	$(PY) -m grader release --check

grade: setup
	$(PY) -m grader grade $(SUBMISSIONS) --out $(OUT) --device $(DEVICE) $(LIMITS) $(SCHEDULING) $(if $(NO_SANDBOX),--no-sandbox,) \
		$(if $(ASSIGNMENT),--assignment $(ASSIGNMENT),) $(if $(TERM_FILE),--term $(TERM_FILE),) \
		$(if $(filter 1 yes true,$(ALLOW_UNGRADED)),--allow-ungraded,)

# Every output again from OUT's stored results, its term (remembered in OUT) and the TA's overrides: no regrading.
publish: setup
	$(PY) -m grader publish $(OUT) $(if $(TERM_FILE),--term $(TERM_FILE),)

check: setup
	$(PY) -m grader check $(NB) --device $(DEVICE) $(LIMITS) $(if $(NO_SANDBOX),--no-sandbox,)

# On a GPU: every reference solution timed by the judge beside its library, against its ceiling (build/bench/).
bench: setup
	$(PY) -m bench references

clean:
	rm -rf build .pytest_cache

.PHONY: student-bundle
# What students receive (released notebooks, course/, setup files; no solutions, grader or tests): DEST=... to move it.
# COURSE_URL (required): the course's public repository, written after each text's citation of it.
COURSE_URL ?=
student-bundle: setup
	$(PY) -m grader.authoring.bundle $(or $(DEST),build/student-bundle) --course-url "$(COURSE_URL)"
