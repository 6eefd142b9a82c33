"""The gate's idle probe: only a utilisation sample taken after the other users were frozen says the GPU is idle."""

import time

import pytest

from grader.gpu import gpu_idle
from grader.gpu.gpu_gate import GpuGate


class FakeNvml:
    """Utilisation samples (timestamp, percent) the driver has taken so far, and the last period's rate."""

    def __init__(self, samples, rate_idle=True):
        self.samples, self.rate_idle = list(samples), rate_idle

    def read(self, gpu, newer_than):
        return None if self.samples is None else [s for s in self.samples if s[0] > newer_than]


@pytest.fixture
def nvml(monkeypatch):
    fake = FakeNvml([(100, 40.0), (200, 0.0)])
    monkeypatch.setattr(gpu_idle, "_samples", fake.read)
    monkeypatch.setattr(gpu_idle, "_rate_idle", lambda gpu: fake.rate_idle)
    return fake


def test_a_zero_sample_from_before_the_freeze_does_not_count(nvml):
    probe = gpu_idle.IdleProbe()
    probe.start("0")  # the newest sample (200, 0%) ended before the freeze: work queued since is not in it
    assert probe("0") is False
    nvml.samples.append((300, 35.0))  # the frozen runs' queued work still ran
    assert probe("0") is False
    nvml.samples.append((400, 0.0))
    assert probe("0") is True


def test_without_samples_the_last_period_s_rate_is_all_there_is(nvml):
    nvml.samples = None
    probe = gpu_idle.IdleProbe()
    probe.start("0")
    assert probe("0") is True
    nvml.rate_idle = None
    assert probe("0") is None


def test_the_gate_starts_the_probe_after_freezing_and_waits_for_a_later_idle_sample(nvml):
    class Counting(gpu_idle.IdleProbe):
        def __call__(self, gpu):
            nvml.samples.append((nvml.samples[-1][0] + 100, 0.0 if len(nvml.samples) > 3 else 50.0))
            return super().__call__(gpu)

    with GpuGate(Counting()).exclusive("0") as hold:
        assert hold.drain_note == ""
    assert [value for _, value in nvml.samples] == [40.0, 0.0, 50.0, 50.0, 0.0, 0.0]  # two idle samples in a row


def test_a_driver_that_takes_no_new_sample_falls_back_to_the_last_period_s_rate(nvml):
    probe = gpu_idle.IdleProbe(sample_wait=0.0)
    probe.start("0")
    assert probe("0") is True  # no sample since the freeze, and none coming: the rate says idle
    nvml.rate_idle = False
    assert probe("0") is False


@pytest.mark.gpu
def test_on_a_real_gpu_the_probe_sees_work_queued_before_the_start_and_then_its_end():
    import torch

    assert gpu_idle._samples("0", 0) is not None, "this driver keeps no utilisation samples"
    torch.cuda._sleep(4_000_000_000)  # one kernel spinning for about 2 s, queued and not waited for
    probe = gpu_idle.IdleProbe()
    probe.start("0")
    time.sleep(0.5)
    assert probe("0") is False
    torch.cuda.synchronize()
    deadline = time.monotonic() + 3.0
    while not probe("0"):
        assert time.monotonic() < deadline, "the probe never saw the GPU idle after its only kernel ended"
        time.sleep(0.05)


# A run that queues a kernel spinning for about SECONDS s, says so, then waits on it (a cell whose kernel spins).
SPINNER = """
import sys, torch
torch.cuda._sleep(int(float(sys.argv[1]) * 2e9))
print("queued", flush=True)
torch.cuda.synchronize()
"""


def _frozen_spinner(seconds: float, gate: GpuGate):
    """(the spinner's process, once its kernel is queued, and the hold the gate then took of GPU 0)."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", SPINNER, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "queued"
    with gate.shared("0") as user:
        user.attach(process.pid)
        with gate.exclusive("0") as hold:
            pass
    return process, hold


@pytest.mark.gpu
def test_on_a_real_gpu_a_frozen_runs_long_kernel_is_waited_out_and_an_endless_one_makes_the_hold_busy():
    gate = GpuGate(gpu_idle.IdleProbe(), drain_limit=2.0, thaw_seconds=1.0, retry_drain=1.0, busy_limit=60.0)
    process, hold = _frozen_spinner(6.0, gate)
    process.kill()
    process.wait()
    assert not hold.busy and hold.drain_note == "" and hold.drained >= 2.0, hold

    gate = GpuGate(gpu_idle.IdleProbe(), drain_limit=1.0, thaw_seconds=0.5, retry_drain=0.5, busy_limit=4.0)
    process, hold = _frozen_spinner(600.0, gate)
    process.kill()
    process.wait()
    assert hold.busy and "still busy after" in hold.drain_note, hold
