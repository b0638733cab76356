"""judge() on recorded facts (tests/fixtures/check_facts/*.json, written from published specs),
plus the version and YAML helpers. In-process: the script is imported from its path."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import script_modules  # noqa: F401  (puts scripts/ on sys.path)
from _scaling import backend_rules, check_report, files, probes, verdicts, versions

FIXTURES = Path(__file__).parent / "fixtures" / "check_facts"


def facts(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def statuses(name_or_facts):
    data = facts(name_or_facts) if isinstance(name_or_facts, str) else name_or_facts
    return {k: v["status"] for k, v in verdicts.judge(data)["backends"].items()}


R, D, N, U = "ready", "degraded", "not_installed", "unavailable"
EXPECTED = {
    # fmt: off
    #                  vllm deepspeed fsdp2 cp ulysses peft qlora liger unsloth kernels fa bf16 nccl
    "h100_8x_nvlink": (R, R, R, R, R, R, R, R, N, R, R, R, R),
    "a100_40gb": (R, R, D, U, U, R, R, R, N, R, R, R, R),
    "a100_80gb_4x": (R, R, R, R, R, R, R, R, N, R, R, R, R),
    "l4": (R, R, D, U, U, R, R, R, N, R, R, R, R),
    "t4": (R, R, D, U, U, R, R, R, N, R, U, D, R),
    "v100_8x": (R, R, R, R, R, R, R, R, N, R, U, D, R),
    "a100_mig_slice": (R, R, D, U, U, R, R, R, N, R, R, R, D),
    "rtx4090_2x": (R, N, R, R, N, R, R, R, N, R, R, R, R),
    "mi300x_8x": (R, R, R, D, D, R, N, R, N, N, N, R, R),
    "apple_m3_mps": (U, U, U, U, U, R, U, U, U, N, U, R, U),
    "cpu_only": (U, U, U, U, U, R, N, U, U, N, U, D, U),
    # fmt: on
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_verdicts(name):
    assert tuple(statuses(name).values()) == EXPECTED[name], statuses(name)


def test_every_fixture_is_covered():
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(EXPECTED)


def test_judge_is_pure():
    data = facts("h100_8x_nvlink")
    before = copy.deepcopy(data)
    first, second = verdicts.judge(data), verdicts.judge(data)
    assert first == second and data == before


def reasons(data, backend):
    verdict = verdicts.judge(data)["backends"][backend]
    return verdict, " | ".join(verdict["reasons"])


def test_t4_and_v100_reasons_name_the_hardware_gate():
    verdict, text = reasons(facts("t4"), "flash_attn")
    assert "lowest visible compute capability 7.5" in text and "FlashAttention-2" in text
    assert verdict["next_step"] == 'keep attn_implementation="sdpa"'
    verdict, text = reasons(facts("v100_8x"), "bf16")
    assert "emulation" in text and verdict["next_step"] == "set fp16=True, bf16=False"
    # bitsandbytes' CC < 7.5 warning concerns int8 matmul; 4-bit QLoRA is not gated on it.
    assert "compute capability" not in reasons(facts("v100_8x"), "qlora")[1]


def test_fa3_on_ampere_is_degraded_and_fa4_unavailable():
    data = facts("a100_40gb")
    del data["packages"]["flash-attn"]
    data["packages"]["flash-attn-3"] = {"installed": True, "version": "3.0.0b1", "location": "/x"}
    assert statuses(data)["flash_attn"] == D
    data["packages"]["flash-attn-4"] = {"installed": True, "version": "4.0.0", "location": "/x"}
    assert statuses(data)["flash_attn"] == U
    h100 = facts("h100_8x_nvlink")
    h100["packages"]["flash-attn-4"] = {"installed": True, "version": "4.0.0", "location": "/x"}
    assert statuses(h100)["flash_attn"] == R


def test_version_gates_from_the_rules_table():
    data = facts("h100_8x_nvlink")
    data["packages"]["deepspeed"]["version"] = "0.18.3"
    data["packages"]["liger-kernel"]["version"] = "0.8.1"
    data["packages"]["kernels"]["version"] = "0.19.0"
    data["packages"]["torch"]["version"] = "2.5.1+cu124"
    result = statuses(data)
    assert result["deepspeed"] == D  # TRL extra wants 0.18.6; still runs
    assert result["ulysses"] == D  # >= 0.18.2 for accelerate's SP, < 0.18.6 for TRL
    assert result["liger"] == D  # below TRL's extra (0.8.2), above transformers' gate (0.3.0)
    assert result["kernels"] == U
    assert result["fsdp2"] == U and result["context_parallel"] == U
    data["packages"]["deepspeed"]["version"] = "0.17.0"
    data["packages"]["liger-kernel"]["version"] = "0.2.1"
    result = statuses(data)
    assert result["ulysses"] == U and result["liger"] == U


def test_one_finding_per_subject_with_the_tightest_fix():
    data = facts("h100_8x_nvlink")
    data["packages"]["deepspeed"]["version"] = "0.17.0"  # misses 0.18.2 (accelerate) and 0.18.6
    verdict, text = reasons(data, "ulysses")
    assert verdict["status"] == U and text.count("deepspeed 0.17.0") == 1
    assert verdict["next_step"] == 'pip install -U "deepspeed>=0.18.6"'


def test_bitsandbytes_needs_what_transformers_needs_not_what_trl_pins():
    data = facts("h100_8x_nvlink")
    data["packages"]["bitsandbytes"]["version"] = "0.45.5"  # meets TRL's extra (>=0.45.1)
    verdict, text = reasons(data, "qlora")
    assert verdict["status"] == U and "0.46.1" in text
    assert verdict["next_step"] == 'pip install -U "bitsandbytes>=0.46.1"'


def test_liger_0_8_1_on_pre_ampere_and_use_kernels_on_transformers_5_3():
    data = facts("t4")
    data["packages"]["liger-kernel"]["version"] = "0.8.1"
    verdict, text = reasons(data, "liger")
    assert verdict["status"] == U and "huggingface/trl#6767" in text
    data = facts("h100_8x_nvlink")
    data["packages"]["transformers"]["version"] = "5.3.0"
    verdict, _ = reasons(data, "kernels")
    assert verdict["status"] == U and verdict["next_step"] == 'pip install -U "transformers>=5.4.0"'
    data["packages"]["transformers"]["version"] = "5.1.0"  # deepspeed extra excludes it
    assert statuses(data)["deepspeed"] == D


def test_liger_nightly_counts_as_liger():
    data = facts("h100_8x_nvlink")
    del data["packages"]["liger-kernel"]
    data["packages"]["liger-kernel-nightly"] = {
        "installed": True,
        "version": "0.8.3.dev20261101",
        "location": "/x",
    }
    assert statuses(data)["liger"] == R


def test_torch_cpu_build_and_old_driver_on_gpu_box():
    data = facts("h100_8x_nvlink")
    data["torch_build"].update(cuda=None, variant="cpu", version="2.10.0+cpu")
    verdict, text = reasons(data, "nccl")
    assert verdict["status"] == U and "cpu build" in text
    data = facts("h100_8x_nvlink")
    data["torch_build"]["cuda"] = "13.0"
    data["accelerators"]["cuda_driver_version"] = "12.4"
    verdict, text = reasons(data, "fsdp2")
    assert verdict["status"] == U and "driver supports CUDA 12.4" in text


def test_vllm_torch_pin_from_metadata():
    data = facts("h100_8x_nvlink")
    data["packages"]["vllm"]["requires"] = [
        {"name": "torch", "specifier": "==2.9.0", "extra": None},
        {"name": "transformers", "specifier": ">=4.56.0", "extra": None},
    ]
    verdict, text = reasons(data, "vllm")
    assert verdict["status"] == U
    assert "requires torch==2.9.0, installed torch 2.10.0+cu128" in text


def test_import_failure_overrides_ready():
    data = facts("h100_8x_nvlink")
    data["packages"]["flash-attn"]["import"] = {
        "status": "error",
        "detail": "ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDevice",
        "seconds": 1.2,
    }
    verdict, text = reasons(data, "flash_attn")
    assert verdict["status"] == U and "undefined symbol" in text
    assert "--force-reinstall --no-cache-dir flash-attn" in verdict["next_step"]


def test_mps_bf16_needs_macos_14():
    data = facts("apple_m3_mps")
    data["platform"]["mac_version"] = "13.6"
    assert statuses(data)["bf16"] == U


def test_vllm_server_facts_feed_the_vllm_verdict():
    data = facts("h100_8x_nvlink")
    base = {"url": "http://h:8000", "health": 200, "models": ["m"], "server_info_status": 404}
    data["vllm_server"] = dict(base, dev_mode=False)
    verdict, text = reasons(data, "vllm")
    assert verdict["status"] == D and "VLLM_SERVER_DEV_MODE=1" in verdict["next_step"]
    data["vllm_server"] = dict(base, server_info_status=200, dev_mode=True)
    data["vllm_server"]["weight_transfer_config"] = None
    verdict, _ = reasons(data, "vllm")
    assert "--weight-transfer-config" in verdict["next_step"]
    data["vllm_server"]["weight_transfer_config"] = {"backend": "nccl"}
    data["vllm_server"]["logprobs_mode"] = "raw_logprobs"
    verdict, _ = reasons(data, "vllm")
    assert verdict["next_step"] == "restart it with --logprobs-mode processed_logprobs"
    data["vllm_server"]["logprobs_mode"] = "processed_logprobs"
    assert reasons(data, "vllm")[0]["status"] == R


def test_accelerate_config_problems_against_devices():
    data = facts("t4")
    data["config"]["values"] = {"distributed_type": "MULTI_GPU", "num_processes": 8}
    data["config"]["values"]["mixed_precision"] = "bf16"
    problems = verdicts.judge(data)["config_problems"]
    assert any("num_processes: 8 but 1 GPU(s) visible" in p for p in problems)
    assert any("mixed_precision: bf16" in p for p in problems)
    data = facts("h100_8x_nvlink")
    data["config"]["values"] = {"distributed_type": "NO", "mixed_precision": "fp8"}
    problems = verdicts.judge(data)["config_problems"]
    assert any("nn.DataParallel" in p for p in problems)
    assert not any("fp8" in p for p in problems)
    data["config"]["values"] = {
        "distributed_type": "FSDP",
        "num_processes": 8,
        "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": "true"},
    }
    assert verdicts.judge(data)["config_problems"] == []


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        ("0.31.0", ">=0.22.0,<=0.31.0", True),
        ("0.31.0.post1", "<=0.31.0", False),
        ("0.31.0rc1", ">=0.31.0", False),
        ("0.31.0.dev0", "<0.31.0rc1", True),
        ("1.16.0", "==1.16.*", True),
        ("1.17.0", "!=1.16.*", True),
        ("0.18.2", ">=0.18.2,<0.19.0", True),
        ("0.19", ">=0.18.2,<0.19.0", False),
        ("2.4.1", "~=2.4", True),
        ("3.0", "~=2.4", False),
        ("garbage", ">=1", None),
    ],
)
def test_version_satisfies(version, spec, expected):
    assert versions.version_satisfies(version, spec) is expected


def test_builtin_yaml_parser_reads_trl_shipped_configs():
    import yaml

    shipped = sorted((Path(yaml.__file__).parents[1] / "trl" / "accelerate_configs").glob("*.yaml"))
    assert len(shipped) >= 7
    for path in shipped:
        assert files.parse_flat_yaml(path.read_text()) == yaml.safe_load(path.read_text()), (
            path.name
        )


def test_import_probes_start_with_the_heaviest():
    data = facts("h100_8x_nvlink")
    order = list(probes.import_probe_targets(data["packages"]))
    assert order[:3] == ["vllm", "peft", "deepspeed"]  # each imports torch and more
    assert order.index("torch") < order.index("transformers") < order.index("huggingface-hub")
    assert set(order) == {n for n, p in data["packages"].items() if p["installed"]} - {
        "nvidia-nccl-cu12"  # no module to import
    }


def test_rules_table_is_well_formed():
    for rule in backend_rules.RULES:
        assert rule.backend in backend_rules.BACKEND_NAMES
        assert rule.severity in ("degraded", "unavailable")
        assert rule.source and rule.why
        assert versions.version_satisfies("0", rule.spec) is not None, rule
    lines = [r.when[1] for r in backend_rules.RULES if r.when and r.when[0] == "trl"]
    assert "1.16" in lines and len(lines) >= 10


def test_text_colours_only_the_status_when_asked():
    data = facts("cpu_only")
    data.update(
        python={"version": "3.11.7", "executable": "python"},
        platform={"platform": "Linux"},
        environment={},
    )
    report = check_report.build_report(data)
    plain, coloured = (
        check_report.render_text(report),
        check_report.render_text(report, colour=True),
    )
    assert "\033[" not in plain
    assert "peft              \033[32mready" in coloured
    assert re.sub(r"\033\[[0-9;]*m", "", coloured) == plain
