"""vLLM in scripts/estimate_memory.py: what TRL 1.16.0 asks of vLLM (read from the installed
code), the KV cache per token (checked against transformers' own cache), the colocate and server
fits, and the vLLM setting a recommendation changes when vLLM cannot hold the model."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _scaling import memory, model_shape, trl_batch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "estimate_memory.py"
CONFIGS = ROOT / "tests" / "fixtures" / "model_configs"
GB = 1e9
GIB = 2**30


def _config(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text(encoding="utf-8"))


def _shape(name: str) -> model_shape.ModelShape:
    return model_shape.count_params(_config(name))


def _settings(**overrides) -> memory.Settings:
    """A run on 80 GiB cards (an H100/A100 80GB), host RAM plenty."""
    base = {"gpus": 1, "gpu_memory_gb": 80 * GIB / GB, "cpu_memory_gb": 2048.0}
    base.update(overrides)
    return memory.Settings(**base)


def _defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def _trl_source(*parts: str) -> str:
    import trl

    return Path(trl.__file__).parent.joinpath(*parts).read_text(encoding="utf-8")


def run_cli(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--cpu-memory-gb", "2048", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ----------------------------------------------------------------------------- TRL 1.16.0


def test_vllm_defaults_match_installed_trl():
    from trl import GRPOConfig, ModelConfig, RLOOConfig
    from trl.scripts.vllm_serve import ScriptArguments

    s = memory.Settings()
    for cls in (GRPOConfig, RLOOConfig):
        d = _defaults(cls)
        assert d["vllm_gpu_memory_utilization"] == memory.VLLM_DEFAULT_UTILIZATION["colocate"]
        assert d["vllm_tensor_parallel_size"] == s.vllm_tensor_parallel_size == 1
        assert d["vllm_max_model_length"] is s.vllm_max_model_length is None
        assert d["vllm_enable_sleep_mode"] is s.vllm_enable_sleep_mode is False
        assert d["per_device_train_batch_size"] == s.batch_size
        assert d["gradient_accumulation_steps"] == s.gradient_accumulation_steps
        assert d["steps_per_generation"] is s.steps_per_generation is None
    assert _defaults(GRPOConfig)["num_generations"] == trl_batch.DEFAULT_NUM_GENERATIONS["grpo"]
    assert _defaults(RLOOConfig)["num_generations"] == trl_batch.DEFAULT_NUM_GENERATIONS["rloo"]
    serve = _defaults(ScriptArguments)
    assert serve["gpu_memory_utilization"] == memory.VLLM_DEFAULT_UTILIZATION["server"]
    assert serve["tensor_parallel_size"] == serve["data_parallel_size"] == 1
    assert serve["kv_cache_dtype"] == "auto"
    # QLoRA without nested quantization unless asked
    assert _defaults(ModelConfig)["use_bnb_nested_quant"] is s.double_quant is False


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_steps_per_generation_follows_gradient_accumulation():
    from trl import GRPOConfig

    config = GRPOConfig(
        output_dir="/tmp/unused", use_cpu=True, bf16=False, gradient_accumulation_steps=4
    )
    s = memory.Settings(trainer="grpo", gradient_accumulation_steps=4)
    assert config.steps_per_generation == memory.steps_per_generation(s) == 4
    assert config.generation_batch_size == memory.generation_batch(s) == 8 * 1 * 4


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_how_trl_starts_vllm_is_what_the_estimate_assumes():
    generation = _squash(_trl_source("generation", "vllm_generation.py"))
    # colocate: one LLM per process with these settings, the policy's 4-bit layers as bitsandbytes
    for needle in (
        "tensor_parallel_size=self.tensor_parallel_size",
        "gpu_memory_utilization=self.gpu_memory_utilization",
        "max_model_len=self.max_model_length",
        'quantization="bitsandbytes"',
        "model=model.name_or_path",
        '"n":1,#vLLMoneachGPUgeneratesonly1incolocatemode',
    ):
        assert needle in generation, needle
    for trainer in ("grpo_trainer.py", "rloo_trainer.py"):
        source = _squash(_trl_source("trainer", trainer))
        assert (
            "max_num_seqs=args.per_device_train_batch_size*args.vllm_tensor_parallel_size"
            "*args.steps_per_generation"
        ) in source, trainer


# ----------------------------------------------------------------------------- KV cache


KV_FAMILIES = ["llama-3.1-8b.json", "qwen3-0.6b.json", "gemma-2b.json", "qwen2.5-0.5b.json"]


@pytest.mark.parametrize("name", KV_FAMILIES)
def test_kv_bytes_per_token_match_transformers_cache(name):
    """transformers' DynamicCache keeps what vLLM pages for these families: keys and values of
    every KV head. One layer, a 16-token prompt, bf16; widths as published."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = {k: v for k, v in _config(name).items() if not k.startswith("_")}
    config.update(num_hidden_layers=1, vocab_size=256, intermediate_size=64)
    shape = model_shape.count_params(config)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.bfloat16)
    tokens = 16
    with torch.no_grad():
        cache = model(torch.zeros(1, tokens, dtype=torch.long), use_cache=True).past_key_values
    layer = cache.layers[0]
    cached = sum(t.numel() * t.element_size() for t in (layer.keys, layer.values))
    assert memory.kv_bytes_per_token(shape, 1) == cached / tokens


