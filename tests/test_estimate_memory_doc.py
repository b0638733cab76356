"""references/backend-selection.md states the estimator's rules with numbers; each number is read
from the reference and compared with the constant the script uses, so neither can drift."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _scaling import activations, memory, trl_batch

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "references" / "backend-selection.md"
CONFIGS = ROOT / "tests" / "fixtures" / "model_configs"


@pytest.fixture(scope="module")
def text() -> str:
    return REFERENCE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def section(text) -> str:
    start = text.index("### How scripts/estimate_memory.py counts")
    return text[start : text.index("\n## ", start)]


def number(pattern: str, where: str) -> float:
    found = re.findall(pattern, where)
    assert len(found) == 1, (pattern, found)
    return float(found[0].replace(",", ""))


def test_every_strategy_is_listed(text):
    listed = re.search(r"prints every strategy \(([^)]*)\)", text).group(1)
    assert tuple(re.findall(r"`(\w+)`", listed)) == memory.STRATEGIES


def test_offload_and_host_ram_figures(section):
    assert number(r"fp32 gradients on the CPU, (\d+) B per trainable", section) == (
        memory.CPU_ADAM_BYTES
    )
    weights = 2  # 16-bit weights added by parameter offload
    assert number(r"\((\d+) B per parameter for full fine-tuning\)", section) == (
        memory.CPU_ADAM_BYTES + weights
    )
    assert number(r"\(up to (\d+)\)", section) == memory.GPUS_PER_NODE
    assert number(r"× ([\d.]+) of host RAM", section) == memory.HOST_BUFFER_FACTOR


def test_vllm_figures(section):
    assert number(r"\+ ([\d.]+) GB runtime", section) * 1e9 == memory.VLLM_RUNTIME_BYTES
    assert number(r"\(([\d.]+) in colocate", section) == memory.VLLM_DEFAULT_UTILIZATION["colocate"]
    assert (
        number(r"([\d.]+) for `trl vllm-serve`\)", section)
        == (memory.VLLM_DEFAULT_UTILIZATION["server"])
    )
    llama = json.loads((CONFIGS / "llama-3.1-8b.json").read_text(encoding="utf-8"))
    assert number(r"\(([\d,]+) for Llama-3.1\)", section) == llama["max_position_embeddings"]
    assert number(r"TRL's (\d+) for GRPO", section) == trl_batch.DEFAULT_NUM_GENERATIONS["grpo"]
    assert number(r"(\d+) for RLOO", section) == trl_batch.DEFAULT_NUM_GENERATIONS["rloo"]


def test_margin_and_units(section):
    assert number(r"at or below (\d+) % of the usable memory", section) == pytest.approx(
        100 * (1 - memory.MARGIN)
    )
    assert number(r"within (\d+) % below a whole GiB", section) == 100 * memory.CARD_RESERVE
    example = re.search(r"reports ([\d,]+) MiB = ([\d.]+) GiB: (\d+)\)", section)
    mib, gib, printed = (float(g.replace(",", "")) for g in example.groups())
    assert round(mib / 1024, 2) == gib and memory.card_gib(mib / 1024) == printed
    assert number(r"80 GiB = ([\d.]+) GB", section) == round(80 * 2**30 / 1e9, 1)
    assert number(r"(\d+) % headroom", section) == 100 * memory.Settings().headroom


def test_qlora_bits(section):
    assert number(r"NF4 at ([\d.]+) bits \(TRL's default", section) == 8 * memory.NF4_BYTES
    assert number(r"([\d.]+) bits with `--double-quant`", section) == pytest.approx(
        8 * memory.NF4_DQ_BYTES, abs=5e-4
    )
    assert memory.Settings().double_quant is False  # "TRL's default" is the estimator's too


# ----------------------------------------------------------------------------- activations


def _shape(name: str):
    from _scaling import model_shape

    return model_shape.count_params(json.loads((CONFIGS / f"{name}.json").read_text("utf-8")))


def _per_sbh(name: str, **settings) -> float:
    """Bytes per s*b*h of the config's largest layer, bf16, SDPA, one unpadded sequence."""
    shape = _shape(name)
    s = memory.Settings(seq_len=1024, batch_size=1, **settings)
    lora = memory.lora_activations(shape, s, "ddp")
    return max(
        sum(activations.saved_bytes_per_token(kind, 1024, 2, lora=lora).values()) / kind.hidden
        for kind, _ in shape.layer_kinds
    )


def test_activation_examples(text):
    assert number(r"That is ([\d.]+) bytes per s·b·h per layer for Llama-3.1-8B", text) == round(
        _per_sbh("llama-3.1-8b"), 1
    )
    assert number(r"([\d.]+) for Qwen3-0\.6B", text) == round(_per_sbh("qwen3-0.6b"), 1)
    assert number(r"([\d.]+) for Qwen3-30B-A3B", text) == round(_per_sbh("qwen3-30b-a3b"), 1)
    assert number(r"GPT block \(4h GELU MLP, attention as wide as h\) has (\d+)", text) == 34
    shape = _shape("llama-3.1-8b")
    for flag, pattern in (
        (False, r"keeps ([\d.]+) GB without"),
        (True, r"and ([\d.]+) GB with it"),
    ):
        s = memory.Settings(seq_len=4096, batch_size=1, gradient_checkpointing=flag)
        assert number(pattern, text) == round(memory.decoder_kept_bytes(shape, s) / 1e9, 2)


def test_lora_and_autocast_examples(text):
    every = _per_sbh("llama-3.1-8b", tuning="lora")
    assert number(r"every linear of Llama-3\.1-8B keep ([\d.]+) bytes", text) == round(every, 1)
    qv = _per_sbh("llama-3.1-8b", tuning="lora", lora_targets="q_proj,v_proj")
    assert number(r"on `q_proj,v_proj` (\d+\.\d)", text) == round(qv, 1)
    assert memory.Settings().lora_dropout == 0.05 and memory.DROPOUT_MASK_BYTES == 1
    copies = activations.decoder_autocast_cache_bytes(_shape("llama-3.1-8b").layer_kinds, 2)
    assert number(r"\(([\d.]+) GB for Llama-3\.1-8B\)", text) == round(copies / 1e9, 1)


def test_measured_tolerances_are_the_tests(section):
    tests = ROOT / "tests"
    layer = (tests / "test_activations_measured.py").read_text(encoding="utf-8")
    tolerance = float(re.search(r"^TOLERANCE = ([\d.]+)$", layer, re.M).group(1))
    assert number(r"saved bytes within (\d+) %", section) == round(100 * tolerance)
    whole = (tests / "test_estimate_memory_measured.py").read_text(encoding="utf-8")
    band = re.search(r"^ACT_BAND = \(([\d.]+), ([\d.]+)\)$", whole, re.M).groups()
    stated = re.search(r"activation peaks within ([\d.]+)–([\d.]+)× of the estimate", section)
    assert stated.groups() == band
