#!/usr/bin/env python3
"""Estimate per-GPU memory of a TRL fine-tuning run for each scaling strategy and recommend one.

Stdlib only, Python 3.9+. Model states follow the ZeRO paper (Rajbhandari et al. 2020, sec. 3.1 and 5),
activations follow Korthikanti et al. 2022 (sec. 4.1 and 5), QLoRA storage follows Dettmers et al. 2023
(sec. 2). Defaults follow TRL 1.16.0. Every assumption is listed in the output.

Exit codes: 0 report made, 2 bad input, 3 unexpected error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace

GB = 1e9
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "zero3_offload", "fsdp2", "fsdp2_offload")
TRAINERS = ("sft", "dpo", "grpo", "rloo", "reward", "kto")
OPTIMIZERS = ("adamw", "adamw_8bit", "paged_adamw", "paged_adamw_8bit", "adafactor", "sgd")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# NF4 with double quantization (QLoRA paper sec. 2): 4 bits + 8-bit absmax per 64 weights + one fp32
# second-level constant per 256 blocks = 4 + 8/64 + 32/(64*256) bits per weight.
NF4_DQ_BYTES = (4 + 8 / 64 + 32 / (64 * 256)) / 8
NF4_BYTES = (4 + 32 / 64) / 8  # single quantization: one fp32 absmax per 64 weights
# TRL 1.16.0 fused LM head (trl/kernels/chunked_logprob.py): tiles of TOKEN_CHUNK_SIZE tokens by
# _CHUNKED_LOGPROB_CHUNK_SIZE vocabulary entries (trl/trainer/utils.py).
FUSED_TOKEN_TILE = 4096
UNFUSED_LOGITS_COPIES = 3
FUSED_VOCAB_TILE = 32768
LINEAR_NAMES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_b_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "shared_expert_gate",
)
# peft 0.21.2 maps "all-linear" on these transformers 5.x MoE layouts back to the v4 expert and router
# projections (peft/utils/transformers_weight_conversion.py with transformers' conversion patterns):
# the router gets rank r, the fused gate_up_proj rank 2*r*E, down_proj rank r*E. Other MoE types
# (qwen2_moe among them) get no expert adapters. Where the remap follows qwen2_moe's pattern, the
# names gate_proj/up_proj/down_proj point at the experts, so dense and shared-expert MLPs get none.
PEFT_MOE_REMAPPED_TYPES = ("mixtral", "qwen3_moe", "deepseek_v3")
PEFT_MLP_NAMES_REMAPPED_TYPES = ("qwen3_moe", "deepseek_v3")
# TRL 1.16.0 defaults checked in the installed code: GRPOConfig.beta = 0.0 (no reference model),
# RLOOConfig.beta = 0.05; DPO and KTO build a reference model unless PEFT is used or
# precompute_ref_log_probs is set (outside FSDP); SFT and reward have none.
DEFAULT_BETA = {"grpo": 0.0, "rloo": 0.05}
# Trainers whose 1.16.0 default loss goes through add_fused_lm_head (no full logits).
FUSED_LOSS_TRAINERS = ("sft", "dpo", "kto", "grpo", "rloo")
# DPO and reward collators put chosen and rejected sequences in one batch of 2 x batch_size.
PAIRED_TRAINERS = ("dpo", "reward")


class InputError(Exception):
    """Bad user input: reported as one line on stderr with exit code 2."""


@dataclass
class ModelShape:
    """What the estimate needs to know about the model."""

    params: int
    hidden: int
    layers: int
    heads: int
    vocab: int
    block_params: int  # largest decoder layer, for the ZeRO-3/FSDP gather working set
    # module name -> sum over occurrences of (in_features + out_features), for LoRA counting
    lora_dims: dict = field(default_factory=dict)
    quantizable_params: int = 0  # nn.Linear weights of the decoder layers (4-bit under QLoRA)
    exact: bool = True
    source: str = ""


# ----------------------------------------------------------------------------- parameter counting


def _get(config: dict, *names, default=None):
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def _text_config(config: dict) -> dict:
    if "text_config" in config and "hidden_size" not in config:
        return config["text_config"]
    return config


SUPPORTED_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v3",
)


def _check_decoder_config(config: dict) -> None:
    model_type = config.get("model_type")
    archs = config.get("architectures") or []
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise InputError(
            f"model_type {model_type!r} is not a supported causal LM decoder "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)}); use --params instead"
        )
    if archs and not any(a.endswith("ForCausalLM") for a in archs):
        raise InputError(f"architectures {archs} contain no *ForCausalLM class")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InputError(f"config.json field {key!r} must be a positive integer, got {value!r}")


def _attention_linears(c: dict) -> dict:
    """(in, out, bias) per attention projection of one layer."""
    h, n_heads = c["hidden_size"], c["num_attention_heads"]
    if c["model_type"] == "deepseek_v3":
        return _mla_linears(c)
    n_kv = _get(c, "num_key_value_heads", default=n_heads)
    head_dim = _get(c, "head_dim", default=h // n_heads)
    # Qwen2 always has q/k/v biases, Qwen2-MoE follows qkv_bias (default True); the others follow
    # attention_bias, which also covers o_proj.
    if c["model_type"] == "qwen2":
        qkv_bias, o_bias = True, False
    elif c["model_type"] == "qwen2_moe":
        qkv_bias, o_bias = bool(c.get("qkv_bias", True)), False
    else:
        qkv_bias = o_bias = bool(c.get("attention_bias"))
    return {
        "q_proj": (h, n_heads * head_dim, qkv_bias),
        "k_proj": (h, n_kv * head_dim, qkv_bias),
        "v_proj": (h, n_kv * head_dim, qkv_bias),
        "o_proj": (n_heads * head_dim, h, o_bias),
    }


def _mla_linears(c: dict) -> dict:
    """DeepSeek multi-head latent attention projections."""
    h, n_heads = c["hidden_size"], c["num_attention_heads"]
    nope, rope, v_dim = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kv_rank, q_rank = c["kv_lora_rank"], c.get("q_lora_rank")
    bias = bool(c.get("attention_bias"))
    out = {}
    if q_rank:
        out["q_a_proj"] = (h, q_rank, bias)
        out["q_b_proj"] = (q_rank, n_heads * (nope + rope), False)
    else:
        out["q_proj"] = (h, n_heads * (nope + rope), False)
    out["kv_a_proj_with_mqa"] = (h, kv_rank + rope, bias)
    out["kv_b_proj"] = (kv_rank, n_heads * (nope + v_dim), False)
    out["o_proj"] = (n_heads * v_dim, h, bias)
    return out


def _attention_norm_params(c: dict) -> int:
    if c["model_type"] in ("qwen3", "qwen3_moe", "gemma3_text"):
        head_dim = _get(c, "head_dim", default=c["hidden_size"] // c["num_attention_heads"])
        return 2 * head_dim  # q_norm and k_norm
    if c["model_type"] == "deepseek_v3":
        return (c.get("q_lora_rank") or 0) + c["kv_lora_rank"]  # q_a_layernorm, kv_a_layernorm
    return 0


def _layer_norm_count(c: dict) -> int:
    # Gemma 2/3 add pre- and post-feedforward norms to the two usual ones.
    return 4 if c["model_type"] in ("gemma2", "gemma3_text") else 2


def _is_moe_layer(c: dict, index: int) -> bool:
    model_type = c["model_type"]
    if model_type == "mixtral":
        return True
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step = c.get("decoder_sparse_step", 1) or 1
        return (
            index not in (c.get("mlp_only_layers") or [])
            and _get(c, "num_experts", default=0) > 0
            and (index + 1) % step == 0
        )
    if model_type == "deepseek_v3":
        freq = c.get("moe_layer_freq", 1) or 1
        return (
            c.get("n_routed_experts")
            and index >= c.get("first_k_dense_replace", 0)
            and index % freq == 0
        )
    return False


def _dense_mlp(h: int, inter: int, bias: bool) -> dict:
    return {
        "gate_proj": (h, inter, bias),
        "up_proj": (h, inter, bias),
        "down_proj": (inter, h, bias),
    }


def _moe_layer(c: dict) -> tuple[int, dict]:
    """(routed expert + router params, shared-expert linears) of one MoE layer."""
    h = c["hidden_size"]
    experts = _get(c, "num_local_experts", "num_experts", "n_routed_experts")
    inter = _get(c, "moe_intermediate_size", "intermediate_size")
    # experts + router weight; DeepSeek's e_score_correction_bias is a buffer, not a parameter
    routed = experts * 3 * h * inter + experts * h
    shared = {}
    if c["model_type"] == "qwen2_moe" and c.get("shared_expert_intermediate_size"):
        shared = _dense_mlp(h, c["shared_expert_intermediate_size"], False)
        shared["shared_expert_gate"] = (h, 1, False)
    elif c["model_type"] == "deepseek_v3" and c.get("n_shared_experts"):
        shared = _dense_mlp(h, inter * c["n_shared_experts"], False)
    return routed, shared


def _expert_lora_dims(c: dict) -> dict:
    """LoRA params per unit of rank that peft 0.21.2 adds to one MoE layer's router and experts."""
    if c["model_type"] not in PEFT_MOE_REMAPPED_TYPES:
        return {}
    h = c["hidden_size"]
    experts = _get(c, "num_local_experts", "num_experts", "n_routed_experts")
    inter = _get(c, "moe_intermediate_size", "intermediate_size")
    return {
        "router": h + experts,
        "experts": 2 * experts * (h + 2 * inter) + experts * (inter + h),
    }


