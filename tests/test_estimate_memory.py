"""Tests for scripts/estimate_memory.py: arithmetic against papers and oracles, CLI behaviour."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import script_modules
from _scaling import activations, memory, model_shape
from _scaling.cli import UsageError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "estimate_memory.py"
CONFIGS = ROOT / "tests" / "fixtures" / "model_configs"
FACTS = ROOT / "tests" / "fixtures" / "check_facts"
DECODER_FIXTURES = sorted(
    p.name for p in CONFIGS.glob("*.json") if "ForCausalLM" in p.read_text(encoding="utf-8")
)
GB = 1e9


em = script_modules.load("estimate_memory")


def _config(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text(encoding="utf-8"))


def _hf_config(name: str):
    from transformers import AutoConfig

    values = {k: v for k, v in _config(name).items() if not k.startswith("_")}
    return AutoConfig.for_model(**values)


def _meta_model(name: str):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(_hf_config(name))


def run_cli(*args: str, cwd: Path = ROOT, script: Path = SCRIPT):
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def _settings(**overrides):
    base = {"gpus": 1, "gpu_memory_gb": 80.0, "gradient_checkpointing": False}
    base.update(overrides)
    return memory.Settings(**base)


# ----------------------------------------------------------------------------- ZeRO paper


@pytest.mark.parametrize(
    ("strategy", "paper_gb"),
    [("ddp", 120), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)],
)
def test_zero_paper_figure_1(strategy, paper_gb):
    # Rajbhandari et al. 2020, Figure 1: 7.5B params, 64 GPUs, K=12, mixed-precision Adam.
    shape = model_shape.shape_from_params(7.5e9)
    s = _settings(gpus=64)
    assert memory.optimizer_bytes_per_param(s) == 12
    states = memory.estimate_strategy(shape, s, strategy).model_states / GB
    assert round(states, 1 if paper_gb < 100 else 0) == pytest.approx(paper_gb)


def test_fsdp2_shards_like_zero3_and_offload_leaves_no_states_on_gpu():
    shape = model_shape.shape_from_params(7.5e9)
    s = _settings(gpus=64)
    zero3, fsdp2 = (memory.estimate_strategy(shape, s, n) for n in ("zero3", "fsdp2"))
    assert zero3.total == fsdp2.total
    # DeepSpeed's estimate_zero3_model_states_mem_needs (cpu_offload_params, zero_init): 18 bytes
    # per parameter on the CPU, 16 for the optimizer side plus 2 for the 16-bit weights; FSDP2's
    # CPUOffloadPolicy keeps the ZeRO paper's 16 (weights, gradients, optimizer states).
    for name, per_param in (("zero3_offload", 18), ("fsdp2_offload", 16)):
        offloaded = memory.estimate_strategy(shape, s, name)
        assert offloaded.offload and offloaded.model_states == 0
        assert offloaded.cpu_offload == pytest.approx(per_param * 7.5e9 / 64)


# DeepSpeed 0.19.8 (throwaway venv with torch 2.13.0+cpu, not part of the test stack):
# deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs(P, 8, nodes,
# cpu_offload=False) and stage3.estimate_zero3_model_states_mem_needs(P, largest_layer, 8, nodes,
# cpu_offload=False, cpu_offload_params=False), the functions behind the *_all_cold printers.
# Both count 18 bytes per sharded parameter. For ZeRO-2 that is 2 fp16 grads + 4 fp32 grads + 4 fp32
# params + 8 Adam (the paper's 2 + K plus a 4-byte fp32 gradient partition) next to 2 replicated
# bytes of fp16 weights; for ZeRO-3 it is 2 bytes more than the paper's 16 per sharded parameter,
# plus 4 bytes per parameter of the largest layer.
DEEPSPEED_0_19_8 = [
    # (params, gpus, largest_layer, zero2 gpu bytes, zero3 gpu bytes)
    (7_500_000_000, 64, 200_000_000, 17_109_375_000, 2_909_375_000),
    (8_030_261_248, 8, 525_336_576, 34_128_610_304, 20_169_434_112),
]


@pytest.mark.parametrize(("params", "gpus", "largest", "ds_zero2", "ds_zero3"), DEEPSPEED_0_19_8)
def test_model_states_match_deepspeed_estimators(params, gpus, largest, ds_zero2, ds_zero3):
    shape = dataclasses.replace(model_shape.shape_from_params(params), params=params)
    s = _settings(gpus=gpus)
    zero2 = memory.estimate_strategy(shape, s, "zero2").model_states
    assert zero2 + 4 * params / gpus == pytest.approx(ds_zero2, rel=1e-9)
    zero3 = memory.estimate_strategy(shape, s, "zero3").model_states
    assert zero3 + 2 * params / gpus + 4 * largest == pytest.approx(ds_zero3, rel=1e-9)


# ----------------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize("name", DECODER_FIXTURES)
def test_param_count_matches_transformers_meta_model(name):
    model = _meta_model(name)
    expected = sum(p.numel() for p in model.parameters())
    assert model_shape.count_params(_config(name)).params == expected


@pytest.mark.parametrize("name", DECODER_FIXTURES)
def test_param_count_matches_published_figure(name):
    config = _config(name)
    count = model_shape.count_params(config).params
    if "_published_params" in config:
        assert count == config["_published_params"]
    else:
        assert count == pytest.approx(config["_published_params_approx"], rel=0.005)


def test_tied_embeddings_count_once():
    config = _config("qwen2.5-0.5b.json")
    tied = model_shape.count_params(config)
    untied = model_shape.count_params({**config, "tie_word_embeddings": False})
    assert untied.params - tied.params == config["vocab_size"] * config["hidden_size"]


@pytest.mark.parametrize("name", DECODER_FIXTURES)
def test_tie_default_follows_transformers(name):
    """A config.json without `tie_word_embeddings` gets the model class's default (True for
    Gemma, False for Llama/Qwen/Mistral in transformers 5.24): count it the same way."""
    from transformers import AutoConfig

    config = _config(name)
    bare = {k: v for k, v in config.items() if k != "tie_word_embeddings"}
    values = {k: v for k, v in bare.items() if not k.startswith("_")}
    default = AutoConfig.for_model(**values).tie_word_embeddings
    explicit = model_shape.count_params({**config, "tie_word_embeddings": default}).params
    assert model_shape.count_params(bare).params == explicit


@pytest.mark.parametrize("params", [1e9, 7e9, 70e9])
def test_params_only_shape_is_a_llama_config(params):
    """`--params` assumes a Llama-like MHA shape with a SwiGLU MLP of 8h/3: its LoRA dims (all
    seven projections, k_proj included) equal those of that Llama config, counted exactly."""
    shape = model_shape.shape_from_params(params)
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.heads,
        "intermediate_size": 8 * shape.hidden // 3,
        "vocab_size": shape.vocab,
        "tie_word_embeddings": False,
    }
    exact = model_shape.count_params(config)
    assert shape.lora_dims == exact.lora_dims
    assert set(shape.lora_dims) == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"
    }  # fmt: skip
    assert exact.params == pytest.approx(params, rel=0.02)


@pytest.mark.parametrize(
    ("name", "targets"),
    [
        ("llama-3.1-8b.json", "all-linear"),
        ("qwen2.5-0.5b.json", "all-linear"),
        ("qwen3-0.6b.json", "all-linear"),
        ("gemma-2b.json", "all-linear"),
        ("mistral-7b-v0.1.json", "q_proj,v_proj"),
    ],
)
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_lora_count_matches_peft(name, targets):
    assert model_shape.lora_param_count(
        model_shape.count_params(_config(name)), 16, targets
    ) == _peft_lora_count(_config(name), targets)


def _peft_lora_count(config: dict, targets: str) -> int:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    values = {k: v for k, v in config.items() if not k.startswith("_")}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**values))
    target_modules = targets if targets == "all-linear" else targets.split(",")
    model = get_peft_model(model, LoraConfig(r=16, target_modules=target_modules))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# Shrunk configs (peft on the full sizes takes seconds to minutes); DeepSeek keeps dense, MoE and
# shared-expert layers
SMALL_DEEPSEEK = {
    "num_hidden_layers": 4,
    "first_k_dense_replace": 1,
    "n_routed_experts": 8,
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 96,
    "kv_lora_rank": 64,
    "n_group": 2,
    "topk_group": 1,
    "num_experts_per_tok": 2,
}


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::RuntimeWarning")
@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("mixtral-8x7b-v0.1.json", {"num_hidden_layers": 2}),
        ("qwen3-30b-a3b.json", {"num_hidden_layers": 2}),
        ("qwen1.5-moe-a2.7b.json", {}),
        ("deepseek-v3.json", SMALL_DEEPSEEK),
        ("deepseek-v3.json", {**SMALL_DEEPSEEK, "q_lora_rank": None}),
    ],
)
def test_moe_lora_count_matches_peft(name, overrides):
    config = {**_config(name), **overrides}
    expected = _peft_lora_count(config, "all-linear")
    assert (
        model_shape.lora_param_count(model_shape.count_params(config), 16, "all-linear") == expected
    )
    # the shrunk configs must still count exactly
    if overrides:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        values = {k: v for k, v in config.items() if not k.startswith("_")}
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**values))
        assert model_shape.count_params(config).params == sum(p.numel() for p in model.parameters())


def test_non_decoder_configs_are_rejected():
    for name in ("bert-base-uncased.json", "vit-base-patch16-224.json"):
        with pytest.raises(UsageError):
            model_shape.count_params(_config(name))


# ----------------------------------------------------------------------------- bytes per component


def test_qlora_storage_follows_the_paper():
    # Dettmers et al. 2023 sec. 2: double quantization costs 8/64 + 32/(64*256) = 0.127 bits/param.
    assert pytest.approx(0.127, abs=5e-4) == 8 * memory.NF4_DQ_BYTES - 4
    assert pytest.approx(0.5) == 8 * memory.NF4_BYTES - 4
    shape = model_shape.count_params(_config("llama-3.1-8b.json"))
    s = _settings(tuning="qlora", double_quant=True)
    kept = shape.params - shape.quantizable_params
    adapters = model_shape.lora_param_count(shape, 16, "all-linear")
    expected = shape.quantizable_params * memory.NF4_DQ_BYTES + (kept + adapters) * 2
    assert memory.weight_bytes(shape, s) == pytest.approx(expected)
    assert kept == 2 * 128256 * 4096 + 65 * 4096  # embeddings, lm_head and RMSNorm weights


@pytest.mark.parametrize(
    ("optimizer", "master", "dtype", "k"),
    [
        ("adamw", "fp32", "bf16", 12),
        ("adamw", "none", "bf16", 4),
        ("adamw", "fp32", "fp32", 8),
        ("adamw_8bit", "fp32", "bf16", 6),
        ("paged_adamw_8bit", "none", "bf16", 2),
        ("paged_adamw", "fp32", "bf16", 12),
        ("adafactor", "fp32", "bf16", 4),
        ("sgd", "none", "bf16", 0),
    ],
)
def test_optimizer_bytes_per_param(optimizer, master, dtype, k):
    s = _settings(optimizer=optimizer, master_weights=master, dtype=dtype)
    assert memory.optimizer_bytes_per_param(s) == k


def test_reference_model_is_sharded_only_with_the_weights():
    """DPO's frozen reference copy: replicated under ddp/zero1/zero2, sharded under zero3/fsdp2,
    on the CPU with the *_offload variants."""
    shape = model_shape.shape_from_params(7e9)
    s = _settings(trainer="dpo", gpus=8)
    full = shape.params * 2
    for name, expected in (
        ("ddp", full),
        ("zero1", full),
        ("zero2", full),
        ("zero3", full / 8),
        ("fsdp2", full / 8),
        ("zero3_offload", 0),
        ("fsdp2_offload", 0),
    ):
        est = memory.estimate_strategy(shape, s, name)
        assert est.reference_model == pytest.approx(expected), name
    offloaded = memory.estimate_strategy(shape, s, "zero3_offload")
    assert offloaded.cpu_offload == pytest.approx((18 * shape.params + full) / 8)


def test_lora_trains_only_adapters():
    shape = model_shape.count_params(_config("llama-3.1-8b.json"))
    s = _settings(tuning="lora")
    adapters = model_shape.lora_param_count(shape, 16, "all-linear")
    ddp = memory.estimate_strategy(shape, s, "ddp")
    assert ddp.gradients == adapters * 2
    assert ddp.optimizer == adapters * 12
    assert ddp.weights == (shape.params + adapters) * 2


# ----------------------------------------------------------------------------- activations


def test_activations_without_recomputation_hand_computed():
    """Llama-3.1-8B, bf16, SDPA, one unpadded sequence of 2048 tokens, no checkpointing, the
    plain loss. Per token and layer: two norms, each an fp32 input copy (4h), the normalised
    values (2h), rsqrt (4) and the output the projections read (2h); q (4096) and GQA's K and V
    (8 x 128 each) after RoPE, the attention output (4096), a log-sum-exp per head; the SwiGLU
    MLP's gate, act(gate), up and their product (4 x 2 x 14336): 200,840 bytes, 49.0 per h,
    where Korthikanti's GPT-shaped block has 34."""
    shape = model_shape.count_params(_config("llama-3.1-8b.json"))
    s = _settings(seq_len=2048, batch_size=1, fused_loss=False)
    h = 4096
    norm = 4 * h + 2 * h + 4 + 2 * h
    attention = 2 * (4096 + 2 * 8 * 128) + 2 * 4096 + 4 * 32
    per_token = 2 * norm + attention + 4 * 2 * 14336
    assert per_token == 200_840 and round(per_token / h, 1) == 49.0
    kept = 32 * per_token * 2048
    assert memory.decoder_kept_bytes(shape, s) == kept
    shared = (8 + 2 * 2 * 128) * 2048  # input ids, rotary cos and sin (no mask: one sequence)
    head = 3 * 2048 * 128256 * 4 + (4 * h + 2 * h + 4 + 2 * h) * 2048  # logits, final norm
    assert memory.activation_bytes(shape, s) == kept + shared + head
    # eager keeps the fp32 probabilities and their bf16 copy per head and repeats K/V
    eager = dataclasses.replace(s, attention="eager")
    extra = (4 + 2) * 32 * 2048 - 4 * 32 + 2 * 2 * (32 - 8) * 128  # scores for the lse
    assert memory.decoder_kept_bytes(shape, eager) == kept + 32 * extra * 2048


