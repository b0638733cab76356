"""How scripts/estimate_memory.py chooses a plan: host RAM for offload (this machine's by default,
or a recorded one), the offload ladder cheapest first, the margin rule, one answer for a card
typed or detected, weights and compute dtypes apart, and a table whose columns never merge."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _scaling import facts, memory, model_shape

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "estimate_memory.py"
CONFIGS = ROOT / "tests" / "fixtures" / "model_configs"
FACTS = ROOT / "tests" / "fixtures" / "check_facts"
GB = 1e9
GIB = 2**30


def _shape(name: str) -> model_shape.ModelShape:
    return model_shape.count_params(json.loads((CONFIGS / name).read_text(encoding="utf-8")))


def _settings(**overrides) -> memory.Settings:
    base = {"gpus": 1, "gpu_memory_gb": 80 * GIB / GB}
    base.update(overrides)
    return memory.Settings(**base)


def run_cli(*args: str, json_out: bool = True):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, *(["--json"] if json_out else [])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if json_out else proc.stdout


def _recorded(tmp_path: Path, devices=None, host=None) -> Path:
    data = json.loads((FACTS / "cpu_only.json").read_text(encoding="utf-8"))
    if devices is not None:
        data["accelerators"].update(kind="cuda", devices=devices)
    if host is not None:
        data["host"] = host
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _card(mib: int, count: int = 1) -> list:
    return [
        {"index": i, "name": "GPU", "memory_total_mib": mib, "memory_free_mib": mib - 500}
        for i in range(count)
    ]


# ----------------------------------------------------------------------------- host RAM


def _meminfo_kib(name: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise AssertionError(name)


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="Linux /proc")
def test_host_memory_reads_this_machine():
    host = facts.host_memory()
    assert host["source"] == "/proc/meminfo"
    assert host["total_bytes"] == _meminfo_kib("MemTotal") * 1024
    assert 0 < host["available_bytes"] <= host["total_bytes"]
    # the same machine through sysconf, the route macOS takes: the same total within 2 %
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert host["total_bytes"] == pytest.approx(pages, rel=0.02)


def test_host_memory_without_proc_uses_sysconf(monkeypatch):
    monkeypatch.setattr(facts, "read_text", lambda *a, **k: None)
    host = facts.host_memory()
    assert host["source"] == "sysconf" and host["available_bytes"] is None
    assert host["total_bytes"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_offload_is_checked_against_this_machines_ram_by_default():
    report = run_cli("--params", "7e9", "--gpus", "1", "--gpu-memory-gb", "24")
    total = facts.host_memory()["total_bytes"]
    assert report["host"]["ram_gb"] == round(total / GB, 2)
    assert "this machine" in report["host"]["source"]
    assert any("offload plans that need more are refused" in a for a in report["assumptions"])
    row = report["strategies"]["zero3_offload"]
    assert row["fits"] is (row["host_ram_gb"] <= report["host"]["ram_gb"])


def test_recorded_host_ram_and_its_absence(tmp_path):
    recorded = _recorded(tmp_path, _card(81559), host={"total_bytes": 2 * 10**12})
    report = run_cli("--params", "7e9", "--facts", str(recorded))
    assert report["host"]["ram_gb"] == 2000 and str(recorded) in report["host"]["source"]
    old = _recorded(tmp_path, _card(81559))  # recorded before host RAM was a fact
    report = run_cli("--params", "7e9", "--facts", str(old))
    assert report["host"]["ram_gb"] is None and "not recorded" in report["host"]["source"]
    passed = run_cli("--params", "7e9", "--facts", str(old), "--cpu-memory-gb", "512")
    assert passed["host"] == {"ram_gb": 512, "source": "--cpu-memory-gb"}
    for garbage in ("64 GB", {"total_bytes": True}, {"total_bytes": -1}, [1]):
        odd = _recorded(tmp_path, _card(81559), host=garbage)
        assert run_cli("--params", "7e9", "--facts", str(odd))["host"]["ram_gb"] is None


def test_deepseek_v3_full_on_8x80_is_not_sent_to_offload_beyond_ram():
    """Held out. Before: zero3_offload with 1342 GB of CPU RAM per GPU, unchecked. DeepSpeed
    counts 18 B/param x 1.5 for a node: 18.1 TB."""
    shape = _shape("deepseek-v3.json")
    s = _settings(gpus=8, cpu_memory_gb=2048)
    offload = memory.estimate_strategy(shape, s, "zero3_offload")
    assert memory.host_bytes_per_node(offload, s) == pytest.approx(shape.params * 18 * 1.5)
    assert not memory.fits(offload, s)
    # Full fine-tuning is refused; what fits is LoRA on the attention projections alone (all-
    # linear would adapt the 256-expert stacks, whose merged copies outgrow the GPU), with its
    # states offloaded, within the RAM.
    rec = memory.recommend(shape, s)
    assert rec["fits"] and rec["strategy"] in memory.OFFLOADED
    assert rec["changes"][0].startswith("use_peft=True (LoRA r=16 on o_proj,q_a_proj")
    assert "within the 2048 GB of host RAM" in rec["reason"]
    tight_ram = dataclasses.replace(s, cpu_memory_gb=1024)
    refused = memory.recommend(shape, tight_ram)
    assert refused["strategy"] is None
    assert (
        "GB of host RAM per node for its offloaded states, more than the 1024 GB"
        in (refused["reason"])
    )
    # with the RAM, offload is a way out again
    roomy = dataclasses.replace(s, cpu_memory_gb=30_000)
    assert memory.recommend(shape, roomy)["strategy"] in memory.OFFLOADED


def test_70b_qlora_a_few_gb_over_takes_a_cheap_rung():
    """Held out: 70B QLoRA on one 48 GB card, seq 2048, is about 1 GB over at micro-batch 1 with
    AdamW. Before: full ZeRO-3 offload (parameters on the CPU). Now the cheapest rung that fits
    is taken, 8-bit AdamW. With the measured activation model (TRL's adapters on every linear
    keep their dropout output and mask) no plan keeps the 5% margin, optimizer-only offload
    included, so the first that fits is recommended, marked tight."""
    shape = model_shape.shape_from_params(70e9)
    s = _settings(tuning="qlora", gpu_memory_gb=48 * GIB / GB, seq_len=2048, cpu_memory_gb=64)
    rec = memory.recommend(shape, s)
    assert rec["strategy"] == "ddp" and rec["tight"]
    assert any("adamw_8bit" in change for change in rec["changes"])
    one = dataclasses.replace(s, batch_size=1, gradient_checkpointing=True)
    adamw = memory.estimate_strategy(shape, one, "ddp")
    assert not memory.fits(adamw, one)
    assert 0 < adamw.total - memory.usable_bytes(one) < 1.5 * GB
    offload = memory.estimate_strategy(shape, one, "zero2_offload_opt")
    assert memory.fits(offload, one) and not memory.fits_with_margin(offload, one)


def test_the_ladder_order():
    shape = model_shape.shape_from_params(7e9)
    s = _settings(gpus=2)
    plans = memory.candidate_plans(shape, s)
    first = {}
    for index, (strategy, varied, _changes) in enumerate(plans):
        key = (varied.tuning, varied.optimizer, strategy)
        first.setdefault(key, index)
    full, eight_bit = ("full", "adamw"), ("full", "adamw_8bit")
    assert first[(*full, "ddp")] < first[(*full, "zero1")] < first[(*eight_bit, "ddp")]
    assert first[(*eight_bit, "zero3")] < first[("lora", "adamw", "ddp")]
    # offload only once nothing else is left, and per tuning optimizer offload first
    assert first[("qlora", "adamw_8bit", "zero3")] < first[(*full, "zero2_offload_opt")]
    for tuning in ("full", "lora", "qlora"):
        optimizer_only = first[(tuning, "adamw", "zero3_offload_opt")]
        assert first[(tuning, "adamw", "zero2_offload_opt")] < optimizer_only
        assert optimizer_only < first[(tuning, "adamw", "zero3_offload")]


# ----------------------------------------------------------------------------- margin rule


def test_a_tight_plan_yields_to_one_with_margin():
    """Llama-3.1-8B GRPO, vLLM colocated: zero1 needs 97 % of the usable memory, zero2 79 %.
    Before, the first plan that fit at all (zero1) was recommended."""
    shape = _shape("llama-3.1-8b.json")
    s = _settings(trainer="grpo", vllm_mode="colocate", gpus=8, vllm_max_model_length=1024)
    zero1 = memory.estimate_strategy(shape, s, "zero1")
    assert memory.fits(zero1, s) and not memory.fits_with_margin(zero1, s)
    rec = memory.recommend(shape, s)
    assert rec["strategy"] == "zero2" and not rec["tight"]
    assert "an earlier plan, zero1 as given, is tight at 97%" in rec["reason"]


def test_a_tight_plan_is_still_named_when_nothing_has_margin():
    """One plan only (QLoRA, SGD, micro-batch 1, no host RAM for offload) at 97 % of usable."""
    shape = model_shape.shape_from_params(1e9)
    s = _settings(
        tuning="qlora", optimizer="sgd", master_weights="none", batch_size=1, seq_len=128,
        cpu_memory_gb=0.001,
    )  # fmt: skip
    need = memory.estimate_strategy(shape, s, "ddp").total
    tight = dataclasses.replace(s, gpu_memory_gb=need / 0.97 / (1 - s.headroom) / GB)
    rec = memory.recommend(shape, tight)
    assert rec["strategy"] == "ddp" and rec["fits"] and rec["tight"]
    assert "tight: within the last 5% of usable memory" in rec["reason"]
    roomy = dataclasses.replace(s, gpu_memory_gb=need / 0.90 / (1 - s.headroom) / GB)
    assert not memory.recommend(shape, roomy)["tight"]


# ----------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("mib", "printed"),
    [
        (81559, 80),  # H100 80GB
        (81920, 80),  # A100 80GB
        (49140, 48),  # RTX A6000
        (24564, 24),  # RTX 4090
        (143771, 141),  # H200
        (40960, 40),  # A100 40GB
    ],
)
def test_detected_sizes_read_as_the_printed_size(mib, printed):
    assert memory.card_gib(mib / 1024) == printed


def test_a_size_far_below_a_whole_gib_is_kept():
    # L4 "24GB" reports 23,034 MiB = 22.49 GiB: too far below 23 to be that card
    assert memory.card_gib(23034 / 1024) == pytest.approx(22.494, abs=1e-3)


@pytest.mark.parametrize(
    ("mib", "typed", "args"),
    [
        (49140, "48", ["--params", "70e9", "--tuning", "qlora"]),
        (81559, "80", ["--params", "7e9", "--trainer", "grpo", "--vllm-mode", "colocate"]),
    ],
)
def test_a_card_typed_or_detected_gives_one_answer(tmp_path, mib, typed, args):
    """An A6000 typed as 48 and detected as 49,140 MiB (51.5 GB) used to flip 70B QLoRA between
    a fit and offload."""
    common = [*args, "--cpu-memory-gb", "256"]
    detected = run_cli(*common, "--facts", str(_recorded(tmp_path, _card(mib))))
    given = run_cli(*common, "--gpus", "1" if "qlora" in args else "1", "--gpu-memory-gb", typed)
    for part in ("strategies", "recommendation", "usable_gb_per_gpu"):
        assert detected[part] == given[part], part
    assert detected["gpu"]["memory_gib"] == given["gpu"]["memory_gib"] == float(typed)
    assert "GiB" in detected["gpu"]["source"] and "GiB" in given["gpu"]["source"]


def test_the_text_says_which_unit_it_uses():
    text = run_cli("--params", "7e9", "--gpus", "2", "--gpu-memory-gb", "24", json_out=False)
    assert "2 x 24 GiB = 25.77 GB" in text
    assert "Per-GPU GB (1e9 bytes)" in text
    assert "--gpu-memory-gb takes the size printed on the card" in text


# ----------------------------------------------------------------------------- dtypes, QLoRA


def test_fp32_weights_with_bf16_autocast():
    """TRL's CLI default (ModelConfig.dtype float32, bf16=True): DDP keeps 4 B weights, 4 B
    gradients and fp32 Adam moments (K = 8), and activations above bf16's (autocast's bf16
    weight copies, the fp32 residual stream); DeepSpeed casts the module to bf16 and keeps the
    fp32 master (2 + 2 + 12), with bf16's activations."""
    shape = model_shape.shape_from_params(1e9)
    autocast = _settings(dtype="fp32", compute_dtype="bf16", gpus=4)
    bf16 = _settings(gpus=4)
    ddp = memory.estimate_strategy(shape, autocast, "ddp")
    assert ddp.weights == ddp.gradients == shape.params * 4
    assert ddp.optimizer == shape.params * 8
    pure_bf16 = memory.estimate_strategy(shape, bf16, "ddp").activations
    assert ddp.activations > pure_bf16
    zero2 = memory.estimate_strategy(shape, autocast, "zero2")
    assert zero2.weights == shape.params * 2 and zero2.optimizer == shape.params * 12 / 4
    assert zero2.activations == memory.estimate_strategy(shape, bf16, "zero2").activations


