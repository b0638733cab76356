"""Every accelerator kind, with devices and with none visible: what the collector reads from a
fake system tree, and how the judge rates the GPU backends on it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import script_modules  # noqa: F401  (puts scripts/ on sys.path)
from _scaling import accelerators, verdicts

FIXTURES = Path(__file__).parent / "fixtures" / "check_facts"
NO_PACKAGES: dict = {}
CPU_TORCH = {"version": "2.13.0", "cuda": None, "hip": None, "xpu": None, "variant": "cpu"}
HIP_TORCH = dict(CPU_TORCH, hip="6.4.43484", variant="rocm")
XPU_TORCH = dict(CPU_TORCH, xpu="20250101", variant="xpu")


def write(root: Path, rel: str, text: str = "") -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def kfd_node(root: Path, node: int, gfx_target: int) -> None:
    props = f"cpu_cores_count 0\ngfx_target_version {gfx_target}\nsimd_count 304\n"
    write(root, f"/sys/class/kfd/kfd/topology/nodes/{node}/properties", props)


def collect(root: Path, torch_build=CPU_TORCH, packages=NO_PACKAGES, environ=None) -> dict:
    nvml = {"error": "NVML Shared Library Not Found", "init_failed": True}
    return accelerators.collect_accelerators(
        nvml, packages, torch_build, environ or {}, sysroot=str(root)
    )


# --------------------------------------------------------------------------------------
# Collector: platforms found on disk
# --------------------------------------------------------------------------------------


def test_rocm_gpus_from_kfd_topology_and_visibility_chain(tmp_path):
    kfd_node(tmp_path, 0, 0)  # the CPU node
    for node in (1, 2, 3):
        kfd_node(tmp_path, node, 90402)  # MI300X: gfx942
    acc = collect(tmp_path, HIP_TORCH)
    assert acc["kind"] == "rocm" and acc["physical_device_count"] == 3
    assert [d["name"] for d in acc["devices"]] == ["gfx942"] * 3
    # ROCR narrows first, HIP then counts among what is left (ordinal 0 = GPU 2).
    acc = collect(
        tmp_path, HIP_TORCH, environ={"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1"}
    )
    assert [d["index"] for d in acc["devices"]] == [2]
    acc = collect(tmp_path, HIP_TORCH, environ={"HIP_VISIBLE_DEVICES": "0,0"})
    assert acc["devices"] == [] and "twice" in acc["visibility"]["problems"][0]


def test_rocm_software_without_a_gpu_is_rocm_with_no_device(tmp_path):
    write(tmp_path, "/opt/rocm/.info/version", "6.4.0")
    acc = collect(tmp_path)
    assert acc["kind"] == "rocm" and acc["devices"] == [] and acc["physical_device_count"] == 0


def test_intel_gpus_are_render_nodes_with_intel_vendor(tmp_path):
    for name, vendor in (
        ("renderD128", "0x8086"),
        ("renderD129", "0x10de"),
        ("renderD130", "0x8086"),
    ):
        write(tmp_path, f"/sys/class/drm/{name}/device/vendor", vendor + "\n")
    write(tmp_path, "/sys/class/drm/card0/device/vendor", "0x8086\n")
    acc = collect(tmp_path, XPU_TORCH)
    assert acc["kind"] == "xpu"
    assert [d["name"] for d in acc["devices"]] == [
        "Intel GPU (renderD128)",
        "Intel GPU (renderD130)",
    ]
    acc = collect(tmp_path, XPU_TORCH, environ={"ZE_AFFINITY_MASK": "1"})
    assert [d["name"] for d in acc["devices"]] == ["Intel GPU (renderD130)"]
    assert collect(tmp_path / "none", XPU_TORCH)["devices"] == []


def test_ascend_npus_are_davinci_device_nodes(tmp_path):
    for name in ("davinci0", "davinci1", "davinci2", "davinci3", "davinci_manager", "devmm_svm"):
        write(tmp_path, f"/dev/{name}")
    packages = {"torch-npu": {"installed": True, "version": "2.6.0"}}
    acc = collect(tmp_path, packages=packages)
    assert acc["kind"] == "npu" and len(acc["devices"]) == 4
    acc = collect(tmp_path, packages=packages, environ={"ASCEND_RT_VISIBLE_DEVICES": "2,3"})
    assert [d["name"] for d in acc["devices"]] == ["Ascend NPU (davinci2)", "Ascend NPU (davinci3)"]
    assert collect(tmp_path / "none", packages=packages)["devices"] == []


def test_mps_is_one_device_on_apple_silicon(tmp_path, monkeypatch):
    monkeypatch.setattr(accelerators.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(accelerators.platform, "machine", lambda: "arm64")
    acc = collect(tmp_path)
    assert acc["kind"] == "mps" and len(acc["devices"]) == 1


def test_nothing_found_is_cpu_and_a_hung_probe_is_unknown(tmp_path):
    assert collect(tmp_path)["kind"] == "cpu"
    hung = {"error": "NVML probe timeout: no answer after 15 s", "timed_out": True}
    acc = accelerators.collect_accelerators(hung, NO_PACKAGES, CPU_TORCH, {}, sysroot=str(tmp_path))
    assert acc["kind"] == "unknown"


@pytest.mark.parametrize(
    ("value", "visible", "problem"),
    [
        ("5,2", [5, 2], None),
        ("1gpu,3", [1, 3], None),  # read like strtoul: "1gpu" is 1
        ("0,bogus,1", [0], "'bogus' matches no device"),
        ("0,0", [], "twice"),
        ("9", [], "'9' matches no device"),
        ("", [], "empty string"),
        ("-1,2", [], "'-1' matches no device"),
    ],
)
def test_cuda_visible_devices_follow_torch(value, visible, problem):
    devices = [{"index": i, "uuid": f"GPU-{i:08d}"} for i in range(8)]
    seen, problems = accelerators.parse_visible_devices("CUDA_VISIBLE_DEVICES", value, devices)
    assert [d["index"] for d in seen] == visible
    assert (problem is None and not problems) or (problem and problem in problems[0])


# --------------------------------------------------------------------------------------
# Judge: GPU backends on each kind, with and without visible devices
# --------------------------------------------------------------------------------------

GPU_BACKENDS = ("deepspeed", "fsdp2", "nccl", "vllm")
KINDS = {
    # kind: (fixture to start from, torch build, backends that must not be unavailable with devices)
    "cuda": ("h100_8x_nvlink", None, GPU_BACKENDS),
    "rocm": ("mi300x_8x", None, GPU_BACKENDS),
    "xpu": ("h100_8x_nvlink", XPU_TORCH, ("deepspeed", "fsdp2", "vllm")),
    "npu": ("h100_8x_nvlink", CPU_TORCH, ("deepspeed", "fsdp2", "vllm")),
    "mps": ("apple_m3_mps", None, ("peft", "bf16")),
}


def facts_for(kind: str, devices: int) -> dict:
    fixture, torch_build, _ = KINDS[kind]
    data = json.loads((FIXTURES / f"{fixture}.json").read_text())
    if torch_build:
        data["torch_build"] = copy.deepcopy(torch_build)
    acc = data["accelerators"]
    template = (acc.get("devices") or [{"name": f"{kind} device"}])[0]
    acc.update(kind=kind, physical_device_count=devices)
    acc["devices"] = [dict(template, index=i) for i in range(devices)]
    return data


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_backends_with_devices_are_usable(kind):
    verdict = verdicts.judge(facts_for(kind, 8 if kind != "mps" else 1))["backends"]
    for name in KINDS[kind][2]:
        assert verdict[name]["status"] != "unavailable", (kind, name, verdict[name])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_visible_device_makes_gpu_backends_unavailable(kind):
    verdict = verdicts.judge(facts_for(kind, 0))["backends"]
    for name in KINDS[kind][2]:
        if name == "peft":
            continue  # runs on any kind, the CPU included
        assert verdict[name]["status"] == "unavailable", (kind, name, verdict[name])
        assert any(f"no {kind} device visible" in r for r in verdict[name]["reasons"]), verdict[
            name
        ]


def test_hidden_devices_name_the_variable():
    data = facts_for("rocm", 0)
    data["accelerators"]["physical_device_count"] = 8
    data["accelerators"]["visibility"] = {"HIP_VISIBLE_DEVICES": "", "problems": []}
    verdict = verdicts.judge(data)["backends"]["nccl"]
    assert verdict["status"] == "unavailable" and "HIP_VISIBLE_DEVICES" in verdict["next_step"]


def test_unknown_kind_is_not_rated_as_a_cpu():
    data = facts_for("cuda", 0)
    data["accelerators"].update(kind="unknown", error="nvidia-smi gave no answer after 15 s")
    verdict = verdicts.judge(data)["backends"]
    for name in GPU_BACKENDS:
        assert verdict[name]["status"] != "ready"
        assert any("cannot tell which GPUs" in r for r in verdict[name]["reasons"]), verdict[name]
