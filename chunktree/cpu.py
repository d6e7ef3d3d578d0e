"""What this machine's CPU can do: its physical cores, AMX, and OpenVINO with the CPU's bf16 units.

A base module, below every layer: the kernels' bf16 products (``kernels.bf16``) and the embedding
runtimes (``models.backends``) both decide from it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def physical_cores() -> int:
    """The physical cores this process may run on (hyperthread siblings count once): the runtimes'
    default thread count."""
    try:
        cpus = os.sched_getaffinity(0)
        siblings = {Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
                    for cpu in cpus}
        return max(1, len(siblings))
    except (AttributeError, OSError):  # not Linux
        return max(1, (os.cpu_count() or 2) // 2)


def has_amx() -> bool:
    """Whether the CPU has AMX bf16 tiles (Linux: the ``amx_bf16`` flag of ``/proc/cpuinfo``;
    elsewhere False)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.startswith("flags") and "amx_bf16" in line.split() for line in f)
    except OSError:
        return False


def openvino_core() -> tuple[Any, str | None]:
    """OpenVINO's ``Core``, or None and the reason it cannot load on this machine."""
    try:
        import openvino
    except ImportError as exc:  # no wheel for this platform, or not installed
        return None, f"OpenVINO is not installed ({exc}); pip install openvino"
    try:
        core = openvino.Core()
        core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception as exc:  # a CPU its plugin refuses
        return None, f"OpenVINO cannot use this CPU ({exc})"
    return core, None


def has_bf16_units(core: Any) -> bool:
    """Whether OpenVINO runs bf16 natively on this CPU (it lists BF16 only where the CPU has
    AVX-512 BF16 or AMX instructions)."""
    return "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