def _linear_params(linears: dict) -> int:
    return sum(i * o + (o if bias else 0) for i, o, bias in linears.values())


def count_params(config: dict) -> ModelShape:
    """Exact parameter count of a Hugging Face causal LM config (transformers 5.x layouts)."""
    c = _text_config(config)
    _check_decoder_config(c)
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    tied = bool(c.get("tie_word_embeddings", c["model_type"].startswith("gemma")))
    attention = _attention_linears(c)
    per_layer_norms = _layer_norm_count(c) * h + _attention_norm_params(c)
    mlp_bias = bool(c.get("mlp_bias"))
    total = vocab * h * (1 if tied else 2) + h  # embeddings, lm_head, final norm
    quantizable = 0
    block_max = 0
    lora_dims: dict = {}
    for index in range(layers):
        linears = dict(attention)
        routed = 0
        if _is_moe_layer(c, index):
            routed, shared = _moe_layer(c)
            linears.update(shared)
            for name, dims in _expert_lora_dims(c).items():
                lora_dims[name] = lora_dims.get(name, 0) + dims
        else:
            linears.update(_dense_mlp(h, c["intermediate_size"], mlp_bias))
        layer = _linear_params(linears) + routed + per_layer_norms
        total += layer
        # bitsandbytes replaces nn.Linear only: fused 3D experts and routers stay unquantized
        quantizable += sum(i * o for i, o, _ in linears.values())
        block_max = max(block_max, layer)
        for name, (i, o, _) in linears.items():
            if name in ("gate_proj", "up_proj", "down_proj") and (
                c["model_type"] in PEFT_MLP_NAMES_REMAPPED_TYPES
            ):
                continue
            lora_dims[name] = lora_dims.get(name, 0) + i + o
    return ModelShape(
        params=total,
        hidden=h,
        layers=layers,
        heads=c["num_attention_heads"],
        vocab=vocab,
        block_params=block_max,
        lora_dims=lora_dims,
        quantizable_params=quantizable,
        exact=True,
        source=f"config.json ({c['model_type']})",
    )