def test_activations_with_full_checkpointing_hand_computed():
    """Each layer keeps its bf16 input; the peak adds one layer's rebuilt saved tensors with its
    gradients (reward: no vocabulary logits, so the layer outweighs the head; chosen and
    rejected share one padded batch of 2, so SDPA gets a mask)."""
    shape = model_shape.count_params(_config("llama-3.1-8b.json"))
    s = _settings(seq_len=2048, batch_size=1, gradient_checkpointing=True, trainer="reward")
    tokens = 2 * 2048
    kept = 32 * 2 * 4096 * tokens
    assert memory.decoder_kept_bytes(shape, s) == kept
    ((layer, _),) = shape.layer_kinds
    rebuilt = activations.recompute_bytes(layer, 2048, 2, 2, "sdpa", padded=True)
    assert memory.decoder_transient_bytes(shape, s) == rebuilt
    shared = (8 + 2 * 2 * 128 + 2048) * tokens  # ids, rotary tables, the boolean mask
    norm = (4 * 4096 + 2 * 4096 + 4) * tokens  # the final norm (its output goes to the score head)
    assert memory.activation_bytes(shape, s) == kept + shared + max(norm, rebuilt)


def test_fp32_weights_under_autocast_add_weight_copies_on_ddp_only():
    shape = model_shape.count_params(_config("qwen2.5-0.5b.json"))
    s = _settings(dtype="fp32", compute_dtype="bf16", seq_len=512, batch_size=1)
    ddp = memory.estimate_strategy(shape, s, "ddp").activations
    zero2 = memory.estimate_strategy(shape, s, "zero2").activations
    bf16 = memory.estimate_strategy(shape, _settings(seq_len=512, batch_size=1), "ddp")
    assert zero2 == bf16.activations  # DeepSpeed computes with the module cast to bf16
    copies = sum(n * activations.autocast_weight_bytes(k, 2) for k, n in shape.layer_kinds)
    assert ddp > bf16.activations + copies
    # checkpointing: autocast's cache holds every trainable weight's copy until the forward ends
    ckpt = dataclasses.replace(s, gradient_checkpointing=True)
    assert memory.autocast_cache_bytes(shape, ckpt) == copies
    assert memory.activation_bytes(shape, ckpt) > copies
    lora = dataclasses.replace(ckpt, tuning="lora")
    assert memory.autocast_cache_bytes(shape, lora) == 0  # frozen weights are not cached


