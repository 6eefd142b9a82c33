import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from course import check, device, peaks, spec
from tests.conftest import HAS_GPU

REPO = Path(__file__).resolve().parent.parent


def test_configure_matches_the_machine():
    info = device.info()
    assert info.has_gpu == HAS_GPU
    assert os.environ["TRITON_INTERPRET"] == ("0" if HAS_GPU else "1")
    assert info.describe()


def test_importing_course_and_every_spec_leaves_the_environment_as_it_was():
    # A fresh process: this one configured the device already (conftest).
    probe = """
import json, os, sys
before = dict(os.environ)
import course, course.spec, course.exercises, course.recorder.plan, course.recorder.export, course.record
course.spec.all_specs()
print(json.dumps({k: [before.get(k), os.environ.get(k)] for k in set(before) | set(os.environ)
                  if before.get(k) != os.environ.get(k)}))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    changed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env,
                             cwd=REPO).stdout
    assert json.loads(changed) == {}
    chosen = subprocess.run([sys.executable, "-c", "import os, course; course.device.info(); "
                             "print(os.environ['TRITON_INTERPRET'])"], capture_output=True, text=True,
                            check=True, env=env, cwd=REPO).stdout.strip()
    assert chosen == ("0" if HAS_GPU else "1")  # chosen at the device's first use


def test_configure_refuses_unknown_modes():
    with pytest.raises(ValueError, match="device must be one of"):
        device.configure("tpu")


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU-only path")
def test_asking_for_a_gpu_without_one_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no CUDA GPU is visible"):
        device.configure("gpu")


@pytest.mark.gpu
def test_gpu_info_reads_sm_count_and_l2():
    info = device.info()
    assert info.sm_count > 0 and info.l2_bytes > 0 and info.memory_bytes > 0


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("Tesla T4", "T4"),
    ("NVIDIA L4", "L4"),
])
def test_datasheet_peaks_by_device_name(name, expected):
    found = peaks.datasheet_peaks(name)
    assert found is not None and found.gpu == expected
    assert "datasheet" in found.source


def test_unknown_gpu_has_no_datasheet_entry():
    assert peaks.datasheet_peaks("Some Future GPU") is None
    assert peaks.datasheet_peaks("NVIDIA A100-SXM4-80GB").gpu != "T4"


@pytest.mark.skipif(HAS_GPU, reason="only the interpreter can be defined too early")
def test_kernel_defined_before_course_is_caught_at_launch(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")

    @triton.jit
    def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)

    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def matmul(a, b):
        out = torch.empty(a.shape[0], b.shape[1])
        copy_kernel[(1,)](a, out, 1, BLOCK=16)
        return out

    result = check.check_one(spec.get("w1d7.matmul_fp32"), matmul, (4, 4, 4), seed=0)
    assert not result.passed
    assert "defined before `course.device.configure()`" in result.message