@pytest.mark.parametrize(
    ("name", "tp", "expected"),
    [
        ("llama-3.1-8b.json", 1, 32 * 2 * 8 * 128 * 2),
        ("llama-3.1-8b.json", 4, 32 * 2 * 2 * 128 * 2),
        ("qwen3-30b-a3b.json", 8, 48 * 2 * 1 * 128 * 2),  # 4 KV heads over 8 ranks: one each
        ("deepseek-v3.json", 1, 61 * (512 + 64) * 2),  # the latent, not per-head keys/values
        ("deepseek-v3.json", 8, 61 * (512 + 64) * 2),  # kept whole on every rank
    ],
)
def test_kv_bytes_per_token_per_rank(name, tp, expected):
    assert memory.kv_bytes_per_token(_shape(name), tp) == expected


# ----------------------------------------------------------------------------- colocate


def test_qwen3_30b_a3b_lora_colocate_tp1_is_not_a_fit():
    """Held out: vLLM loads the bf16 base (61 GB) into 0.3 x 80 GiB = 25.8 GB. Before, zero3 was
    called a fit at 38.64 GB."""
    shape = _shape("qwen3-30b-a3b.json")
    s = _settings(trainer="grpo", tuning="lora", vllm_mode="colocate", gpus=8)
    need = memory.vllm_need(shape, s)
    assert need.weights == pytest.approx(shape.params * 2)
    assert need.share == pytest.approx(0.3 * 80 * GIB)
    assert not need.fits
    assert not any(memory.fits(e, s) for e in memory.estimate_all(shape, s).values())
    rec = memory.recommend(shape, s)
    assert rec["fits"]
    assert "vllm_tensor_parallel_size=4 (divides the 8 processes)" in rec["changes"]
    chosen = dataclasses.replace(s, vllm_tensor_parallel_size=4)
    assert memory.vllm_need(shape, chosen).fits


def test_qwen3_06b_grpo_colocate_on_one_80gb_gpu_fits():
    shape = _shape("qwen3-0.6b.json")
    s = _settings(trainer="grpo", vllm_mode="colocate")
    need = memory.vllm_need(shape, s)
    assert need.fits
    # one max_model_len sequence (40,960 tokens, the config's) is more than 8 x 1024
    assert need.kv_tokens == 40_960
    assert need.kv_cache == pytest.approx(40_960 * 28 * 2 * 8 * 128 * 2)
    rec = memory.recommend(shape, s)
    assert rec["strategy"] == "ddp" and rec["changes"] == [] and not rec["tight"]


def test_the_generation_batch_sizes_the_kv_cache_when_it_is_larger():
    shape = _shape("qwen3-0.6b.json")
    s = _settings(
        trainer="grpo", vllm_mode="colocate", vllm_max_model_length=4096, seq_len=4096,
        batch_size=16, steps_per_generation=2, num_generations=16,
    )  # fmt: skip
    need = memory.vllm_need(shape, s)
    assert need.sequences == 16 * 1 * 2  # TRL's max_num_seqs
    assert need.kv_tokens == 32 * 4096


def test_a_long_default_context_is_cut_to_the_run_first():
    """Llama-3.1's config allows 131,072 tokens, and vLLM refuses to start when one such
    sequence does not fit its KV cache: vllm_max_model_length is the cheapest fix."""
    shape = _shape("llama-3.1-8b.json")
    s = _settings(trainer="grpo", tuning="lora", vllm_mode="colocate", gpus=8)
    assert not memory.vllm_need(shape, s).fits
    assert memory.vllm_need(shape, dataclasses.replace(s, vllm_max_model_length=1024)).fits
    rec = memory.recommend(shape, s)
    assert rec["changes"][0].startswith("vllm_max_model_length=1024 ")
    assert not any("tensor_parallel" in c for c in rec["changes"])


def test_utilization_099_is_lowered_not_answered_with_more_gpus():
    """0.99 leaves training nothing. Before: 'add GPUs ... or shorten --seq-len'."""
    shape = model_shape.shape_from_params(7e9)
    s = _settings(trainer="grpo", vllm_mode="colocate", vllm_gpu_memory_utilization=0.99, gpus=8)
    rec = memory.recommend(shape, s)
    assert rec["fits"] and "add GPUs" not in rec["reason"]
    (change,) = [c for c in rec["changes"] if c.startswith("vllm_gpu_memory_utilization=")]
    lowered = float(change.split("=")[1].split()[0])
    assert lowered < 0.99
    need = memory.vllm_need(shape, dataclasses.replace(s, vllm_gpu_memory_utilization=lowered))
    assert need.fits and need.share - need.needed < memory.UTILIZATION_STEP * s.gpu_memory_gb * GB