def test_lora_changes_what_the_layers_keep():
    """TRL's LoRA defaults on every linear keep about twice a full fine-tune's activations (each
    adapter keeps its fp32 dropout output and mask); on q_proj and v_proj only, less than it."""
    shape = model_shape.count_params(_config("llama-3.1-8b.json"))
    s = _settings(seq_len=1024, batch_size=1)
    full = memory.decoder_kept_bytes(shape, s)
    all_linear = memory.decoder_kept_bytes(shape, dataclasses.replace(s, tuning="lora"))
    qv = dataclasses.replace(s, tuning="lora", lora_targets="q_proj,v_proj")
    assert all_linear > 1.4 * full and memory.decoder_kept_bytes(shape, qv) < full
    lora = memory.lora_activations(shape, dataclasses.replace(s, tuning="lora"), "ddp")
    assert lora.targets == frozenset(shape.lora_dims) and lora.dropout
    assert lora.adapter_bytes == 4 and lora.mask_bytes == 1
    zero3 = memory.lora_activations(shape, dataclasses.replace(s, tuning="lora"), "zero3")
    assert zero3.adapter_bytes == 2  # TRL passes autocast_adapter_dtype=False under ZeRO-3
    qlora = memory.lora_activations(shape, dataclasses.replace(s, tuning="qlora"), "ddp")
    assert qlora.adapter_bytes == 2  # TRL casts QLoRA's adapters to bf16