def shape_from_params(params: float, vocab: int = 32000) -> ModelShape:
    """Llama-like shape for a bare parameter count: h/L = 128 and 12*L*h^2 non-embedding params."""
    hidden = max(128, int(round((128 * params / 12) ** (1 / 3) / 128)) * 128)
    embed = 2 * vocab * hidden
    layers = max(1, int(round(max(params - embed, 12 * hidden * hidden) / (12 * hidden * hidden))))
    inter = 8 * hidden // 3
    # all-linear LoRA dims of one MHA layer with a SwiGLU MLP of 8h/3
    lora_dims = {name: layers * 2 * hidden for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
    lora_dims.update({n: layers * (hidden + inter) for n in ("gate_proj", "up_proj", "down_proj")})
    return ModelShape(
        params=int(params),
        hidden=hidden,
        layers=layers,
        heads=max(1, hidden // 128),
        vocab=vocab,
        block_params=int(max(params - embed, 0) / layers),
        lora_dims=lora_dims,
        quantizable_params=int(max(params - embed, 0)),
        exact=False,
        source="--params (Llama-like shape assumed)",
    )


def lora_param_count(shape: ModelShape, rank: int, targets: str) -> int:
    """LoRA adds r*(in+out) per targeted linear (A: r x in, B: out x r)."""
    if targets == "all-linear":
        names = list(shape.lora_dims)
    else:
        names = [t.strip() for t in targets.split(",") if t.strip()]
        unknown = [n for n in names if n not in LINEAR_NAMES]
        if unknown:
            raise InputError(
                f"unknown --lora-targets {unknown}; choose from {', '.join(LINEAR_NAMES)}"
            )
    return rank * sum(shape.lora_dims.get(name, 0) for name in names)


# ----------------------------------------------------------------------------- settings


@dataclass
class Settings:
    trainer: str = "sft"
    tuning: str = "full"
    lora_r: int = 16
    lora_targets: str = "all-linear"
    dtype: str = "bf16"
    optimizer: str = "adamw"
    master_weights: str = "fp32"
    seq_len: int = 1024
    batch_size: int = 8
    gradient_checkpointing: bool = True
    gpus: int = 1
    gpu_memory_gb: float = 80.0
    vllm_mode: str = "none"
    vllm_gpu_memory_utilization: float = 0.3
    attention: str = "sdpa"
    fused_loss: bool = True
    headroom: float = 0.1
    cpu_memory_gb: float | None = None
    double_quant: bool = True
    beta: float | None = None
    precompute_ref_log_probs: bool = False


@dataclass
class Estimate:
    """Per-GPU bytes of one strategy."""

    weights: float
    gradients: float
    optimizer: float
    gather_buffer: float
    activations: float
    reference_model: float
    vllm: float
    cpu_offload: float
    offload: bool

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        return (
            self.model_states
            + self.gather_buffer
            + self.activations
            + self.reference_model
            + self.vllm
        )


# ----------------------------------------------------------------------------- bytes per component


def trainable_params(shape: ModelShape, s: Settings) -> int:
    if s.tuning == "full":
        return shape.params
    return lora_param_count(shape, s.lora_r, s.lora_targets)


def master_bytes(s: Settings) -> int:
    """fp32 master copy kept by mixed-precision optimizers (ZeRO paper: part of K)."""
    return 4 if s.master_weights == "fp32" and s.dtype != "fp32" else 0


def optimizer_state_bytes(s: Settings) -> float:
    """Optimizer state bytes per trainable parameter, excluding the master copy."""
    if s.optimizer in ("adamw", "paged_adamw"):
        # fp32 moments next to fp32 master weights; without them torch keeps moments in the param dtype.
        state = 4 if master_bytes(s) or s.dtype == "fp32" else DTYPE_BYTES[s.dtype]
        return 2 * state
    if s.optimizer in ("adamw_8bit", "paged_adamw_8bit"):
        return 2.0  # two uint8 moments (blockwise absmax constants ignored: about 1.6%)
    return 0.0  # adafactor: factored second moment, no momentum; sgd: no momentum by default


def optimizer_bytes_per_param(s: Settings) -> float:
    """K of the ZeRO paper: 12 for mixed-precision Adam (4 master + 4 momentum + 4 variance)."""
    return master_bytes(s) + optimizer_state_bytes(s)


def weight_bytes(shape: ModelShape, s: Settings) -> float:
    d = DTYPE_BYTES[s.dtype]
    if s.tuning == "full":
        return shape.params * d
    adapters = trainable_params(shape, s) * d
    if s.tuning == "lora":
        return shape.params * d + adapters
    nf4 = NF4_DQ_BYTES if s.double_quant else NF4_BYTES
    kept = shape.params - shape.quantizable_params  # embeddings, lm_head, norms, biases
    return shape.quantizable_params * nf4 + kept * d + adapters


def gather_block_bytes(shape: ModelShape, s: Settings) -> float:
    """Unsharded working set under ZeRO-3/FSDP: two decoder layers (current + prefetch) or the
    gathered LM head, whichever is larger (the fused LM head gathers lm_head.weight whole)."""
    d = DTYPE_BYTES[s.dtype]
    block = shape.block_params * (
        NF4_DQ_BYTES
        if s.tuning == "qlora" and s.double_quant
        else (NF4_BYTES if s.tuning == "qlora" else d)
    )
    return max(2 * block, shape.vocab * shape.hidden * d)


def needs_reference_model(s: Settings) -> bool:
    if s.trainer in ("sft", "reward") or s.tuning != "full":
        return False  # with PEFT the reference is the adapter-disabled policy
    if s.trainer in ("grpo", "rloo"):
        beta = DEFAULT_BETA[s.trainer] if s.beta is None else s.beta
        return beta != 0.0
    return not s.precompute_ref_log_probs  # dpo, kto


def sequences_per_micro_batch(s: Settings) -> int:
    return s.batch_size * (2 if s.trainer in PAIRED_TRAINERS else 1)


def layer_activation_bytes(shape: ModelShape, s: Settings) -> float:
    """Korthikanti et al. 2022, eq. (2): s*b*h*(34 + 5*a*s/h) bytes per layer with 16-bit
    activations; the 5*a*s/h attention-score term is not stored by SDPA/FlashAttention kernels."""
    sbh = s.seq_len * sequences_per_micro_batch(s) * shape.hidden
    score_term = 5 * shape.heads * s.seq_len / shape.hidden if s.attention == "eager" else 0.0
    return sbh * (34 + score_term) * activation_scale(s)


def activation_scale(s: Settings) -> float:
    """The paper's bytes assume 16-bit activations; fp32 compute stores twice as much (measured
    on CPU: 79 vs 44 bytes per s*b*h for a Llama layer, tests/test_estimate_memory_measured.py)."""
    return DTYPE_BYTES[s.dtype] / 2


def loss_head_bytes(shape: ModelShape, s: Settings) -> float:
    tokens = s.seq_len * sequences_per_micro_batch(s)
    if s.trainer == "reward":
        return 0.0  # sequence-classification head: one score per sequence
    if not uses_fused_loss(s):
        # Full logits: at the start of backward the fp32 log-softmax output and two logits-sized
        # fp32 gradients are live together (measured 3.1-3.2x one fp32 logits tensor on CPU).
        return tokens * shape.vocab * 4 * UNFUSED_LOGITS_COPIES
    d = DTYPE_BYTES[s.dtype]
    tile = min(tokens, FUSED_TOKEN_TILE) * min(shape.vocab, FUSED_VOCAB_TILE) * d
    grad_hidden = tokens * shape.hidden * 4  # backward accumulates in fp32
    grad_weight = shape.vocab * shape.hidden * 4 if s.tuning == "full" else 0
    return tile + grad_hidden + grad_weight


def uses_fused_loss(s: Settings) -> bool:
    return s.fused_loss and s.trainer in FUSED_LOSS_TRAINERS


def activation_bytes(shape: ModelShape, s: Settings) -> float:
    per_layer = layer_activation_bytes(shape, s)
    if s.gradient_checkpointing:
        # Korthikanti et al. 2022 sec. 4.3 (full recomputation): 2*s*b*h bytes of layer input kept
        # per layer, plus one layer's full working set while it is recomputed.
        sbh = s.seq_len * sequences_per_micro_batch(s) * shape.hidden
        layers = shape.layers * 2 * sbh * activation_scale(s) + per_layer
    else:
        layers = shape.layers * per_layer
    return layers + loss_head_bytes(shape, s)


def vllm_bytes(s: Settings) -> float:
    if s.vllm_mode == "colocate":
        return s.vllm_gpu_memory_utilization * s.gpu_memory_gb * GB
    return 0.0


# ----------------------------------------------------------------------------- strategies


def estimate_strategy(shape: ModelShape, s: Settings, strategy: str) -> Estimate:
    """Partition model states per ZeRO stage (ZeRO paper sec. 5.1-5.3); FSDP2 shards like ZeRO-3."""
    n = s.gpus
    trainable = trainable_params(shape, s)
    weights = weight_bytes(shape, s)
    grads = trainable * DTYPE_BYTES[s.dtype]
    optim = trainable * optimizer_bytes_per_param(s)
    ref = shape.params * DTYPE_BYTES[s.dtype] if needs_reference_model(s) else 0.0
    offload = strategy.endswith("_offload")
    gather = 0.0
    cpu = 0.0
    if strategy in ("zero1",):
        optim /= n
    elif strategy == "zero2":
        optim, grads = optim / n, grads / n
    elif strategy in ("zero3", "fsdp2"):
        weights, grads, optim, ref = weights / n, grads / n, optim / n, ref / n
        gather = gather_block_bytes(shape, s)
    elif offload:
        cpu = (weights + grads + optim + ref) / n
        weights = grads = optim = ref = 0.0
        gather = gather_block_bytes(shape, s)
    return Estimate(
        weights=weights,
        gradients=grads,
        optimizer=optim,
        gather_buffer=gather,
        activations=activation_bytes(shape, s),
        reference_model=ref,
        vllm=vllm_bytes(s),
        cpu_offload=cpu,
        offload=offload,
    )


def usable_bytes(s: Settings) -> float:
    return s.gpu_memory_gb * GB * (1 - s.headroom)


GPUS_PER_NODE = 8


def fits(estimate: Estimate, s: Settings) -> bool:
    if estimate.offload and not cpu_fits(estimate, s):
        return False
    return estimate.total <= usable_bytes(s)


def cpu_fits(estimate: Estimate, s: Settings) -> bool:
    """Offloaded states of the GPUs of one node (up to 8) must fit the node's CPU RAM, if given."""
    if s.cpu_memory_gb is None:
        return True
    return estimate.cpu_offload * min(s.gpus, GPUS_PER_NODE) <= s.cpu_memory_gb * GB


def estimate_all(shape: ModelShape, s: Settings) -> dict:
    return {name: estimate_strategy(shape, s, name) for name in STRATEGIES}


# ----------------------------------------------------------------------------- recommendation

SHARDED = ("zero1", "zero2", "zero3", "fsdp2")
OFFLOADED = ("zero3_offload", "fsdp2_offload")


def _memory_variants(s: Settings) -> list:
    """(settings, changes) from as-given to checkpointing on to halved micro-batches down to 1."""
    variants = [(s, [])]
    base_changes = []
    if not s.gradient_checkpointing:
        s = replace(s, gradient_checkpointing=True)
        base_changes = ["gradient_checkpointing=True"]
        variants.append((s, base_changes))
    batch = s.batch_size
    while batch > 1:
        batch = max(1, batch // 2)
        factor = s.batch_size // batch
        change = (
            f"per_device_train_batch_size={batch} (multiply gradient_accumulation_steps by "
            f"{factor} to keep the effective batch)"
        )
        variants.append((replace(s, batch_size=batch), base_changes + [change]))
    return variants


def _tuning_variants(s: Settings) -> list:
    variants = [(s, [])]
    target = f"LoRA r={s.lora_r} on {s.lora_targets}"
    if s.tuning == "full":
        variants.append((replace(s, tuning="lora"), [f"use_peft=True ({target})"]))
    if s.tuning != "qlora":
        variants.append(
            (
                replace(s, tuning="qlora"),
                [f"use_peft=True, load_in_4bit=True (QLoRA NF4, {target})"],
            )
        )
    return variants


def candidate_plans(s: Settings) -> list:
    """Plans in the skill's order, least invasive first: as given, then checkpointing / smaller
    micro-batch, then sharding the given tuning over the GPUs, then LoRA, then QLoRA (each on DDP
    before sharding), and CPU offload last."""
    sharded = SHARDED if s.gpus > 1 else ()
    plans = []
    for tuned, tuning_changes in _tuning_variants(s):
        for strategies in (("ddp",), sharded):
            for varied, memory_changes in _memory_variants(tuned):
                for strategy in strategies:
                    plans.append((strategy, varied, tuning_changes + memory_changes))
    for tuned, tuning_changes in _tuning_variants(s):
        for varied, memory_changes in _memory_variants(tuned):
            for strategy in OFFLOADED:
                plans.append((strategy, varied, tuning_changes + memory_changes))
    return plans


def recommend(shape: ModelShape, s: Settings) -> dict:
    best = None
    for strategy, varied, changes in candidate_plans(s):
        estimate = estimate_strategy(shape, varied, strategy)
        if fits(estimate, varied):
            return {
                "strategy": strategy,
                "changes": changes,
                "reason": _fit_reason(strategy, estimate, varied, changes),
                "fits": True,
                "total_gb": _gb(estimate.total),
            }
        if best is None or estimate.total < best[1].total:
            best = (strategy, estimate, changes)
    strategy, estimate, changes = best
    return {
        "strategy": None,
        "changes": changes,
        "reason": _no_fit_reason(strategy, estimate, s, changes),
        "fits": False,
        "total_gb": _gb(estimate.total),
    }


def _no_fit_reason(strategy: str, estimate: Estimate, s: Settings, changes: list) -> str:
    plan = f"{strategy}, {'; '.join(changes) or 'as given'}"
    if estimate.total <= usable_bytes(s):
        node = estimate.cpu_offload * min(s.gpus, GPUS_PER_NODE)
        return (
            f"nothing fits: the smallest plan ({plan}) needs {_gb(estimate.total)} GB per GPU but "
            f"offloads {_gb(node)} GB to the CPU RAM of a node, more than --cpu-memory-gb "
            f"{s.cpu_memory_gb:g}; add CPU RAM or GPUs (sharding divides model states by the GPU "
            "count)"
        )
    missing = estimate.total - usable_bytes(s)
    return (
        f"nothing fits: the smallest plan ({plan}) needs {_gb(estimate.total)} GB per GPU, "
        f"{_gb(missing)} GB more than the {_gb(usable_bytes(s))} GB usable; add GPUs (sharding "
        "divides model states by the GPU count), use GPUs with more memory, or shorten --seq-len"
    )


def _fit_reason(strategy: str, estimate: Estimate, s: Settings, changes: list) -> str:
    what = "as given" if not changes else "after " + "; ".join(changes)
    text = (
        f"{strategy} fits {what}: {_gb(estimate.total)} GB of {_gb(usable_bytes(s))} GB usable "
        f"per GPU (headroom {s.headroom:.0%})"
    )
    if strategy == "zero3":
        text += "; fsdp2 is estimated the same"
    if strategy == "zero1":
        # trl/accelerate_configs/zero1.yaml sets gradient_accumulation_steps: 1 in deepspeed_config.
        text += (
            "; TRL's shipped zero1 config pins gradient_accumulation_steps: 1, so copy it and "
            "delete that line (or use zero2) if you accumulate"
        )
    if strategy.endswith("_offload"):
        text += f"; needs about {_gb(estimate.cpu_offload)} GB of CPU RAM per GPU and runs slower"
    return text


def _gb(value: float) -> float:
    return round(value / GB, 2)


# ----------------------------------------------------------------------------- assumptions


def assumptions(shape: ModelShape, s: Settings) -> list:
    d = DTYPE_BYTES[s.dtype]
    k = optimizer_bytes_per_param(s)
    out = [
        f"parameters: {shape.params:,} ({shape.source}); "
        + ("counted exactly" if shape.exact else "hidden/layers/vocab inferred, approximate"),
        f"model states per trainable parameter: {d} B weights ({s.dtype}) + {d} B gradients + "
        f"K={k:g} B optimizer ({master_bytes(s)} B fp32 master + {optimizer_state_bytes(s):g} B "
        f"{s.optimizer} states), as in the ZeRO paper's 2+2+K accounting",
        "sharding (ZeRO paper sec. 5): ddp replicates everything; zero1 shards optimizer states; "
        "zero2 also gradients; zero3 and fsdp2 also weights (fsdp2 is estimated like zero3); "
        "*_offload keep weights, gradients and optimizer states on the CPU (cpu_offload_gb per GPU)",
        "zero3/fsdp2 add a gather buffer: two unsharded decoder layers or the whole lm_head "
        "(the fused LM head gathers it), whichever is larger",
        f"activations (Korthikanti et al. 2022): s*b*h*{'(34 + 5*a*s/h)' if s.attention == 'eager' else '34'} "
        "bytes per layer with 16-bit activations, twice that with fp32 compute"
        + (
            "; the 5*a*s/h attention-score term is dropped (SDPA/FlashAttention keep no score matrix)"
            if s.attention != "eager"
            else " (eager attention stores the score matrix)"
        ),
        "gradient checkpointing (TRL 1.16.0 default True) keeps 2*s*b*h bytes per layer plus one "
        "layer's full working set during recomputation; activations are not sharded by ZeRO/FSDP",
        f"headroom: {s.headroom:.0%} of each GPU's memory kept free for the CUDA context, NCCL "
        "buffers and fragmentation; GB means 1e9 bytes",
        "offload plans need CPU RAM: cpu_offload_gb per GPU; "
        + (
            f"checked against --cpu-memory-gb {s.cpu_memory_gb:g} per node of up to "
            f"{GPUS_PER_NODE} GPUs"
            if s.cpu_memory_gb is not None
            else "not checked (pass --cpu-memory-gb)"
        ),
        "not modelled: DDP gradient buckets, temporary fp32 gradient copies, communication buckets, "
        "MoE routing imbalance (activations use the dense formula), the CUDA context itself",
    ]
    if s.trainer in PAIRED_TRAINERS:
        out.append(
            f"{s.trainer}: chosen and rejected sequences share one forward, so a micro-batch is "
            f"2 x {s.batch_size} sequences of --seq-len tokens"
        )
    if s.trainer in ("grpo", "rloo"):
        out.append(
            f"{s.trainer}: per_device_train_batch_size counts completions (prompt+completion "
            "= --seq-len tokens); num_generations groups completions across the generation batch "
            "(per_device_train_batch_size x processes x steps_per_generation) and does not add "
            "per-device memory beyond the micro-batch; generation KV cache without vLLM is not modelled"
        )
    out.append(_loss_assumption(s))
    out.append(_reference_assumption(s))
    out.extend(_tuning_assumptions(shape, s))
    out.extend(_optimizer_assumptions(s))
    out.extend(_vllm_assumptions(s))
    return out


def _loss_assumption(s: Settings) -> str:
    if s.trainer == "reward":
        return "reward: sequence-classification head, no vocabulary logits"
    if uses_fused_loss(s):
        return (
            f"{s.trainer}: TRL 1.16.0 computes the default loss through its fused LM head "
            f"(no full logits): one {FUSED_TOKEN_TILE} x {FUSED_VOCAB_TILE} tile in the compute "
            "dtype, fp32 gradient of the hidden states, and an fp32 lm_head gradient when it trains"
        )
    return (
        "full logits materialised: 3 x s*b*vocab*4 bytes (fp32 log-softmax output and two "
        "logits-sized gradients live at the start of backward)"
    )


def _reference_assumption(s: Settings) -> str:
    if needs_reference_model(s):
        return (
            f"{s.trainer}: a frozen reference model in {s.dtype} is loaded (replicated under "
            "ddp/zero1/zero2, sharded under zero3/fsdp2, offloaded with the *_offload variants)"
        )
    if s.trainer in ("grpo", "rloo") and s.tuning == "full":
        return (
            f"{s.trainer}: beta = 0.0 so no reference model is loaded (GRPOConfig default in "
            "TRL 1.16.0; RLOOConfig defaults to beta=0.05)"
        )
    if s.trainer in ("dpo", "kto", "grpo", "rloo") and s.tuning != "full":
        return (
            f"{s.trainer}: with PEFT the reference is the adapter-disabled policy (no extra copy)"
        )
    if s.precompute_ref_log_probs:
        return f"{s.trainer}: precompute_ref_log_probs=True, no reference model kept in memory"
    return f"{s.trainer}: no reference model"


def _tuning_assumptions(shape: ModelShape, s: Settings) -> list:
    if s.tuning == "full":
        return []
    out = [
        f"{s.tuning}: {trainable_params(shape, s):,} trainable adapter parameters (r={s.lora_r}, "
        f"targets {s.lora_targets}: r*(in+out) per linear); gradients and optimizer states only "
        f"for them; frozen base weights in {s.dtype}"
        + ("" if shape.exact else " (approximate without --model-config)"),
        "MoE: transformers 5.x fuses routed experts into 3D tensors; for all-linear, peft 0.21.2 "
        "adds router and expert adapters (rank r, 2*r*E for gate_up_proj, r*E for down_proj) on "
        f"{', '.join(PEFT_MOE_REMAPPED_TYPES)} only, and on qwen3_moe/deepseek_v3 the dense and "
        "shared-expert MLPs then get none",
        "TRL's ModelConfig leaves lora_target_modules=None, so peft falls back to its per-model "
        "default (q_proj,v_proj for Llama/Mistral/Qwen2/Qwen3/Gemma); pass --lora-targets to match",
    ]
    if s.tuning == "qlora":
        bits = 8 * (NF4_DQ_BYTES if s.double_quant else NF4_BYTES)
        out.append(
            f"qlora: decoder-layer projections stored as NF4 at {bits:.3f} bits/param "
            + (
                "(double quantization: 8-bit absmax per 64 weights, fp32 constant per 256 blocks)"
                if s.double_quant
                else "(fp32 absmax per 64 weights; TRL's use_bnb_nested_quant default is False)"
            )
            + f"; embeddings, lm_head, norms, biases stay in {s.dtype}, and so do MoE routed "
            "experts and routers (transformers 5.24's bitsandbytes integration replaces nn.Linear "
            "modules only, and fused 3D expert tensors are not nn.Linear)"
        )
    return out


def _optimizer_assumptions(s: Settings) -> list:
    out = []
    if s.master_weights == "none" and s.dtype != "fp32" and s.optimizer in ("adamw", "paged_adamw"):
        out.append(f"no fp32 master weights: optimizer moments kept in {s.dtype} (pure {s.dtype})")
    if s.optimizer.startswith("paged"):
        out.append(
            "paged optimizers allocate the same bytes on the GPU, but pages can spill to CPU RAM "
            "under memory pressure, so the optimizer term is an upper bound"
        )
    if s.optimizer == "adafactor":
        out.append("adafactor: factored second moment (row+column) counted as 0, no momentum")
    if s.optimizer == "sgd":
        out.append("sgd: no momentum buffer (torch SGD default momentum=0)")
    return out


def _vllm_assumptions(s: Settings) -> list:
    if s.vllm_mode == "colocate":
        return [
            f"vLLM colocate: vllm_gpu_memory_utilization={s.vllm_gpu_memory_utilization} of each "
            "GPU's memory is reserved for weights and KV cache"
        ]
    if s.vllm_mode == "server":
        return ["vLLM server: 0 on trainer GPUs; the server needs its own GPUs"]
    return []


# ----------------------------------------------------------------------------- report


def strategy_row(estimate: Estimate, s: Settings) -> dict:
    return {
        "weights_gb": _gb(estimate.weights),
        "gradients_gb": _gb(estimate.gradients),
        "optimizer_gb": _gb(estimate.optimizer),
        "model_states_gb": _gb(estimate.model_states),
        "gather_buffer_gb": _gb(estimate.gather_buffer),
        "activations_gb": _gb(estimate.activations),
        "reference_model_gb": _gb(estimate.reference_model),
        "vllm_gb": _gb(estimate.vllm),
        "total_gb": _gb(estimate.total),
        "cpu_offload_gb": _gb(estimate.cpu_offload),
        "fits": fits(estimate, s),
        "offload": estimate.offload,
    }


def build_report(shape: ModelShape, s: Settings) -> dict:
    return {
        "schema_version": 1,
        "inputs": asdict(s),
        "model": {
            "params": shape.params,
            "trainable_params": trainable_params(shape, s),
            "hidden_size": shape.hidden,
            "num_layers": shape.layers,
            "num_heads": shape.heads,
            "vocab_size": shape.vocab,
            "exact": shape.exact,
            "source": shape.source,
        },
        "usable_gb_per_gpu": _gb(usable_bytes(s)),
        "strategies": {name: strategy_row(e, s) for name, e in estimate_all(shape, s).items()},
        "recommendation": recommend(shape, s),
        "assumptions": assumptions(shape, s),
    }


COLUMNS = (
    ("weights_gb", "weights"),
    ("gradients_gb", "grads"),
    ("optimizer_gb", "optim"),
    ("gather_buffer_gb", "gather"),
    ("activations_gb", "activ"),
    ("reference_model_gb", "ref"),
    ("vllm_gb", "vllm"),
    ("total_gb", "total"),
)


def render_text(report: dict) -> str:
    inputs, model = report["inputs"], report["model"]
    lines = [
        f"Model: {model['params']:,} params ({model['source']}), trainable "
        f"{model['trainable_params']:,}",
        f"Run: {inputs['trainer']} {inputs['tuning']} {inputs['dtype']} {inputs['optimizer']}, "
        f"seq {inputs['seq_len']} x micro-batch {inputs['batch_size']}, gradient checkpointing "
        f"{'on' if inputs['gradient_checkpointing'] else 'off'}, {inputs['gpus']} GPU(s) x "
        f"{inputs['gpu_memory_gb']:g} GB, usable {report['usable_gb_per_gpu']:g} GB per GPU",
        "",
        "Per-GPU GB (1e9 bytes):",
        f"{'strategy':<14}" + "".join(f"{title:>9}" for _, title in COLUMNS) + "  fits",
    ]
    for name, row in report["strategies"].items():
        cells = "".join(f"{row[key]:>9.2f}" for key, _ in COLUMNS)
        extra = f"  (CPU {row['cpu_offload_gb']:.2f} GB)" if row["offload"] else ""
        lines.append(f"{name:<14}{cells}  {'yes' if row['fits'] else 'no'}{extra}")
    rec = report["recommendation"]
    lines += ["", f"Recommendation: {rec['strategy'] or 'none fits'}"]
    lines += [f"  change: {change}" for change in rec["changes"]]
    lines += [f"  reason: {rec['reason']}", "", "Assumptions:"]
    lines += [f"  - {text}" for text in report["assumptions"]]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line


EPILOG = """\
examples:
  estimate_memory.py --params 8e9 --trainer sft --gpus 1 --gpu-memory-gb 24
  estimate_memory.py --model-config ./Qwen3-8B/config.json --trainer grpo --tuning lora \\
      --vllm-mode colocate --gpus 8 --gpu-memory-gb 80 --json

Without --gpus/--gpu-memory-gb the visible GPUs are read from check_optional_backends.py.
Gigabytes are 1e9 bytes. Every assumption is listed in the report.

exit codes:
  0  report made (whether or not anything fits)
  2  bad input: a one-line error names what was expected
  3  unexpected internal error (one line, no traceback)
"""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        raise InputError(message)


def _positive(kind):
    def parse(text):
        try:
            value = kind(float(text)) if kind is int and "e" in text.lower() else kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number")
        return value

    return parse


DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}


def _dtype(text):
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPE_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of bf16, fp16, fp32")
    return name


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 1)")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="estimate_memory.py",
        description="Per-GPU memory per scaling strategy (DDP, ZeRO-1/2/3, FSDP2, offload) for a "
        "TRL 1.16.0 fine-tuning run, and a recommendation.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--params", type=_positive(float), help="parameter count, e.g. 7.5e9")
    src.add_argument("--model-config", help="local Hugging Face config.json of a causal LM")
    p.add_argument("--vocab-size", type=_positive(int), default=32000, help="with --params")
    p.add_argument("--trainer", choices=TRAINERS, default="sft")
    p.add_argument("--tuning", choices=("full", "lora", "qlora"), default="full")
    p.add_argument("--lora-r", type=_positive(int), default=16, help="ModelConfig.lora_r default")
    p.add_argument(
        "--lora-targets", default="all-linear", help="all-linear or a comma list of module names"
    )
    p.add_argument("--no-double-quant", action="store_true", help="QLoRA without nested quant")
    p.add_argument(
        "--dtype", type=_dtype, default="bf16", help="bf16, fp16 or fp32 (torch names accepted)"
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument("--master-weights", choices=("fp32", "none"), default="fp32")
    p.add_argument("--seq-len", type=_positive(int), default=1024, help="tokens per sequence")
    p.add_argument("--batch-size", type=_positive(int), default=8, help="per-device micro-batch")
    p.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="TRL configs default to True",
    )
    p.add_argument("--attention", choices=("sdpa", "flash", "eager"), default="sdpa")
    p.add_argument(
        "--fused-loss",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="TRL 1.16.0 fused LM head (sft, dpo, kto, grpo, rloo)",
    )
    p.add_argument("--beta", type=float, help="KL coefficient for grpo/rloo (default: TRL's)")
    p.add_argument("--precompute-ref-log-probs", action="store_true", help="dpo/kto")
    p.add_argument("--num-generations", type=_positive(int), help="grpo/rloo (informational)")
    p.add_argument("--gpus", type=_positive(int), help="default: the visible GPUs")
    p.add_argument(
        "--gpu-memory-gb", type=_positive(float), help="default: the smallest visible GPU"
    )
    p.add_argument("--vllm-mode", choices=("none", "colocate", "server"), default="none")
    p.add_argument("--vllm-gpu-memory-utilization", type=_fraction, default=0.3)
    p.add_argument("--headroom", type=_fraction, default=0.1, help="fraction kept free")
    p.add_argument(
        "--cpu-memory-gb", type=_positive(float), help="CPU RAM per node, checked for offload"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def detect_gpus(timeout: float = 60.0) -> tuple:
    """(count, smallest total memory in GB) from check_optional_backends.py --json."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_optional_backends.py")
    hint = "pass --gpus and --gpu-memory-gb"
    if not os.path.exists(script):
        raise InputError(f"cannot detect GPUs (check_optional_backends.py not found); {hint}")
    try:
        done = subprocess.run(
            [sys.executable, script, "--json"], capture_output=True, text=True, timeout=timeout
        )
        devices = json.loads(done.stdout)["accelerators"]["devices"]
    except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError, OSError) as exc:
        raise InputError(f"cannot detect GPUs ({type(exc).__name__}); {hint}") from None
    memories = [d.get("memory_total_mib") for d in devices or [] if d.get("memory_total_mib")]
    if not memories:
        raise InputError(f"no GPU visible; {hint}")
    return len(devices), min(memories) * 2**20 / GB


def load_config(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise InputError(f"{path} is not a config.json object")
    return config


def model_shape(args) -> ModelShape:
    if args.params is None and args.model_config is None:
        raise InputError("pass one of --params or --model-config")
    if args.params is not None:
        return shape_from_params(args.params, args.vocab_size)
    config = load_config(args.model_config)
    try:
        return count_params(config)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise InputError(f"{args.model_config}: missing or bad field {exc}") from None


def settings_from_args(args) -> Settings:
    gpus, memory = args.gpus, args.gpu_memory_gb
    if gpus is None or memory is None:
        detected_gpus, detected_memory = detect_gpus()
        gpus = gpus or detected_gpus
        memory = memory or detected_memory
    if args.vllm_mode != "none" and args.trainer not in ("grpo", "rloo"):
        raise InputError("--vllm-mode applies to --trainer grpo or rloo only")
    return Settings(
        trainer=args.trainer,
        tuning=args.tuning,
        lora_r=args.lora_r,
        lora_targets=args.lora_targets,
        dtype=args.dtype,
        optimizer=args.optimizer,
        master_weights=args.master_weights,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        gradient_checkpointing=args.gradient_checkpointing,
        gpus=gpus,
        gpu_memory_gb=memory,
        vllm_mode=args.vllm_mode,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        attention=args.attention,
        fused_loss=args.fused_loss,
        headroom=args.headroom,
        cpu_memory_gb=args.cpu_memory_gb,
        double_quant=not args.no_double_quant,
        beta=args.beta,
        precompute_ref_log_probs=args.precompute_ref_log_probs,
    )


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        shape = model_shape(args)
        settings = settings_from_args(args)
        report = build_report(shape, settings)
    except InputError as exc:
        print(f"estimate_memory.py: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # one line, never a traceback
        print(f"estimate_memory.py: unexpected error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