def test_a_higher_utilization_is_rechecked_against_training():
    """Raising vLLM's share is tried after tensor parallelism, and only where training still
    fits next to it; on one GPU there is no tensor parallelism to try."""
    shape = _shape("llama-3.1-8b.json")
    s = _settings(
        trainer="grpo", tuning="lora", vllm_mode="colocate", vllm_max_model_length=1024,
        gpu_memory_gb=48 * GIB / GB,
    )  # fmt: skip
    rec = memory.recommend(shape, s)
    (change,) = [c for c in rec["changes"] if c.startswith("vllm_gpu_memory_utilization=")]
    u = float(change.split("=")[1].split()[0])
    assert u > 0.3
    chosen = dataclasses.replace(s, vllm_gpu_memory_utilization=u)
    estimate = memory.estimate_strategy(shape, chosen, rec["strategy"])
    assert memory.fits(estimate, chosen) and estimate.vllm == pytest.approx(u * 48 * GIB)


def test_sleep_mode_releases_the_share_while_training():
    shape = _shape("qwen3-0.6b.json")
    awake = _settings(trainer="grpo", vllm_mode="colocate", gradient_checkpointing=False)
    asleep = dataclasses.replace(awake, vllm_enable_sleep_mode=True)
    a, b = (memory.estimate_strategy(shape, x, "ddp") for x in (awake, asleep))
    assert a.total == pytest.approx(a.training + a.vllm)
    assert b.total == pytest.approx(max(b.training, b.model_states + b.vllm))
    assert b.total < a.total


def test_server_mode_when_no_colocate_setting_holds_the_model():
    """Two 24 GiB cards, an 8B LoRA policy with 4096-token sequences: every colocate setting
    is full or tight, while vLLM on one card and training on the other fits with margin."""
    shape = _shape("llama-3.1-8b.json")
    s = _settings(
        trainer="grpo", tuning="lora", vllm_mode="colocate", gpus=2, gpu_memory_gb=24 * GIB / GB,
        num_generations=2, seq_len=4096,
    )  # fmt: skip
    rec = memory.recommend(shape, s)
    assert rec["fits"] and not rec["tight"]
    (server,) = [c for c in rec["changes"] if c.startswith('vllm_mode="server"')]
    assert "on 1 GPU(s) of their own" in server and "--num_processes 1" in server


# ----------------------------------------------------------------------------- server


def test_server_estimate_is_its_own_gpus():
    shape = _shape("qwen3-30b-a3b.json")
    s = _settings(
        trainer="grpo", tuning="lora", vllm_mode="server", gpus=8, vllm_tensor_parallel_size=2
    )
    need = memory.vllm_need(shape, s)
    assert need.utilization == 0.9  # trl vllm-serve's default
    assert need.weights == pytest.approx(shape.params * 2 / 2)
    assert need.sequences == 8 * 8  # the whole generation batch reaches the server
    assert need.kv_tokens == max(64 * 1024, 40_960)
    assert need.kv_cache == pytest.approx(need.kv_tokens * 48 * 2 * 2 * 128 * 2)
    assert memory.estimate_strategy(shape, s, "zero3").vllm == 0


def test_server_utilization_099_is_lowered_to_the_headroom():
    shape = model_shape.shape_from_params(7e9)
    s = _settings(trainer="grpo", vllm_mode="server", vllm_gpu_memory_utilization=0.99, gpus=8)
    assert not memory.vllm_need(shape, s).fits
    rec = memory.recommend(shape, s)
    assert rec["fits"] and "add GPUs" not in rec["reason"]
    assert "trl vllm-serve --gpu_memory_utilization 0.9 (vLLM needs" in rec["changes"][0]


def test_nothing_fits_names_vllm_when_vllm_is_the_limit():
    shape = _shape("deepseek-v3.json")
    s = _settings(trainer="grpo", tuning="qlora", vllm_mode="colocate", gpus=8)
    rec = memory.recommend(shape, s)
    assert rec["strategy"] is None
    assert rec["reason"].startswith("nothing fits: vLLM cannot hold the model")


# ----------------------------------------------------------------------------- report


def test_json_vllm_part():
    report = run_cli(
        "--model-config", str(CONFIGS / "qwen3-30b-a3b.json"), "--trainer", "grpo",
        "--tuning", "lora", "--vllm-mode", "colocate", "--gpus", "8", "--gpu-memory-gb", "80",
    )  # fmt: skip
    v = report["vllm"]
    assert v["fits"] is False and v["mode"] == "colocate" and v["tensor_parallel_size"] == 1
    assert v["weights_gb"] == pytest.approx(61.06, abs=0.01)
    assert v["share_gb"] == pytest.approx(0.3 * 80 * GIB / GB, abs=0.01)
    parts = v["weights_gb"] + v["kv_cache_gb"] + v["runtime_gb"]
    assert v["needed_gb"] == pytest.approx(parts, abs=0.02)
    assert all(row["fits"] is False for row in report["strategies"].values())
    assert report["recommendation"]["fits"] is True
    assert run_cli("--params", "1e9", "--gpus", "1", "--gpu-memory-gb", "24")["vllm"] is None
