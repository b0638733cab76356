"""Per-GPU memory of a TRL fine-tuning run for each scaling strategy, and the least invasive plan
that fits. Model states follow the ZeRO paper (Rajbhandari et al. 2020, sec. 3.1 and 5), QLoRA
storage follows Dettmers et al. 2023 (sec. 2); defaults follow TRL 1.16.0. Every assumption is
listed in the report (`assumptions`). Pure arithmetic: nothing here reads the machine."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .model_shape import PEFT_MOE_REMAPPED_TYPES, ModelShape, lora_param_count

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
# TRL 1.16.0 defaults checked in the installed code: GRPOConfig.beta = 0.0 (no reference model),
# RLOOConfig.beta = 0.05; DPO and KTO build a reference model unless PEFT is used or
# precompute_ref_log_probs is set (outside FSDP); SFT and reward have none.
DEFAULT_BETA = {"grpo": 0.0, "rloo": 0.05}
# Trainers whose 1.16.0 default loss goes through add_fused_lm_head (no full logits).
FUSED_LOSS_TRAINERS = ("sft", "dpo", "kto", "grpo", "rloo")
# DPO and reward collators put chosen and rejected sequences in one batch of 2 x batch_size.
PAIRED_TRAINERS = ("dpo", "reward")


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