def test_padding_follows_what_trl_batches():
    s = _settings(seq_len=512, batch_size=1)
    assert not memory.sdpa_masked(s)  # one sequence, no padding
    assert memory.sdpa_masked(dataclasses.replace(s, batch_size=2))
    assert memory.sdpa_masked(dataclasses.replace(s, trainer="dpo"))  # chosen + rejected
    grpo = dataclasses.replace(s, trainer="grpo", gpus=8)
    assert not memory.sdpa_masked(grpo)
    assert memory.sdpa_masked(dataclasses.replace(grpo, steps_per_generation=4))
    assert not memory.sdpa_masked(dataclasses.replace(s, batch_size=8, attention="flash"))


def test_fused_lm_head_working_set():
    shape = model_shape.count_params(_config("llama-3.1-8b.json"))
    s = _settings(seq_len=1024, batch_size=8)
    tile = 4096 * 32768 * 2
    grad_hidden = 8192 * 4096 * 4
    grad_weight = 128256 * 4096 * 4
    assert memory.loss_head_bytes(shape, s) == tile + grad_hidden + grad_weight
    lora = dataclasses.replace(s, tuning="lora")
    assert memory.loss_head_bytes(shape, lora) == tile + grad_hidden


def test_paired_trainers_double_the_micro_batch():
    for trainer, factor in (("dpo", 2), ("reward", 2), ("kto", 1), ("grpo", 1), ("sft", 1)):
        s = _settings(trainer=trainer, batch_size=4)
        assert memory.sequences_per_micro_batch(s) == 4 * factor


