"""Which device nodes give a sandbox one GPU, and what CUDA inside calls it.

The grader names a GPU by its CUDA index as its own process sees it (``torch.cuda``, which honours the
grader's CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER). A sandbox gets that GPU's node only: /dev/nvidiaN,
where N is the "Device Minor" the driver lists for the GPU in /proc/driver/nvidia/gpus/<PCI address>/information,
plus the control nodes CUDA opens (/dev/nvidiactl and /dev/nvidia-uvm; /dev/nvidia-uvm-tools for profilers,
/dev/nvidia-modeset and /dev/nvidia-caps where the driver made them). Inside, CUDA_VISIBLE_DEVICES names the GPU
by its UUID, so CUDA never tries another. Changing it does not reach another GPU either: that GPU's node is not
there, and the sandbox user can neither create device nodes nor gain the privileges to.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
DEV = Path("/dev")
REQUIRED_CONTROL = ("nvidiactl", "nvidia-uvm")
OPTIONAL_CONTROL = ("nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NUMBERED = re.compile(r"nvidia[0-9]+")


class GpuUnavailable(Exception):
    """The GPU a run was given cannot be handed to a sandbox alone; the message says why."""


@dataclass(frozen=True)
class CudaDevice:
    """One GPU as the grader's process sees it."""

    index: str  # the grader's CUDA index
    uuid: str | None  # "GPU-<uuid>"
    pci: str | None  # "0000:18:00.0"


@dataclass(frozen=True)
class GpuBinding:
    nodes: tuple[Path, ...]  # what the sandbox binds, the GPU's own node first
    visible: str  # CUDA_VISIBLE_DEVICES inside the sandbox


@dataclass(frozen=True)
class _DriverGpu:
    pci: str | None
    uuid: str | None
    minor: int | None


def pci_address(text: str) -> str | None:
    """'00000000:18:00.0' (nvidia-smi) or '0000:18:00.0' (/proc) as '0000:18:00.0'; None when not an address."""
    match = re.fullmatch(r"\s*([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*", text)
    if match is None:
        return None
    domain, bus, device, function = (int(part, 16) for part in match.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def gpu_uuid(text: str) -> str | None:
    """'GPU-<uuid>' from any text holding the UUID (torch prints it bare); None for '??...' (GPU not initialised)."""
    match = _UUID.search(text.lower())
    return f"GPU-{match.group(0)}" if match else None


def _driver_gpus(proc: Path) -> list[_DriverGpu]:
    found = []
    try:
        folders = sorted(p for p in proc.iterdir() if p.is_dir())
    except OSError:
        return []
    for folder in folders:
        fields: dict[str, str] = {}
        try:
            for line in (folder / "information").read_text(errors="replace").splitlines():
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
        except OSError:
            continue
        minor = fields.get("Device Minor", "")
        found.append(_DriverGpu(pci_address(fields.get("Bus Location", "")) or pci_address(folder.name),
                                gpu_uuid(fields.get("GPU UUID", "")), int(minor) if minor.isdigit() else None))
    return found


def _numbered_nodes(dev: Path) -> list[Path]:
    try:
        return sorted(p for p in dev.iterdir() if _NUMBERED.fullmatch(p.name))
    except OSError:
        return []


def binding(device: CudaDevice, proc: Path = PROC_GPUS, dev: Path = DEV) -> GpuBinding:
    """The nodes that give a sandbox ``device`` alone, found in ``proc`` (the driver's GPU list) and ``dev``.

    The GPU is matched by PCI address, else by UUID; where neither matches, only a machine with exactly one GPU
    (one in the driver's list, one numbered node) is accepted. Raises GpuUnavailable rather than guess."""
    gpus = _driver_gpus(proc)
    matches = ([g for g in gpus if device.pci is not None and g.pci == device.pci]
               or [g for g in gpus if device.uuid is not None and g.uuid == device.uuid])
    if not matches and len(gpus) == 1 and len(_numbered_nodes(dev)) == 1:
        matches = gpus
    name = f"CUDA device {device.index} (PCI {device.pci or 'unknown'}, {device.uuid or 'UUID unknown'})"
    if len(matches) != 1 or matches[0].minor is None:
        listed = ", ".join(f"{g.pci} minor {g.minor}" for g in gpus) or "none"
        raise GpuUnavailable(f"cannot tell which /dev/nvidiaN is {name}: the driver lists {listed} in {proc}")
    gpu = matches[0]
    visible = device.uuid or gpu.uuid
    if visible is None:
        raise GpuUnavailable(f"no UUID for {name}, so CUDA inside the sandbox could not be pointed at it")
    node = dev / f"nvidia{gpu.minor}"
    missing = [path for path in (node, *(dev / name for name in REQUIRED_CONTROL)) if not path.exists()]
    if missing:
        raise GpuUnavailable(f"{', '.join(map(str, missing))} missing: CUDA cannot run in the sandbox without it")
    optional = tuple(dev / name for name in OPTIONAL_CONTROL if (dev / name).exists())
    return GpuBinding((node, *(dev / name for name in REQUIRED_CONTROL), *optional), visible)


def cuda_device(index: str) -> CudaDevice:
    """CUDA device ``index`` of this process: its UUID and PCI address from torch, the address from nvidia-smi
    where this torch does not report it."""
    import torch

    try:
        props = torch.cuda.get_device_properties(int(index))
    except (RuntimeError, ValueError, AssertionError) as error:
        raise GpuUnavailable(f"CUDA device {index!r} is not visible to the grader: {error}") from error
    uuid = gpu_uuid(str(getattr(props, "uuid", "")))
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    pci = pci_address("{:x}:{:x}:{:x}.0".format(*parts)) if all(isinstance(p, int) for p in parts) else None
    if pci is None and uuid is not None:
        pci = _smi_addresses().get(uuid)
    return CudaDevice(index, uuid, pci)


def cuda_visible(index: str) -> str:
    """CUDA_VISIBLE_DEVICES for a child process that must use this process's CUDA device ``index``: its UUID, which
    holds whatever this process's own CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER are."""
    device = cuda_device(index)
    if device.uuid is None:
        raise GpuUnavailable(f"no UUID for CUDA device {index}")
    return device.uuid


def _smi_addresses() -> dict[str, str]:
    """UUID -> PCI address of every GPU, from nvidia-smi ({} where it is missing or fails)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        listed = subprocess.run([smi, "--query-gpu=uuid,pci.bus_id", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in listed.splitlines():
        uuid, _, address = line.partition(",")
        if (key := gpu_uuid(uuid)) and (pci := pci_address(address)):
            found[key] = pci
    return found
