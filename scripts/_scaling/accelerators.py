"""Facts about the accelerators this process will see: which platform (CUDA, ROCm, XPU, NPU,
MPS or none), its devices, and what the *_VISIBLE_DEVICES variables leave of them.

`kind` names the platform whose software or driver is present; `devices` are the devices of that
kind this process will see (possibly none); `physical_device_count` is how many exist before the
visibility variables apply (None where it cannot be told)."""

from __future__ import annotations

import os
import platform
import re

from .files import read_text

# Variables that hide devices, per platform, in the order the runtime applies them.
VISIBILITY_VARIABLES = {
    "cuda": ("CUDA_VISIBLE_DEVICES",),
    "rocm": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "xpu": ("ZE_AFFINITY_MASK",),
    "npu": ("ASCEND_RT_VISIBLE_DEVICES",),
}
INTEL_VENDOR = "0x8086"


def collect_accelerators(
    nvml: dict, packages: dict, torch_build: dict, environ: dict, sysroot: str = "/"
) -> dict:
    """NVML's answer (or nvidia-smi's) decides CUDA; otherwise the other platforms are looked
    for on disk under `sysroot`. A probe that timed out makes the kind "unknown", not "cpu"."""
    acc = {
        "kind": "cpu",
        "driver_version": nvml.get("driver_version"),
        "cuda_driver_version": nvml.get("cuda_driver_version"),
        "devices": [],
        "physical_device_count": len(nvml.get("devices") or []),
        # None: unknown (nvidia-smi has no link data; a failed probe has none at all)
        "topology": nvml.get("topology") if nvml.get("devices") or nvml.get("error") else [],
        "error": nvml.get("error"),
        "source": nvml.get("source", "nvml"),
        "visibility": {
            "CUDA_VISIBLE_DEVICES": environ.get("CUDA_VISIBLE_DEVICES"),
            "CUDA_DEVICE_ORDER": environ.get("CUDA_DEVICE_ORDER"),
            "problems": [],
        },
    }
    if nvml.get("devices"):
        return _with_visible(acc, "cuda", nvml["devices"], environ)
    kind, devices = other_platform(packages, torch_build, sysroot)
    if kind == "cpu" and nvml.get("timed_out"):
        acc["kind"] = "unknown"  # a hung driver says nothing about what is installed
        return acc
    if kind in ("cpu", "mps"):
        acc.update(kind=kind, devices=devices, physical_device_count=len(devices))
        return acc
    acc["physical_device_count"] = len(devices)
    return _with_visible(acc, kind, devices, environ)


def _with_visible(acc: dict, kind: str, devices: list, environ: dict) -> dict:
    visible, problems = list(devices), []
    for name in VISIBILITY_VARIABLES[kind]:
        value = environ.get(name)
        acc["visibility"][name] = value
        if value is not None:
            visible, more = parse_visible_devices(name, value, visible)
            problems += more
    if kind == "cuda":
        problems += order_problems(devices, environ)
    acc.update(kind=kind, devices=visible)
    acc["visibility"]["problems"] = problems
    return acc


def parse_visible_devices(variable: str, value: str, devices: list) -> tuple:
    """Apply a *_VISIBLE_DEVICES value to a device list; returns (visible, problems).
    Follows torch 2.13.0 torch/cuda/__init__.py _parse_visible_devices: entries are read like
    strtoul ("1gpu" is 1), a negative or unknown entry ends the list, and a repeated entry
    leaves no device at all."""
    if not value.strip():
        return [], [f"{variable} is set to an empty string: no device is visible"]
    visible, problems = [], []
    for token in (t.strip() for t in value.split(",")):
        match = _match_device(token, devices)
        if match is None:
            problems.append(
                f"{variable} entry '{token}' matches no device; the runtime ignores it and "
                "every entry after it"
            )
            break
        if any(match is seen for seen in visible):
            problems.append(
                f"{variable}={value} lists device '{token}' twice: the runtime then sees no "
                "device at all"
            )
            return [], problems
        visible.append(match)
    return visible, problems