# ----------------------------------------------------------------------------- TRL 1.16.0 facts


def _field_default(config_cls, name):
    return {f.name: f.default for f in dataclasses.fields(config_cls)}[name]


def test_defaults_match_installed_trl():
    import trl
    from trl import DPOConfig, GRPOConfig, KTOConfig, ModelConfig, RLOOConfig, SFTConfig
    from trl.kernels import chunked_logprob
    from trl.trainer import utils

    assert _field_default(GRPOConfig, "beta") == memory.DEFAULT_BETA["grpo"] == 0.0
    assert _field_default(RLOOConfig, "beta") == memory.DEFAULT_BETA["rloo"]
    assert _field_default(GRPOConfig, "vllm_gpu_memory_utilization") == 0.3
    for cls in (SFTConfig, DPOConfig, KTOConfig, GRPOConfig, RLOOConfig):
        assert _field_default(cls, "gradient_checkpointing") is True
    assert _field_default(DPOConfig, "precompute_ref_log_probs") is False
    assert _field_default(ModelConfig, "lora_r") == memory.Settings().lora_r
    assert _field_default(ModelConfig, "lora_dropout") == memory.Settings().lora_dropout
    assert chunked_logprob.TOKEN_CHUNK_SIZE == memory.FUSED_TOKEN_TILE
    assert utils._CHUNKED_LOGPROB_CHUNK_SIZE == memory.FUSED_VOCAB_TILE
    trainer_dir = Path(trl.__file__).parent / "trainer"
    for trainer in memory.FUSED_LOSS_TRAINERS:
        assert "add_fused_lm_head(" in (trainer_dir / f"{trainer}_trainer.py").read_text()


