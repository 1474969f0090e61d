"""Which machine a run's figures come from: the GPU's name, else the CPU's, and its slug for a branch.

    exp/<slug>/<tag>      e.g. exp/nvidia-h200/may29, exp/amd-epyc-7763/may29

Figures from different machines are never comparable (the budget is wall-clock seconds), so the
report says the hardware beside the budget and the data, and `--branches` files the final best
under the hardware's name, as the reference's `exp/<GPU>/<tag>` branches do.
"""
from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# Where a CUDA driver shows itself (NVIDIA's device nodes and its /proc folder; WSL2's dxg node;
# ROCm's kfd node).
# Without any of them no CUDA device can be found, so importing torch to ask (~2 s of every loop's
# end-of-run report on a CPU machine) is skipped.
GPU_DRIVER_PATHS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/dxg", "/dev/kfd")
# Words of a marketing name that tell nothing apart ("Intel(R) Xeon(R) CPU @ 2.90GHz").
NOISE = re.compile(r"\((?:r|tm|c)\)|\b(?:cpu|processor)\b|@.*$|\d+-core", re.IGNORECASE)
# Longest slug: one path component of a branch name, readable in `git branch`.
MAX_SLUG = 40


def gpu_driver_present() -> bool:
    return any(Path(p).exists() for p in GPU_DRIVER_PATHS)


def gpu_name() -> str | None:
    """The first CUDA device's name, or None (no torch, no GPU; no driver: torch is not imported)."""
    if "torch" not in sys.modules and not gpu_driver_present():
        return None
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:   # a broken driver is "no GPU" here, never a failed report
        return None
    return None


def cpu_name(cpuinfo: Path = CPUINFO) -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux), or None."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return None


def detect() -> dict:
    """{"kind": "gpu"|"cpu"|"unknown", "name": ..., "slug": ...} of this machine."""
    gpu = gpu_name()
    if gpu:
        return {"kind": "gpu", "name": gpu, "slug": slug(gpu)}
    cpu = cpu_name()
    if cpu:
        return {"kind": "cpu", "name": cpu, "slug": slug(cpu)}
    import platform
    name = platform.machine() or "unknown"
    return {"kind": "unknown", "name": name, "slug": slug(name)}


def slug(name: str) -> str:
    """A branch-safe, lowercase name: "NVIDIA H200" -> "nvidia-h200"."""
    text = NOISE.sub(" ", name)
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return out[:MAX_SLUG].strip("-") or "unknown"


def branch_for(hw_slug: str, tag: str) -> str:
    return f"exp/{hw_slug}/{tag}"


# ---- How busy the machine is when a tag starts, and the torch threads its CPU runs get.
#
# On a CPU, a run with more torch threads than the cores other work leaves free waits on its own
# threads at every operation (measured on 2 cores with one busy: 2 threads ~9x slower than 1). So a
# cpu or tiny tag gives every run and every trusted evaluation the free cores measured when it
# starts (a core at least FREE_ENOUGH idle counts), recorded in run.json so the tag keeps one count
# on --resume; a change of load later is the judge's to see (disturbed runs), never a new count.
# AUTORESEARCH_THREADS, when set, wins.

# Seconds the machine is watched before the tag's first run.
WATCH_S = 1.0
# A core this idle (fraction of it free) counts as free.
FREE_ENOUGH = 0.75


@dataclass(frozen=True)
class MachineNow:
    cores: int
    busy: float | None        # cores other work kept busy while watched (None: not watched, or unreadable)

    @property
    def threads(self) -> int:
        """Torch threads for a run here: the free cores, at least one."""
        if self.busy is None:
            return self.cores
        return max(1, min(self.cores, int(self.cores - self.busy + (1 - FREE_ENOUGH))))

    def said(self, threads: int) -> str:
        if self.busy is None:
            return f"this machine: {self.cores} cores, {threads} torch thread(s) per run (AUTORESEARCH_THREADS)"
        return (f"this machine as it is now: {self.cores} cores, {self.busy:.1f} busy with other work, "
                f"{threads} torch thread(s) per run")


def machine_now(seconds: float = WATCH_S, given: int | None = None) -> MachineNow:
    """The machine's cores and how many of them other work keeps busy, over `seconds` (call it
    while nothing of this tag runs); not watched when the threads are `given` (AUTORESEARCH_THREADS)."""
    from harness.procs import busy_of, ncpu
    if given:
        return MachineNow(cores=ncpu(), busy=None)

    def ticks():
        try:
            with open("/proc/stat") as f:
                return busy_of(f.readline())
        except OSError:
            return None
    a, t0 = ticks(), time.monotonic()
    time.sleep(seconds)
    b, dt = ticks(), time.monotonic() - t0
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = None if a is None or b is None or dt <= 0 else max(0.0, (b - a) / hz / dt)
    return MachineNow(cores=ncpu(), busy=busy)