def test_qlora_defaults_to_single_quantization():
    shape = _shape("llama-3.1-8b.json")
    default = memory.weight_bytes(shape, _settings(tuning="qlora"))
    nested = memory.weight_bytes(shape, _settings(tuning="qlora", double_quant=True))
    gap = shape.quantizable_params * (memory.NF4_BYTES - memory.NF4_DQ_BYTES)
    assert default - nested == pytest.approx(gap)
    report = run_cli(
        "--model-config", str(CONFIGS / "llama-3.1-8b.json"), "--tuning", "qlora",
        "--gpus", "1", "--gpu-memory-gb", "24",
    )  # fmt: skip
    assert report["inputs"]["double_quant"] is False
    assert any("4.500 bits/param" in a for a in report["assumptions"])


# ----------------------------------------------------------------------------- table


def test_table_columns_never_merge():
    """DeepSeek-V3 full fine-tuning on one GPU: five-digit totals next to short names."""
    text = run_cli(
        "--model-config", str(CONFIGS / "deepseek-v3.json"), "--gpus", "1",
        "--gpu-memory-gb", "80", "--cpu-memory-gb", "64", json_out=False,
    )  # fmt: skip
    lines = text.splitlines()
    start = lines.index("Per-GPU GB (1e9 bytes):") + 1
    header, *rows = lines[start : start + 1 + len(memory.STRATEGIES)]
    columns = len(header.split())
    assert any(len(cell) >= 8 for r in rows for cell in r.split())  # huge cells
    for row in rows:
        cells = row.split()
        assert cells[0] in memory.STRATEGIES
        assert len(cells[:columns]) == columns and all(
            c.replace(".", "").isdigit() for c in cells[1 : columns - 1]
        ), row