@pytest.mark.parametrize(
    ("trainer", "tuning", "extra", "expected"),
    [
        ("sft", "full", {}, False),
        ("reward", "full", {}, False),
        ("grpo", "full", {}, False),
        ("grpo", "full", {"beta": 0.04}, True),
        ("rloo", "full", {}, True),
        ("dpo", "full", {}, True),
        ("dpo", "lora", {}, False),
        ("dpo", "full", {"precompute_ref_log_probs": True}, False),
        ("kto", "qlora", {}, False),
    ],
)
def test_reference_model_rules(trainer, tuning, extra, expected):
    assert (
        memory.needs_reference_model(_settings(trainer=trainer, tuning=tuning, **extra)) is expected
    )


# ----------------------------------------------------------------------------- recommendation


def test_8b_full_sft_on_one_24gb_gpu_recommends_peft():
    shape = model_shape.count_params(_config("llama-3.1-8b.json"))
    rec = memory.recommend(shape, _settings(gpu_memory_gb=24, gradient_checkpointing=True))
    assert rec["fits"] and rec["strategy"] == "ddp"
    assert any("use_peft=True" in change for change in rec["changes"])


def test_7b_full_on_8x80gb_shards_and_keeps_full_tuning():
    shape = model_shape.count_params(_config("mistral-7b-v0.1.json"))
    rec = memory.recommend(shape, _settings(gpus=8, gradient_checkpointing=True))
    assert rec["strategy"] in ("zero1", "zero2", "zero3", "fsdp2")
    assert not any("use_peft" in change for change in rec["changes"])


def test_zero1_recommendation_warns_about_the_shipped_config():
    # trl/accelerate_configs/zero1.yaml pins gradient_accumulation_steps: 1 (TRL 1.16.0).
    shape = model_shape.count_params(_config("llama-3.1-8b.json"))
    rec = memory.recommend(
        shape, _settings(gpus=4, seq_len=4096, batch_size=1, gradient_checkpointing=True)
    )
    assert rec["strategy"] == "zero1"
    assert "gradient_accumulation_steps: 1" in rec["reason"]
    other = memory.recommend(shape, _settings(gpus=8, seq_len=4096, batch_size=1, tuning="lora"))
    assert other["strategy"] != "zero1"
    assert "gradient_accumulation_steps" not in other["reason"]


def test_checkpointing_is_tried_before_peft():
    shape = model_shape.count_params(_config("qwen2.5-0.5b.json"))
    rec = memory.recommend(shape, _settings(gpu_memory_gb=24, seq_len=4096, batch_size=8))
    assert rec["strategy"] == "ddp"
    assert rec["changes"][0] == "gradient_checkpointing=True"
    assert not any("use_peft" in change for change in rec["changes"])


