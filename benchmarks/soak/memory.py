"""GPU memory in use and the server's host RSS, sampled from outside the server."""

from __future__ import annotations

import subprocess

import psutil

from benchmarks.soak.summary import MemorySample


def gpu_used_mib() -> float | None:
    """Memory used on every visible GPU together (nvidia-smi); None without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = [float(line) for line in out.split() if line.strip()]
    return sum(values) if values else None


def host_rss_mib(pid: int | None) -> float | None:
    """RSS of the server process and all its children (engine core, workers)."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def sample_memory(server_pid: int | None) -> MemorySample:
    return MemorySample(gpu_mib=gpu_used_mib(), host_rss_mib=host_rss_mib(server_pid))