def test_help_names_every_json_key():
    """The preflight and users read the JSON; --help is where its keys are documented."""
    help_text = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    report = run_cli(
        "--params", "7e9", "--trainer", "grpo", "--vllm-mode", "colocate", "--gpus", "8",
        "--gpu-memory-gb", "80",
    )  # fmt: skip
    keys = set(report) | set(report["gpu"]) | set(report["host"]) | set(report["vllm"])
    keys |= set(report["strategies"]["ddp"]) | set(report["recommendation"])
    keys -= {"inputs"}  # Settings fields, named by the flags
    missing = sorted(k for k in keys if not re.search(rf"\b{k}\b", help_text))
    assert not missing


def test_moe_lora_narrows_to_the_attention_before_quantizing():
    """all-linear LoRA on Qwen3-30B-A3B adapts the fused expert stacks, so each MoE layer keeps
    a merged copy of them; on one 80 GB card the least invasive plan that fits with margin is
    LoRA on q/k/v/o, which comes before QLoRA and before offload in the ladder."""
    shape = _shape("qwen3-30b-a3b.json")
    s = _settings(tuning="lora", gpus=1, gpu_memory_gb=80, seq_len=1024, cpu_memory_gb=100)
    rec = memory.recommend(shape, s)
    assert rec["fits"] and rec["strategy"] == "ddp" and not rec.get("tight")
    assert rec["changes"][0].startswith("lora_target_modules=q_proj,k_proj,v_proj,o_proj")
    narrow = dataclasses.replace(s, lora_targets="q_proj,k_proj,v_proj,o_proj")
    wide = memory.estimate_strategy(shape, s, "ddp")
    assert memory.estimate_strategy(shape, narrow, "ddp").total < wide.total
    assert not memory.fits_with_margin(wide, s)
    # a dense model has no expert stacks: all-linear stays as asked
    dense = memory.recommend(_shape("llama-3.1-8b.json"), _settings(tuning="lora", gpus=1))
    assert not any("lora_target_modules" in change for change in dense["changes"])
