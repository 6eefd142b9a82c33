"""A one-node Slurm cluster on this machine, for the Slurm tests: munge, slurmctld and slurmd as root, with a
configuration of their own in a temporary folder (SLURM_CONF points every Slurm command at it).

It needs Debian's slurm-wlm and munge (``.ci/run`` installs them as root) and root itself: the daemons run as
root with ``proctrack/linuxproc`` and ``task/none``, so no cgroup setup is needed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def unavailable() -> str | None:
    """None when a cluster can be started here; otherwise why not."""
    missing = [name for name in (*DAEMONS, "sbatch", "squeue", "sinfo") if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the Slurm daemons of the test cluster run as root"
    return None


def _config(folder: Path) -> str:
    host = socket.gethostname().split(".")[0]
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return "\n".join([
        "ClusterName=course-test", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "SchedulerType=sched/backfill",
        "MpiDefault=none", "ReturnToService=2", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SlurmctldPort=16817", "SlurmdPort=16818",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
        f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory - 512} State=UNKNOWN",
        "PartitionName=course Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""])


def _munge_answers() -> bool:
    """Whether a munged answers on its socket: a credential made and read back (a socket file alone can be a dead
    daemon's, left by a machine restored from an image)."""
    made = subprocess.run(["munge", "-n"], capture_output=True, timeout=30)
    return made.returncode == 0 and subprocess.run(["unmunge"], input=made.stdout, capture_output=True,
                                                   timeout=30).returncode == 0


def _ensure_munge() -> None:
    if _munge_answers():
        return
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    # --force: take over a dead daemon's socket and lock file
    subprocess.run(["runuser", "-u", "munge", "--", "munged", "--force"], check=True)
    if not _munge_answers():
        log = Path("/var/log/munge/munged.log")
        raise RuntimeError("munged started but does not answer:\n" +
                           (log.read_text(errors="replace")[-800:] if log.exists() else "(no munged.log)"))


class Cluster:
    """Started by ``start()``, stopped by ``stop()``; ``env`` is what Slurm commands need (SLURM_CONF)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._daemons: list[subprocess.Popen] = []

    def start(self, timeout: float = 60.0) -> None:
        for sub in ("state", "spool"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(_config(self.folder), encoding="utf-8")
        _ensure_munge()
        for daemon in ("slurmctld", "slurmd"):
            log = open(self.folder / f"{daemon}.out", "w")  # noqa: SIM115 (the daemon's lifetime)
            self._daemons.append(subprocess.Popen([shutil.which(daemon), "-D"], env=self.env, stdout=log,
                                                  stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
            if state.returncode == 0 and state.stdout.strip() in ("idle", "mix", "alloc"):
                return
            if any(d.poll() is not None for d in self._daemons):
                break
            time.sleep(0.5)
        self.stop()
        logs = "\n".join((self.folder / f"{d}.log").read_text(errors="replace")[-800:]
                         for d in ("slurmctld", "slurmd") if (self.folder / f"{d}.log").exists())
        raise RuntimeError(f"the test cluster did not come up in {timeout:g} s:\n{logs}")

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True)
        for daemon in self._daemons:
            daemon.terminate()
        for daemon in self._daemons:
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
        self._daemons.clear()
