"""check_optional_backends.py against fabricated site directories (python -S + PYTHONPATH):
vLLM inside/outside TRL's window, broken imports, hangs, crashes, odd metadata, fake NVML."""

from __future__ import annotations

import pytest
from fakeenv import (
    IMPORT_HANGS,
    IMPORT_KILLED,
    IMPORT_OSERROR,
    IMPORT_SEGFAULTS,
    add_dist,
    cuda_site,
    h100_node,
    run_check,
    run_json,
)


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("0.21.0", False),
        ("0.22.0", True),
        ("0.25.1+cu129", True),
        ("0.31.0", True),
        ("0.31.1", False),
        ("0.33.0", False),
    ],
)
def test_vllm_window_of_trl_1_16(tmp_path, version, inside):
    site = cuda_site(tmp_path)
    add_dist(site, "vllm", version, module="vllm")
    report = run_json(site=site, isolated=True)
    assert report["packages"]["vllm"]["version"] == version
    verdict = report["backends"]["vllm"]
    assert verdict["status"] == ("ready" if inside else "degraded"), verdict
    assert any("0.22.0" in r and "0.31.0" in r for r in verdict["reasons"])
    if not inside:
        assert "vllm>=0.22.0,<=0.31.0" in verdict["next_step"]


def test_unknown_trl_release_uses_newest_window_and_says_so(tmp_path):
    site = cuda_site(tmp_path)
    (site / "trl-1.16.0.dist-info" / "METADATA").write_text("Name: trl\nVersion: 1.12.0\n")
    add_dist(site, "vllm", "0.30.0", module="vllm")
    report = run_json(site=site, isolated=True)
    assert report["backends"]["vllm"]["status"] == "ready"
    assert any("trl 1.12.0 has no recorded rules" in w for w in report["warnings"])


def test_newer_trl_release_window_comes_from_its_metadata(tmp_path):
    site = cuda_site(tmp_path)
    (site / "trl-1.16.0.dist-info" / "METADATA").write_text(
        'Name: trl\nVersion: 1.17.0\nRequires-Dist: vllm<=0.33.0,>=0.24.0; extra == "vllm"\n'
    )
    add_dist(site, "vllm", "0.33.0", module="vllm")
    report = run_json(site=site, isolated=True)
    assert report["packages"]["trl"]["requires"] == [
        {"name": "vllm", "specifier": "<=0.33.0,>=0.24.0", "extra": "vllm"}
    ]
    verdict = report["backends"]["vllm"]
    assert verdict["status"] == "ready", verdict
    assert any("read from its METADATA" in w for w in report["warnings"])


def test_older_trl_release_gets_its_own_window(tmp_path):
    site = cuda_site(tmp_path)
    (site / "trl-1.16.0.dist-info" / "METADATA").write_text("Name: trl\nVersion: 1.9.0\n")
    add_dist(site, "vllm", "0.30.0", module="vllm")
    verdict = run_json(site=site, isolated=True)["backends"]["vllm"]
    assert verdict["status"] == "degraded"
    assert any("TRL 1.9" in r and "0.25.1" in r for r in verdict["reasons"])


def test_imports_report_error_timeout_and_crash_in_parallel(tmp_path):
    site = cuda_site(tmp_path)
    add_dist(site, "deepspeed", "0.18.6", module="deepspeed", code=IMPORT_OSERROR)
    add_dist(site, "vllm", "0.30.0", module="vllm", code=IMPORT_HANGS)
    add_dist(site, "flash-attn", "2.8.3", module="flash_attn", code=IMPORT_SEGFAULTS)
    add_dist(site, "liger-kernel", "0.8.2", module="liger_kernel", code=IMPORT_KILLED)
    add_dist(site, "peft", "0.21.2", module="peft")
    report = run_json("--imports", "--timeout", "3", site=site, isolated=True)
    packages = report["packages"]
    assert packages["deepspeed"]["import"]["status"] == "error"
    assert packages["deepspeed"]["import"]["detail"] == (
        "OSError: libcudart.so.12: cannot open shared object file: No such file or directory"
    )
    assert packages["vllm"]["import"]["status"] == "timeout"
    assert packages["flash-attn"]["import"] == {
        "status": "crashed",
        "detail": "killed by SIGSEGV",
        "seconds": packages["flash-attn"]["import"]["seconds"],
    }
    assert packages["liger-kernel"]["import"]["detail"] == "killed by SIGKILL"
    assert packages["peft"]["import"]["status"] == "ok"
    assert packages["peft"]["import"]["module_version"] == "0.21.2"
    backends = report["backends"]
    for name in ("deepspeed", "vllm", "flash_attn", "liger"):
        assert backends[name]["status"] == "unavailable", (name, backends[name])
    assert "libcudart.so.12" in " ".join(backends["deepspeed"]["reasons"])
    assert "--force-reinstall --no-cache-dir deepspeed" in backends["deepspeed"]["next_step"]
    assert backends["peft"]["status"] == "ready"
    # torch is imported once: its probe also reads the runtime, which this fake lacks.
    assert packages["torch"]["import"]["status"] == "ok"
    assert report["torch_runtime"] == {
        "error": "ModuleNotFoundError: No module named 'torch.distributed'"
    }
    assert backends["bf16"]["status"] == "ready" and backends["nccl"]["status"] == "ready"


