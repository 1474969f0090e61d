"""Which machine a run's figures come from: the GPU's name, else the CPU's, and its slug for a branch.

    exp/<slug>/<tag>      e.g. exp/nvidia-h200/may29, exp/amd-epyc-7763/may29

Figures from different machines are never comparable (the budget is wall-clock seconds), so the
report says the hardware beside the budget and the data, and `--branches` files the final best
under the hardware's name, as the reference's `exp/<GPU>/<tag>` branches do.
"""
from __future__ import annotations

import re
import sys
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
