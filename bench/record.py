"""Where every benchmark's figures go: ``bench/results/NAME.json``, with what ran, where and when.

Each file holds the suite's title, the command that ran it (with the ``CHUNKTREE_BENCH_*``
settings), the date, the git commit (and whether the code that ran differed from it), the machine
(CPU model and the flags that decide which kernels run, cores, memory, BLAS), the versions of the
libraries measured, the summary lines the suite printed, and its raw results. ``bench/render.py``
renders ``docs/benchmarks.md`` and the README's headline table from these files alone.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from chunktree.engine.results import finite

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROOT = RESULTS_DIR.parents[1]

# The CPU flags that decide which kernels numpy, onnxruntime, OpenVINO and faiss run.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "avx512_fp16", "amx_tile", "amx_bf16",
             "amx_int8")
# The libraries whose versions a figure depends on; those not installed are left out.
PACKAGES = ("chunktree", "numpy", "numba", "scipy", "onnxruntime", "openvino", "tokenizers", "faiss-cpu",
            "scikit-learn", "pynndescent", "networkx", "torch", "sentence-transformers", "fastembed", "ray",
            "starlette", "uvicorn", "semantic-text-splitter", "sentencex", "pysbd")


def machine() -> dict[str, Any]:
    """This machine: CPU model and flags, cores, memory, OS, and the BLAS numpy runs."""
    info: dict[str, Any] = {"platform": platform.platform(), "cores": os.cpu_count(),
                            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        flags = set(fields.get("flags", "").split())
        info["cpu"] = fields.get("model name", platform.processor())
        info["cpu_flags"] = [f for f in CPU_FLAGS if f in flags]
    except OSError:
        info["cpu"], info["cpu_flags"] = platform.processor(), []
    try:
        meminfo = Path("/proc/meminfo").read_text().split()
        info["memory_gib"] = round(int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20, 1)
    except (OSError, ValueError):
        info["memory_gib"] = None
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = sorted({f"{p['internal_api']} {p.get('version')} ({p['num_threads']} threads)"
                               for p in threadpool_info()})
    except ImportError:
        info["blas"] = []
    info["env"] = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OMP_NUM_THREADS") if k in os.environ}
    return info


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def commit(name: str) -> dict[str, Any]:
    """The git commit the code ran at, and whether the code that ran (the package, the suite and
    the benchmark harness) differed from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    code = ["chunktree", f"bench/{name}.py", "bench/conftest.py", "bench/record.py"]
    try:
        changed = git("status", "--porcelain", "--untracked-files=all", "--", *code)
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(changed)}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def jsonable(value: Any) -> Any:
    """Results as strict JSON: tuple keys joined by '/', the values through chunktree's own
    ``finite`` (NumPy values as Python ones, NaN as null)."""
    if isinstance(value, dict):
        return {"/".join(map(str, k)) if isinstance(k, tuple) else str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return finite(value)


def title(doc: str | None, default: str) -> str:
    """A suite's title: the first paragraph of its module docstring, on one line."""
    return " ".join((doc or default).strip().split("\n\n")[0].split())


def write(name: str, title: str, command: str, summary: list[str], results: dict[str, Any]) -> Path:
    """Write ``bench/results/NAME.json`` and return its path. A run with ``CHUNKTREE_BENCH_*``
    settings (larger sizes) goes to a file of its own, ``NAME--SETTING-VALUE....json``, so it
    does not replace the default run's; a ``..._DIR`` setting says where data lives, not what is
    measured, and is left out."""
    settings = {k: v for k, v in sorted(os.environ.items()) if k.startswith("CHUNKTREE_BENCH") and not k.endswith("_DIR")}
    variant = "".join(f"--{k.removeprefix('CHUNKTREE_BENCH_').lower()}-{v}" for k, v in settings.items())
    doc = {"suite": name, "variant": variant.lstrip("-"), "title": title,
           "command": " ".join([*(f"{k}={v}" for k, v in settings.items()), command]),
           "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
           **commit(name), "machine": machine(), "versions": versions(), "summary": summary,
           "results": jsonable(results)}
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}{variant}.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
    return path
