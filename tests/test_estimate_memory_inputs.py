"""scripts/estimate_memory.py on bad input: one line on stderr, exit 2, quickly; and the refusals
TRL itself makes (generation batch, vLLM tensor parallel size) said before a job is launched."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "estimate_memory.py"
CONFIGS = ROOT / "tests" / "fixtures" / "model_configs"
MACHINE = ["--gpus", "1", "--gpu-memory-gb", "80", "--cpu-memory-gb", "256"]
# Seconds a refusal may take: the script starts in ~0.1 s; a count over 1e8 layers took > 30 s.
FAST_S = 10


def run_cli(*args: str) -> tuple:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return proc, time.monotonic() - start


def assert_one_line_refusal(proc, seconds, *words) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr, proc.stdout[:300])
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("estimate_memory.py: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert seconds < FAST_S
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--params", "0.5"], "not a whole number"),
        (["--params", "7.5"], "not a whole number"),
        (["--params", "1e300"], "--params"),
        (["--params", "-7e9"], "--params"),  # argparse alone: "expected one argument"
        (["--params", "inf"], "not a whole number"),
        (["--params", "7e9", "--gpus", "1e9"], "--gpus"),
        (["--params", "7e9", "--seq-len", "1e12"], "--seq-len"),
        (["--params", "7e9", "--seq-len", "2.5e0"], "not a whole number"),
        (["--params", "7e9", "--batch-size", "-1"], "--batch-size"),
        (["--params", "7e9", "--gpu-memory-gb", "nan"], "--gpu-memory-gb"),
        (["--params", "7e9", "--gpu-memory-gb", "-80"], "--gpu-memory-gb"),
        (["--params", "7e9", "--vllm-gpu-memory-utilization", "0"], "utilization"),
        (["--params", "7e9", "--vllm-gpu-memory-utilization", "1.5"], "utilization"),
    ],
)
def test_bad_numbers(args, word):
    # the machine flags come first so that the value under test is the one refused
    proc, seconds = run_cli(*MACHINE, *args)
    assert_one_line_refusal(proc, seconds, word)


def test_negative_numbers_are_read_as_values_not_options():
    """`--params -7e9` used to fail as "expected one argument"; now its own check names it."""
    proc, seconds = run_cli(*MACHINE, "--params", "-7e9")
    assert_one_line_refusal(proc, seconds, "'-7e9' must be from 1")
    proc, _ = run_cli(*MACHINE, "--params", "7e9", "--beta", "-0.5", "--trainer", "grpo")
    assert proc.returncode == 0, proc.stderr  # a negative float where one is allowed


@pytest.mark.parametrize(
    ("field", "value", "word"),
    [
        ("intermediate_size", -1, "'intermediate_size'"),
        ("head_dim", -5, "'head_dim'"),
        ("num_key_value_heads", 0, "'num_key_value_heads'"),
        ("num_key_value_heads", 3, "not a multiple"),
        ("num_hidden_layers", 100_000_000, "'num_hidden_layers'"),
        ("hidden_size", True, "'hidden_size'"),
        ("vocab_size", 1.5, "'vocab_size'"),
        ("max_position_embeddings", -1, "'max_position_embeddings'"),
        ("text_config", "qwen", None),
    ],
)
def test_bad_config_fields(tmp_path, field, value, word):
    config = json.loads((CONFIGS / "llama-3.1-8b.json").read_text(encoding="utf-8"))
    if field == "text_config":
        config = {"model_type": "llama", "text_config": value}
    else:
        config[field] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    proc, seconds = run_cli(*MACHINE, "--model-config", str(path))
    assert_one_line_refusal(proc, seconds, *([word] if word else []))


@pytest.mark.parametrize(
    ("fields", "word"),
    [
        # sliding-window layers among dense and MoE ones: a mix the activation model refuses
        (
            {
                "decoder_sparse_step": 2,
                "sliding_window": 4096,
                "layer_types": ["sliding_attention", "full_attention"],
            },
            "config.json: sliding-window layers mixed with dense and MoE layers",
        ),
        # a field only the activation model reads
        ({"num_experts_per_tok": None}, "error: config.json field 'num_experts_per_tok'"),
    ],
)
def test_what_the_activation_model_refuses_is_one_line(tmp_path, fields, word):
    config = json.loads((CONFIGS / "qwen1.5-moe-a2.7b.json").read_text(encoding="utf-8"))
    config.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    proc, seconds = run_cli(*MACHINE, "--model-config", str(path))
    assert_one_line_refusal(proc, seconds, word)


def test_a_config_describing_too_many_parameters(tmp_path):
    config = json.loads((CONFIGS / "llama-3.1-8b.json").read_text(encoding="utf-8"))
    config.update(hidden_size=1_000_000, intermediate_size=4_000_000, num_hidden_layers=10_000)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    proc, seconds = run_cli(*MACHINE, "--model-config", str(path))
    assert_one_line_refusal(proc, seconds, "parameters, more than")


# ----------------------------------------------------------------------------- TRL's refusals


def _trl_refusal(**fields) -> str:
    """The ValueError TRL 1.16.0's GRPOConfig raises for these fields in one process."""
    from trl import GRPOConfig

    with pytest.raises(ValueError) as caught:
        GRPOConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, report_to="none", **fields)
    return str(caught.value)


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_generation_batch_must_hold_whole_prompt_groups():
    trl_message = _trl_refusal(per_device_train_batch_size=3, num_generations=8)
    proc, seconds = run_cli(*MACHINE, "--params", "1e9", "--trainer", "grpo", "--batch-size", "3")
    assert_one_line_refusal(proc, seconds, trl_message)
    # at the planned world size: 3 x 8 GPUs = 24 completions hold three groups of 8
    proc, _ = run_cli(
        "--params", "1e9", "--trainer", "grpo", "--batch-size", "3", "--gpus", "8",
        "--gpu-memory-gb", "80", "--cpu-memory-gb", "256",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_one_generation_per_prompt_is_refused_like_trl():
    trl_message = _trl_refusal(per_device_train_batch_size=8, num_generations=1)
    proc, seconds = run_cli(
        *MACHINE, "--params", "1e9", "--trainer", "grpo", "--num-generations", "1"
    )
    assert_one_line_refusal(proc, seconds, trl_message)


def test_colocate_tensor_parallel_size_must_divide_the_world_size():
    import trl

    source = (Path(trl.__file__).parent / "generation" / "vllm_generation.py").read_text()
    assert "must divide world size" in source  # the check this mirrors
    proc, seconds = run_cli(
        "--params", "7e9", "--trainer", "grpo", "--vllm-mode", "colocate",
        "--vllm-tensor-parallel-size", "3", "--gpus", "8", "--gpu-memory-gb", "80",
    )  # fmt: skip
    assert_one_line_refusal(proc, seconds, "tensor_parallel_size (3) must divide world size (8)")
