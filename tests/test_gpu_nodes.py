"""One GPU per sandbox: which device nodes a run gets, read from fake /dev and /proc/driver/nvidia trees here, and
(marked gpu) from a real sandbox: one /dev/nvidiaN inside, one CUDA device, and no way to another."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from grader.gpu import gpu_nodes
from grader.gpu.gpu_nodes import CudaDevice, GpuUnavailable, binding, gpu_uuid, pci_address
from grader.wall import sandbox, scratch_folders

UUIDS = ["GPU-3b1ea1c3-1111-2222-3333-000000000000", "GPU-3b1ea1c3-1111-2222-3333-000000000001",
         "GPU-3b1ea1c3-1111-2222-3333-000000000002"]
# Three GPUs whose minors are not in PCI order (as on some hosts), the last not initialised (UUID unknown).
GPUS = [("0000:18:00.0", UUIDS[0], 2), ("0000:2a:00.0", UUIDS[1], 0), ("0000:9a:00.0", "????????-????", 1)]


def _machine(root: Path, gpus=GPUS, control=("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")) -> tuple[Path, Path]:
    proc, dev = root / "proc", root / "dev"
    dev.mkdir(parents=True)
    for address, uuid, minor in gpus:
        (proc / address).mkdir(parents=True)
        (proc / address / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 18\nGPU UUID: \t {uuid}\nBus Type: \t PCIe\n"
            f"DMA Size: \t 52 bits\nBus Location: \t {address}\nDevice Minor: \t {minor}\nGPU Excluded:\t No\n")
        (dev / f"nvidia{minor}").touch()
    for name in control:
        (dev / name).touch()
    return proc, dev


def test_addresses_and_uuids_are_read_in_every_spelling():
    assert pci_address("00000000:2A:00.0") == pci_address("0000:2a:00.0") == "0000:2a:00.0"
    assert pci_address("not an address") is None
    assert gpu_uuid("3B1EA1C3-1111-2222-3333-000000000000") == UUIDS[0]  # torch prints it bare
    assert gpu_uuid("GPU-????????-????-????-????-????????????") is None


def test_the_gpu_is_found_by_pci_address_and_only_its_node_is_bound(tmp_path):
    proc, dev = _machine(tmp_path)
    # nvidia-smi's spelling of the address, and a UUID that would point elsewhere: the address decides.
    given = binding(CudaDevice("1", UUIDS[1], pci_address("00000000:2A:00.0")), proc, dev)
    assert given.nodes == (dev / "nvidia0", dev / "nvidiactl", dev / "nvidia-uvm", dev / "nvidia-uvm-tools")
    assert given.visible == UUIDS[1]
    given = binding(CudaDevice("0", UUIDS[0], "0000:18:00.0"), proc, dev)
    assert given.nodes[0] == dev / "nvidia2" and given.visible == UUIDS[0]


def test_without_an_address_the_uuid_decides(tmp_path):
    proc, dev = _machine(tmp_path)
    assert binding(CudaDevice("0", UUIDS[0], None), proc, dev).nodes[0] == dev / "nvidia2"


def test_optional_control_nodes_are_bound_only_where_they_exist(tmp_path):
    proc, dev = _machine(tmp_path, control=("nvidiactl", "nvidia-uvm", "nvidia-modeset"))
    (dev / "nvidia-caps").mkdir()
    nodes = binding(CudaDevice("1", UUIDS[1], "0000:2a:00.0"), proc, dev).nodes
    assert nodes == (dev / "nvidia0", dev / "nvidiactl", dev / "nvidia-uvm", dev / "nvidia-modeset",
                     dev / "nvidia-caps")


@pytest.mark.parametrize("device", [CudaDevice("3", None, "0000:77:00.0"),  # not on this machine
                                    CudaDevice("2", None, None)])  # nothing known about it
def test_an_unknown_gpu_is_refused_rather_than_guessed(tmp_path, device):
    proc, dev = _machine(tmp_path)
    with pytest.raises(GpuUnavailable, match="cannot tell which /dev/nvidiaN"):
        binding(device, proc, dev)


def test_a_machine_with_one_gpu_needs_no_match(tmp_path):
    proc, dev = _machine(tmp_path, gpus=[("0000:18:00.0", UUIDS[0], 0)], control=("nvidiactl", "nvidia-uvm"))
    assert binding(CudaDevice("0", None, None), proc, dev) == gpu_nodes.GpuBinding(
        (dev / "nvidia0", dev / "nvidiactl", dev / "nvidia-uvm"), UUIDS[0])


def test_a_gpu_with_no_uuid_anywhere_is_refused(tmp_path):
    proc, dev = _machine(tmp_path)
    with pytest.raises(GpuUnavailable, match="no UUID"):
        binding(CudaDevice("2", None, "0000:9a:00.0"), proc, dev)


def test_missing_nodes_are_refused(tmp_path):
    proc, dev = _machine(tmp_path, control=("nvidiactl",))
    with pytest.raises(GpuUnavailable, match="nvidia-uvm missing"):
        binding(CudaDevice("1", UUIDS[1], "0000:2a:00.0"), proc, dev)
    (dev / "nvidia-uvm").touch()
    (dev / "nvidia0").unlink()
    with pytest.raises(GpuUnavailable, match="nvidia0 missing"):
        binding(CudaDevice("1", UUIDS[1], "0000:2a:00.0"), proc, dev)


def test_a_gpu_the_grader_cannot_map_is_a_sandbox_error_not_every_gpu(tmp_path, monkeypatch):
    def unknown(index):
        raise GpuUnavailable(f"CUDA device {index!r} is not visible to the grader")

    monkeypatch.setattr(gpu_nodes, "cuda_device", unknown)
    scratch = scratch_folders.make_scratch()
    try:
        result = sandbox.run(["true"], scratch=scratch, env={"PATH": os.defpath}, limits=sandbox.Limits(seconds=60),
                             log_path=tmp_path / "log", gpu="1", sandbox=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert result.status == "error" and "GPU 1" in result.message and "not visible" in result.message


INSIDE = """
import json, os, re, subprocess, sys
found = {"nodes": sorted(n for n in os.listdir("/dev") if re.fullmatch(r"nvidia[0-9]+", n)),
         "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
import torch
found["count"] = torch.cuda.device_count()
found["uuid"] = str(torch.cuda.get_device_properties(0).uuid)
torch.ones(1, device="cuda").add_(1)
# What a student could try: another CUDA_VISIBLE_DEVICES (the probe, argv[1], tries each device CUDA then lists).
found["others"] = {}
for visible in [str(i) for i in range(8)] + [",".join(map(str, range(8)))]:
    ran = subprocess.run([sys.executable, "-c", sys.argv[1]], env=dict(os.environ, CUDA_VISIBLE_DEVICES=visible),
                         capture_output=True, text=True)
    found["others"][visible] = json.loads(ran.stdout.splitlines()[-1]) if ran.returncode == 0 else []
print(json.dumps(found))
"""
PROBE = """
import json, torch
usable = []
for i in range(torch.cuda.device_count()):
    try:
        torch.ones(1, device=f"cuda:{i}").sum().item()
        usable.append(str(torch.cuda.get_device_properties(i).uuid))
    except Exception:
        pass
print(json.dumps(usable))
"""


@pytest.mark.gpu
@pytest.mark.skipif(sandbox.unavailable_reason() is not None, reason="NOT RUN: the sandbox cannot start here")
def test_a_sandbox_sees_its_one_gpu_only(tmp_path):
    import torch

    for index in range(torch.cuda.device_count()):
        expected = str(torch.cuda.get_device_properties(index).uuid)
        scratch = scratch_folders.make_scratch()
        try:
            env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(scratch), "PYTHONDONTWRITEBYTECODE": "1"}
            result = sandbox.run([sys.executable, "-c", INSIDE, PROBE], scratch=scratch, env=env,
                                 limits=sandbox.Limits(seconds=300), log_path=tmp_path / "log", gpu=str(index))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        log = (tmp_path / "log").read_text(errors="replace")
        assert result.status == "ok", log[-3000:]
        found = json.loads(log.strip().splitlines()[-1])
        assert len(found["nodes"]) == 1 and found["count"] == 1, found
        assert found["uuid"] == expected and found["visible"] == gpu_nodes.gpu_uuid(expected), found
        for visible, usable in found["others"].items():
            assert set(usable) <= {expected}, (visible, usable)
