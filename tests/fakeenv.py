"""Builders for fabricated site directories and a fake NVML, used to run
scripts/check_optional_backends.py against environments that cannot exist on a CPU box."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "check_optional_backends.py"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))

# Module bodies reproducing failures seen in the wild.
IMPORT_OSERROR = (
    "raise OSError('libcudart.so.12: cannot open shared object file: No such file or directory')\n"
)
IMPORT_HANGS = "import time\nwhile True:\n    time.sleep(60)\n"
IMPORT_SEGFAULTS = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
IMPORT_KILLED = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"


def add_dist(
    site: Path,
    name: str,
    version: str | None,
    module: str | None = None,
    code: str = "",
    requires: tuple[str, ...] = (),
    editable_target: str | None = None,
    metadata: str | None = None,
) -> Path:
    """A `<name>-<version>.dist-info` (METADATA, optional direct_url.json) plus a module."""
    stem = name.replace("-", "_")
    info = site / f"{stem}-{version or '0'}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    if metadata is None:
        lines = ["Metadata-Version: 2.1", f"Name: {name}"]
        if version is not None:
            lines.append(f"Version: {version}")
        lines += [f"Requires-Dist: {r}" for r in requires]
        metadata = "\n".join(lines) + "\n"
    (info / "METADATA").write_text(metadata)
    if editable_target:
        direct = {"url": f"file://{editable_target}", "dir_info": {"editable": True}}
        (info / "direct_url.json").write_text(json.dumps(direct))
    if module:
        pkg = site / module
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").write_text(code or f"__version__ = {version!r}\n")
    return info


FAKE_PYNVML = '''
"""Fake pynvml driven by fake_nvml.json next to this file."""
import json, os, time

_SPEC = json.load(open(os.path.join(os.path.dirname(__file__), "fake_nvml.json")))
NVML_NVLINK_MAX_LINKS = 18
NVML_P2P_CAPS_INDEX_NVLINK = 3


class NVMLError(Exception):
    pass


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def nvmlInit():
    if _SPEC.get("pidfile"):
        with open(_SPEC["pidfile"], "a") as fh:
            fh.write("%d\\n" % os.getpid())
    if _SPEC.get("hang"):
        while True:
            time.sleep(60)
    if _SPEC.get("error"):
        raise NVMLError(_SPEC["error"])


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return _SPEC["driver"]


def nvmlSystemGetCudaDriverVersion_v2():
    return _SPEC["cuda"]


def nvmlDeviceGetCount():
    return len(_SPEC["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    return ("gpu", i)


def _gpu(h):
    if h[0] == "mig":
        return _SPEC["gpus"][h[1]]["migs"][h[2]]
    return _SPEC["gpus"][h[1]]


def nvmlDeviceGetName(h):
    return _gpu(h)["name"]


def nvmlDeviceGetUUID(h):
    return _gpu(h)["uuid"]


def nvmlDeviceGetPciInfo(h):
    return _Obj(busId=("00000000:%02X:00.0" % (0x18 + h[1])).encode())


def nvmlDeviceGetMemoryInfo(h):
    total = _gpu(h)["mib"] * 2**20
    used = _gpu(h).get("used_mib", 0) * 2**20
    return _Obj(total=total, used=used, free=total - used)


def nvmlDeviceGetCudaComputeCapability(h):
    return tuple(_gpu(h)["cc"])


def nvmlDeviceGetMigMode(h):
    return [1 if _gpu(h).get("migs") else 0, 0]


def nvmlDeviceGetComputeRunningProcesses(h):
    return [_Obj(pid=p, usedGpuMemory=1024 * 2**20) for p in _gpu(h).get("pids", [])]


def nvmlDeviceGetNvLinkState(h, link):
    if link < _gpu(h).get("links", 0):
        return 1
    raise NVMLError("Not Supported")


def nvmlDeviceGetMaxMigDeviceCount(h):
    return len(_gpu(h).get("migs", []))


def nvmlDeviceGetMigDeviceHandleByIndex(h, j):
    return ("mig", h[1], j)


def nvmlDeviceGetTopologyCommonAncestor(a, b):
    return 40


def nvmlDeviceGetP2PStatus(a, b, index):
    return 0 if _gpu(a).get("links") and _gpu(b).get("links") else 5
'''


def h100_node(count: int = 8, links: int = 18) -> dict:
    gpus = [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": f"GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd",
            "mib": 81559,
            "cc": [9, 0],
            "links": links,
        }
        for i in range(count)
    ]
    return {"driver": "570.133.20", "cuda": 12080, "gpus": gpus}


def add_fake_nvml(site: Path, spec: dict) -> None:
    """Shadow the real pynvml (nvidia-ml-py stays installed in the venv) with a fake one."""
    pkg = site / "pynvml"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(FAKE_PYNVML)
    (pkg / "fake_nvml.json").write_text(json.dumps(spec))


def cuda_site(site: Path, gpus: dict | None = None) -> Path:
    """A CUDA box in miniature: torch cu128 build, TRL 1.16.0 stack metadata, fake NVML."""
    add_dist(site, "torch", "2.10.0+cu128", module="torch")
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.10.0+cu128'\ncuda: Optional[str] = '12.8'\n"
        "hip: Optional[str] = None\n"
    )
    for name, version in (("trl", "1.16.0"), ("accelerate", "1.15.0"), ("transformers", "5.24.0")):
        add_dist(site, name, version)
    add_dist(site, "nvidia-ml-py", "13.580.82")
    add_fake_nvml(site, gpus or h100_node())
    return site


def run_check(
    *args: str,
    site: Path | str | None = None,
    isolated: bool = False,
    flags: tuple = (),
    env: dict | None = None,
    timeout: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess:
    """Run the script as a user would. `isolated` = `python -S`: only `site` and the stdlib;
    `flags` are more interpreter options (e.g. "-I")."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "HF_", "PYTHON"))}
    full_env["HF_HOME"] = str(Path(cwd or REPO) / ".no-hf-home")
    if site is not None:
        full_env["PYTHONPATH"] = str(site)
    full_env.update(env or {})
    cmd = [PYTHON, *(["-S"] if isolated else []), *flags, str(SCRIPT), *args]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=str(cwd or REPO),
    )


def run_json(*args: str, **kwargs) -> dict:
    proc = run_check("--json", *args, **kwargs)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