def test_nothing_fits_says_what_is_missing():
    # LoRA on the MLA up-projections: all-linear would adapt the 256-expert stacks, whose merged
    # copies (22.5 GB per layer) alone outgrow a 24 GB card while a layer is rebuilt
    shape = model_shape.count_params(_config("deepseek-v3.json"))
    targets = "q_b_proj,kv_b_proj"
    s = _settings(gpus=8, gpu_memory_gb=24, cpu_memory_gb=256, lora_targets=targets)
    rec = memory.recommend(shape, s)
    assert rec["strategy"] is None and not rec["fits"]
    assert "more than the 256 GB of host RAM" in rec["reason"]
    # without a CPU limit, offloading everything is a (slow) way out
    rec = memory.recommend(shape, _settings(gpus=8, gpu_memory_gb=24, lora_targets=targets))
    assert rec["strategy"] in memory.OFFLOADED and "host RAM unknown" in rec["reason"]
    # all-linear (the default targets): the ladder narrows LoRA to the attention projections,
    # and the smallest plan is then an offload plan that the 256 GB of RAM cannot hold
    rec = memory.recommend(shape, _settings(gpus=8, gpu_memory_gb=24, cpu_memory_gb=256))
    assert rec["strategy"] is None and "more than the 256 GB of host RAM" in rec["reason"]
    assert "LoRA r=16 on o_proj,q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj" in rec["reason"]
    # with RAM to spare, a 16 GB card is what runs out: the reason says so
    roomy = _settings(gpus=8, gpu_memory_gb=16, cpu_memory_gb=100_000, lora_targets=targets)
    rec = memory.recommend(shape, roomy)
    assert rec["strategy"] is None and "GB more than the 14.4 GB usable" in rec["reason"]


def test_activations_alone_can_exceed_the_gpu():
    shape = model_shape.count_params(_config("qwen2.5-0.5b.json"))
    rec = memory.recommend(shape, _settings(gpu_memory_gb=8, seq_len=131072, batch_size=1))
    assert rec["strategy"] is None
    assert "GB more than the 7.2 GB usable" in rec["reason"]


def test_vllm_colocate_reserves_its_share():
    shape = model_shape.shape_from_params(1e9)
    s = _settings(trainer="grpo", vllm_mode="colocate", vllm_gpu_memory_utilization=0.3)
    assert memory.estimate_strategy(shape, s, "ddp").vllm == pytest.approx(0.3 * 80 * GB)
    server = dataclasses.replace(s, vllm_mode="server")
    assert memory.estimate_strategy(shape, server, "ddp").vllm == 0


# ----------------------------------------------------------------------------- command line

STRATEGY_KEYS = {
    "weights_gb",
    "gradients_gb",
    "optimizer_gb",
    "model_states_gb",
    "activations_gb",
    "reference_model_gb",
    "vllm_gb",
    "total_gb",
    "fits",
    "offload",
}


def test_json_schema():
    proc = run_cli(
        "--model-config",
        str(CONFIGS / "llama-3.1-8b.json"),
        "--trainer",
        "dpo",
        "--gpus",
        "8",
        "--gpu-memory-gb",
        "80",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report["strategies"]) == set(memory.STRATEGIES)
    for row in report["strategies"].values():
        assert set(row) >= STRATEGY_KEYS
        assert isinstance(row["fits"], bool) and isinstance(row["offload"], bool)
        parts = row["weights_gb"] + row["gradients_gb"] + row["optimizer_gb"]
        assert row["model_states_gb"] == pytest.approx(parts, abs=0.02)
    assert report["strategies"]["ddp"]["reference_model_gb"] > 16
    assert {"strategy", "changes", "reason"} <= set(report["recommendation"])
    assert report["assumptions"] and all(isinstance(a, str) for a in report["assumptions"])


