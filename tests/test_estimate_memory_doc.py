"""references/backend-selection.md states the estimator's rules with numbers; each number is read
from the reference and compared with the constant the script uses, so neither can drift."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _scaling import memory

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
    assert number(r"TRL's (\d+) for GRPO", section) == memory.DEFAULT_NUM_GENERATIONS["grpo"]
    assert number(r"(\d+) for RLOO", section) == memory.DEFAULT_NUM_GENERATIONS["rloo"]


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