def _match_device(token: str, devices: list) -> dict | None:
    if token.startswith("GPU-"):
        return next((d for d in devices if (d.get("uuid") or "").startswith(token)), None)
    if token.startswith("MIG-"):
        return _mig_slice(devices, token)
    digits = re.match(r"\+?\d+", token)
    if not digits:
        return None
    # An ordinal counts among the devices still visible: a variable applied after another
    # (ROCR, then HIP) renumbers from 0; CUDA's list starts in NVML index order.
    position = int(digits.group())
    return devices[position] if position < len(devices) else None


def _mig_slice(devices: list, token: str) -> dict | None:
    for dev in devices:
        for mig in dev.get("mig_devices") or []:
            if (mig.get("uuid") or "").startswith(token):
                return dict(
                    dev, memory_total_mib=mig.get("memory_total_mib"), mig_slice=mig["uuid"]
                )
    return None


def order_problems(devices: list, environ: dict) -> list:
    names = {d.get("name") for d in devices}
    if len(names) > 1 and environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return [
            "mixed GPU models: CUDA numbers devices fastest-first while NVML/nvidia-smi use PCI "
            "order; set CUDA_DEVICE_ORDER=PCI_BUS_ID so indices agree"
        ]
    return []


# --------------------------------------------------------------------------------------
# Platforms other than CUDA, from files on disk (nothing imported, no device opened)
# --------------------------------------------------------------------------------------


def other_platform(packages: dict, torch_build: dict, sysroot: str = "/") -> tuple:
    """(kind, devices) for ROCm, MPS, XPU or NPU; ("cpu", []) when none is present."""
    root = sysroot.rstrip("/") or ""
    rocm_devices = rocm_gpus(root)
    if rocm_devices or torch_build.get("hip") or _exists(root, "/opt/rocm", "/sys/class/kfd"):
        return "rocm", rocm_devices
    if platform.system() == "Darwin" and platform.machine().lower() in ("arm64", "aarch64"):
        name = f"Apple {platform.machine().lower()} (MPS)"
        return "mps", [{"index": 0, "name": name, "memory_total_mib": ram_mib()}]
    intel = (packages.get("intel-extension-for-pytorch") or {}).get("installed")
    if intel or torch_build.get("xpu"):
        return "xpu", intel_gpus(root)
    npus = ascend_npus(root)
    if (
        npus
        or (packages.get("torch-npu") or {}).get("installed")
        or _exists(root, "/usr/local/Ascend")
    ):
        return "npu", npus
    return "cpu", []


def _exists(root: str, *paths: str) -> bool:
    return any(os.path.exists(root + p) for p in paths)


def rocm_gpus(root: str = "") -> list:
    """AMD GPUs from the KFD topology (CPU nodes have gfx_target_version 0)."""
    base = root + "/sys/class/kfd/kfd/topology/nodes"
    try:
        nodes = sorted(os.listdir(base), key=lambda n: int(n) if n.isdigit() else 0)
    except OSError:
        return []
    devices = []
    for node in nodes:
        props = read_text(os.path.join(base, node, "properties")) or ""
        target = re.search(r"^gfx_target_version\s+(\d+)", props, re.MULTILINE)
        if target and int(target.group(1)) > 0:
            v = int(target.group(1))
            gfx = f"gfx{v // 10000}{(v // 100) % 100:x}{v % 100:x}"
            devices.append({"index": len(devices), "name": gfx, "gfx_target": gfx})
    return devices


def intel_gpus(root: str = "") -> list:
    """Intel GPUs: DRM render nodes whose PCI vendor is Intel."""
    base = root + "/sys/class/drm"
    try:
        names = sorted(n for n in os.listdir(base) if re.fullmatch(r"renderD\d+", n))
    except OSError:
        return []
    devices = []
    for name in names:
        vendor = (read_text(os.path.join(base, name, "device", "vendor")) or "").strip()
        if vendor == INTEL_VENDOR:
            devices.append({"index": len(devices), "name": f"Intel GPU ({name})"})
    return devices


def ascend_npus(root: str = "") -> list:
    """Ascend NPUs: /dev/davinci<N> device nodes (davinci_manager and friends excluded)."""
    try:
        names = os.listdir(root + "/dev")
    except OSError:
        return []
    numbers = sorted(int(n[7:]) for n in names if re.fullmatch(r"davinci\d+", n))
    return [{"index": i, "name": f"Ascend NPU (davinci{n})"} for i, n in enumerate(numbers)]


def ram_mib() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):
        return None