def test_text_report_is_default():
    proc = run_cli("--params", "7.5e9", "--gpus", "64", "--gpu-memory-gb", "32")
    assert proc.returncode == 0, proc.stderr
    assert "Recommendation:" in proc.stdout and "Assumptions:" in proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--params", "-1", "--gpus", "1", "--gpu-memory-gb", "8"],
        ["--params", "abc", "--gpus", "1", "--gpu-memory-gb", "8"],
        ["--params", "1e9", "--gpus", "0", "--gpu-memory-gb", "8"],
        ["--params", "1e9", "--gpus", "1", "--gpu-memory-gb", "nan"],
        ["--params", "1e9", "--gpus", "1", "--gpu-memory-gb", "8", "--seq-len", "0"],
        ["--params", "1e9", "--model-config", "x.json", "--gpus", "1", "--gpu-memory-gb", "8"],
        ["--gpus", "1", "--gpu-memory-gb", "8"],
        [
            "--model-config",
            str(CONFIGS / "bert-base-uncased.json"),
            "--gpus",
            "1",
            "--gpu-memory-gb",
            "8",
        ],
        [
            "--model-config",
            str(CONFIGS / "vit-base-patch16-224.json"),
            "--gpus",
            "1",
            "--gpu-memory-gb",
            "8",
        ],
        ["--model-config", "/nonexistent/config.json", "--gpus", "1", "--gpu-memory-gb", "8"],
        [
            "--params",
            "1e9",
            "--gpus",
            "1",
            "--gpu-memory-gb",
            "8",
            "--trainer",
            "sft",
            "--vllm-mode",
            "colocate",
        ],
        [
            "--params",
            "1e9",
            "--gpus",
            "1",
            "--gpu-memory-gb",
            "8",
            "--tuning",
            "lora",
            "--lora-targets",
            "foo",
        ],
        ["--params", "1e9", "--gpus", "1", "--gpu-memory-gb", "8", "--unknown-flag"],
    ],
)
def test_bad_input_exits_2_with_one_line(args):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_bad_json_and_non_object_configs(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    for path in (broken, listed, missing):
        proc = run_cli("--model-config", str(path), "--gpus", "1", "--gpu-memory-gb", "8")
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def _recorded_gpus(tmp_path: Path, devices) -> Path:
    """Facts as check_optional_backends.py --json records them on a machine with `devices`."""
    data = json.loads((FACTS / "cpu_only.json").read_text())
    if devices is not None:
        data["accelerators"].update(kind="cuda", devices=devices)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(data))
    return path


def test_gpus_default_to_the_checked_facts(tmp_path):
    devices = [
        {"index": i, "name": "H100", "memory_total_mib": 81559, "memory_free_mib": 81000}
        for i in range(4)
    ]
    facts = _recorded_gpus(tmp_path, devices)
    proc = run_cli("--params", "1e9", "--json", "--facts", str(facts), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    inputs = json.loads(proc.stdout)["inputs"]
    assert inputs["gpus"] == 4
    # 81,559 MiB = 79.65 GiB is an "80GB" card: read as 80 GiB, as typed
    assert inputs["gpu_memory_gb"] == pytest.approx(80 * 2**30 / GB)


@pytest.mark.parametrize("devices", [[], None])
def test_no_visible_gpu_asks_for_flags(tmp_path, devices):
    facts = _recorded_gpus(tmp_path, devices)
    for extra in (["--facts", str(facts)], []):  # recorded, and this CPU-only machine
        proc = run_cli("--params", "1e9", *extra, cwd=tmp_path)
        assert proc.returncode == 2
        assert "--gpus" in proc.stderr and "--gpu-memory-gb" in proc.stderr


def _copied_scripts(tmp_path: Path) -> Path:
    shutil.copytree(
        SCRIPT.parent, tmp_path / "scripts", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tmp_path / "scripts" / SCRIPT.name


def test_unexpected_errors_exit_3_without_traceback(tmp_path):
    script = _copied_scripts(tmp_path)
    # Inject a ZeroDivisionError into the report step: it must not leak a traceback.
    source = script.read_text().replace("def build_report(", "def build_report_(", 1)
    source = source.replace("report = build_report(", "report = build_report_(1/0, ", 1)
    script.write_text(source)
    proc = run_cli("--params", "1e9", "--gpus", "1", "--gpu-memory-gb", "8", script=script)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