def test_without_imports_nothing_is_imported(tmp_path):
    add_dist(tmp_path, "vllm", "0.30.0", module="vllm", code=IMPORT_SEGFAULTS)
    report = run_json(site=tmp_path, isolated=True)
    assert report["packages"]["vllm"]["installed"] is True
    assert "import" not in report["packages"]["vllm"]


def test_duplicate_broken_and_editable_metadata(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    add_dist(first, "peft", "0.21.2", module="peft")
    add_dist(second, "peft", "0.12.0")
    add_dist(first, "deepspeed", None, module="deepspeed")  # METADATA without Version
    add_dist(first, "liger-kernel-nightly", "0.8.3.dev20261101", module="liger_kernel")
    add_dist(first, "kernels", "0.18.2", editable_target="/src/kernels")
    (first / "kernels").mkdir()
    (first / "kernels" / "__init__.py").write_text("")
    report = run_json(site=f"{first}:{second}", isolated=True)
    peft = report["packages"]["peft"]
    assert peft["version"] == "0.21.2"
    assert [d["version"] for d in peft["duplicates"]] == ["0.12.0"]
    assert any("peft: 2 metadata records" in w for w in report["warnings"])
    deepspeed = report["packages"]["deepspeed"]
    assert deepspeed["installed"] and deepspeed["broken"] and deepspeed["version"] is None
    assert any("deepspeed: broken metadata" in w for w in report["warnings"])
    assert report["packages"]["liger-kernel-nightly"]["version"] == "0.8.3.dev20261101"
    kernels = report["packages"]["kernels"]
    assert kernels["editable"] is True and kernels["location"] == "/src/kernels"


def test_metadata_without_module_is_flagged(tmp_path):
    add_dist(tmp_path, "bitsandbytes", "0.49.0")  # dist-info left behind, package deleted
    report = run_json(site=tmp_path, isolated=True)
    assert report["packages"]["bitsandbytes"]["module_found"] is False
    assert any("module 'bitsandbytes' not found" in w for w in report["warnings"])


def test_fake_nvml_node_and_visible_devices(tmp_path):
    site = cuda_site(tmp_path)
    report = run_json(site=site, isolated=True)
    acc = report["accelerators"]
    assert acc["kind"] == "cuda"
    assert acc["driver_version"] == "570.133.20" and acc["cuda_driver_version"] == "12.8"
    assert len(acc["devices"]) == 8
    dev = acc["devices"][0]
    assert dev["compute_capability"] == "9.0" and dev["memory_total_mib"] == 81559
    assert dev["memory_free_mib"] == 81559 and dev["mig_enabled"] is False
    assert dev["nvlink_active_links"] == 18
    assert len(acc["topology"]) == 28 and all(t["nvlink"] for t in acc["topology"])
    assert report["backends"]["bf16"]["status"] == "ready"
    assert report["backends"]["fsdp2"]["status"] == "ready"

    by_index = run_json(site=site, isolated=True, env={"CUDA_VISIBLE_DEVICES": "5,2"})
    assert [d["index"] for d in by_index["accelerators"]["devices"]] == [5, 2]

    by_uuid = run_json(site=site, isolated=True, env={"CUDA_VISIBLE_DEVICES": "GPU-00000003"})
    assert [d["index"] for d in by_uuid["accelerators"]["devices"]] == [3]
    assert by_uuid["backends"]["fsdp2"]["status"] == "degraded"

    invalid = run_json(site=site, isolated=True, env={"CUDA_VISIBLE_DEVICES": "0,bogus,1"})
    assert [d["index"] for d in invalid["accelerators"]["devices"]] == [0]
    assert any("'bogus' matches no device" in w for w in invalid["warnings"])

    hidden = run_json(site=site, isolated=True, env={"CUDA_VISIBLE_DEVICES": ""})
    assert hidden["accelerators"]["devices"] == []
    assert hidden["accelerators"]["physical_device_count"] == 8
    assert hidden["backends"]["nccl"]["status"] == "unavailable"
    assert "CUDA_VISIBLE_DEVICES" in hidden["backends"]["nccl"]["next_step"]


def test_fake_nvml_mig_slice(tmp_path):
    spec = h100_node(count=1, links=0)
    spec["gpus"][0]["migs"] = [
        {"name": "MIG 1g.10gb", "uuid": "MIG-aaaa-1111", "mib": 9856, "cc": [9, 0]},
        {"name": "MIG 1g.10gb", "uuid": "MIG-bbbb-2222", "mib": 9856, "cc": [9, 0]},
    ]
    site = cuda_site(tmp_path, spec)
    report = run_json(site=site, isolated=True, env={"CUDA_VISIBLE_DEVICES": "MIG-bbbb-2222"})
    (dev,) = report["accelerators"]["devices"]
    assert dev["mig_enabled"] is True and dev["mig_slice"] == "MIG-bbbb-2222"
    assert dev["memory_total_mib"] == 9856
    assert report["backends"]["nccl"]["status"] == "degraded"


def test_nvml_hang_is_bounded_and_reported(tmp_path):
    site = cuda_site(tmp_path, {"hang": True})
    proc = run_check("--json", "--timeout", "2", site=site, isolated=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    import json

    acc = json.loads(proc.stdout)["accelerators"]
    assert acc["error"] == "NVML probe timeout: no answer after 2 s"
    assert acc["devices"] == []


def test_nvml_driver_error_is_a_fact(tmp_path):
    site = cuda_site(tmp_path, {"error": "Driver Not Loaded"})
    acc = run_json(site=site, isolated=True)["accelerators"]
    assert acc["kind"] == "cpu"
    assert acc["error"] == "NVMLError: Driver Not Loaded"


def test_torch_cpu_build_on_a_gpu_box_is_unavailable(tmp_path):
    site = cuda_site(tmp_path)
    (site / "torch" / "version.py").write_text("__version__ = '2.10.0+cpu'\ncuda = None\n")
    report = run_json(site=site, isolated=True)
    assert report["torch_build"]["variant"] == "cpu"
    fsdp2 = report["backends"]["fsdp2"]
    assert fsdp2["status"] == "unavailable"
    assert "cannot use the NVIDIA GPUs" in fsdp2["reasons"][0]


def test_text_report_on_a_gpu_node_has_a_row_per_backend(tmp_path):
    proc = run_check(site=cuda_site(tmp_path), isolated=True, env={"COLUMNS": "88"})
    assert proc.returncode == 0 and proc.stderr == ""
    assert "8x NVIDIA H100 80GB HBM3 [GPU 0,1,2,3,4,5,6,7], CC 9.0, 79.6 GiB" in proc.stdout
    assert "Need a GPU" not in proc.stdout
    starts = [line.split()[0] for line in proc.stdout.splitlines() if line[:2] == "  " != line[:3]]
    backends = "vllm deepspeed fsdp2 context_parallel ulysses peft qlora liger unsloth kernels"
    assert [s for s in starts if s in backends.split() + ["flash_attn", "bf16", "nccl"]] == (
        backends.split() + ["flash_attn", "bf16", "nccl"]
    )
    # On a CUDA node every backend's missing package is worth naming; plumbing is not.
    assert (
        "Missing for backends usable here: peft, bitsandbytes, deepspeed, vllm, liger-kernel,\n"
        "  unsloth, kernels, flash-attn\n"
    ) in proc.stdout


def test_metadata_header_reader_agrees_with_email_parser():
    """The scan reads METADATA headers by hand (the email package costs more to import than the
    whole scan); on every distribution installed here, LF or CRLF, it must read what the stdlib's
    parser reads."""
    import importlib.metadata
    from email.parser import HeaderParser

    import script_modules  # noqa: F401 (puts scripts/ on sys.path)
    from _scaling.metadata import _parse_metadata as parse

    compared = 0
    for dist in importlib.metadata.distributions():
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
        for variant in (text or "", (text or "").replace("\n", "\r\n")):
            msg = HeaderParser().parsestr(variant)
            expected = (msg.get("Name"), msg.get("Version"), msg.get_all("Requires-Dist") or [])
            name, version, requires = parse(variant)
            assert (name, version) == expected[:2]
            assert [" ".join(r.split()) for r in requires] == [
                " ".join(r.split()) for r in expected[2]
            ]
            compared += 1
    assert compared > 100  # the pinned stack has well over 50 distributions
