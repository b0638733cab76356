"""Per-GPU memory of a TRL fine-tuning run for each scaling strategy, and the least invasive plan
that fits. Model states follow the ZeRO paper (Rajbhandari et al. 2020, sec. 3.1 and 5), QLoRA
storage follows Dettmers et al. 2023 (sec. 2), host RAM for offload follows DeepSpeed's own
estimators, and vLLM's share follows how TRL 1.16.0 starts it (trl/generation/vllm_generation.py);
defaults follow TRL 1.16.0. Every assumption is listed in the report (`assumptions`). Pure
arithmetic: nothing here reads the machine."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from . import activations, trl_batch
from .cli import UsageError
from .model_shape import PEFT_MOE_REMAPPED_TYPES, ModelShape, lora_param_count

GB = 1e9
GIB = 2**30
STRATEGIES = (
    "ddp",
    "zero1",
    "zero2",
    "zero3",
    "fsdp2",
    "zero2_offload_opt",
    "zero3_offload_opt",
    "zero3_offload",
    "fsdp2_offload",
)
SHARDED = ("zero1", "zero2", "zero3", "fsdp2")
# The offload ladder, cheapest first: optimizer states and fp32 gradients on the CPU
# (ZeRO-Offload: offload_optimizer_device cpu), then parameters too.
OPTIMIZER_OFFLOAD = ("zero2_offload_opt", "zero3_offload_opt")
PARAM_OFFLOAD = ("zero3_offload", "fsdp2_offload")
OFFLOADED = OPTIMIZER_OFFLOAD + PARAM_OFFLOAD
TRAINERS = ("sft", "dpo", "grpo", "rloo", "reward", "kto")
OPTIMIZERS = ("adamw", "adamw_8bit", "paged_adamw", "paged_adamw_8bit", "adafactor", "sgd")
EIGHT_BIT_OPTIMIZERS = ("adamw_8bit", "paged_adamw_8bit")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# torch names (TRL dtype choices) of the estimator dtypes
DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}
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
ONLINE_TRAINERS = trl_batch.GROUPED_TRAINERS

# Host RAM of offloaded states. DeepSpeed 0.19's estimate_zero2/zero3_model_states_mem_needs count
# 16 bytes per parameter on the CPU for optimizer offload (fp32 master, two fp32 Adam moments, fp32
# gradient), 2 more with parameter offload (the 16-bit weights), times additional_buffer_factor=1.5
# for pinned buffers; the offloaded step is DeepSpeed's CPU Adam whatever --optimizer says.
CPU_ADAM_BYTES = 16
HOST_BUFFER_FACTOR = 1.5
GPUS_PER_NODE = 8
# A detected GPU total this close below a whole GiB is read as that printed size (card_gib).
CARD_RESERVE = 0.01

# Margin rule: a plan whose total is within the last 5 % of usable memory (after --headroom) is
# "tight". The activation estimate is good to about 10 % and activations are often half the total,
# so a tight plan can run out of memory; it is recommended only when no plan in the order fits
# with this margin, and the report says so.
MARGIN = 0.05

# vLLM as TRL 1.16.0 starts it. Colocate (trl/generation/vllm_generation.py): LLM(model=
# model.name_or_path, tensor_parallel_size=vllm_tensor_parallel_size, gpu_memory_utilization=...,
# max_model_len=vllm_max_model_length, max_num_seqs=per_device_train_batch_size *
# vllm_tensor_parallel_size * steps_per_generation (grpo_trainer.py, rloo_trainer.py),
# max_num_batched_tokens=4096, quantization="bitsandbytes" when the policy has Linear4bit layers).
# vLLM loads its own copy from the checkpoint with dtype "auto" (16-bit), so a LoRA policy costs
# vLLM the base model (TRL merges adapters before each weight sync). Server: `trl vllm-serve`
# defaults gpu_memory_utilization=0.9, tensor_parallel_size=1, data_parallel_size=1.
VLLM_DEFAULT_UTILIZATION = {"colocate": 0.3, "server": 0.9}
VLLM_WEIGHT_BYTES = 2
VLLM_KV_BYTES = 2  # kv_cache_dtype "auto": the model's 16-bit dtype
# vLLM's own working memory inside its share: activations of its 4096-token profiling batch, the
# sampler, CUDA graphs and NCCL buffers. A flat allowance, not derived from the model.
VLLM_RUNTIME_BYTES = 1.5e9
UTILIZATION_STEP = 0.05
# LoRA dropout keeps a boolean mask per adapted input on a GPU (torch's fused native_dropout);
# None: a mask in the adapter's dtype, as dropout on a CPU keeps (the CPU tests set it).
DROPOUT_MASK_BYTES: int | None = activations.BOOL


# ----------------------------------------------------------------------------- settings


@dataclass
class Settings:
    trainer: str = "sft"
    tuning: str = "full"
    lora_r: int = 16
    lora_dropout: float = 0.05  # ModelConfig.lora_dropout
    lora_targets: str = "all-linear"
    dtype: str = "bf16"  # weights as loaded (ModelConfig.dtype / model_init_kwargs["dtype"])
    optimizer: str = "adamw"
    master_weights: str = "fp32"
    seq_len: int = 1024
    batch_size: int = 8
    gradient_checkpointing: bool = True
    gpus: int = 1
    gpu_memory_gb: float = 80.0  # capacity of each GPU in GB (1e9 bytes)
    vllm_mode: str = "none"
    vllm_gpu_memory_utilization: float | None = None  # None: TRL's default for the mode
    attention: str = "sdpa"
    fused_loss: bool = True
    headroom: float = 0.1
    cpu_memory_gb: float | None = None  # host RAM per node in GB; None: not checked
    double_quant: bool = False  # ModelConfig.use_bnb_nested_quant default
    beta: float | None = None
    precompute_ref_log_probs: bool = False
    compute_dtype: str | None = None  # autocast dtype (bf16=True / fp16=True); None: dtype
    gradient_accumulation_steps: int = 1
    steps_per_generation: int | None = None  # None: gradient_accumulation_steps, as in TRL
    num_generations: int | None = None  # None: TRL's default for the trainer
    vllm_tensor_parallel_size: int = 1
    vllm_data_parallel_size: int = 1  # server only
    vllm_max_model_length: int | None = None  # None: the config's max_position_embeddings
    vllm_enable_sleep_mode: bool = False
    gpu_memory_source: str = ""  # where gpu_memory_gb came from, for the report
    cpu_memory_source: str = ""  # where cpu_memory_gb came from, for the report


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
    vllm_fits: bool = True  # colocate: vLLM's weights and KV cache fit its share
    vllm_sleeps: bool = False  # colocate with sleep mode: vLLM's share is released for training

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer

    @property
    def training(self) -> float:
        return self.model_states + self.gather_buffer + self.activations + self.reference_model

    @property
    def total(self) -> float:
        """Peak per GPU. With sleep mode vLLM holds its share only while it generates, when
        the model states are resident but the activations are not."""
        if self.vllm_sleeps:
            resident = self.model_states + self.reference_model + self.vllm
            return max(self.training, resident)
        return self.training + self.vllm


# ----------------------------------------------------------------------------- bytes per component


def compute_dtype(s: Settings) -> str:
    return s.compute_dtype or s.dtype


def deepspeed_view(s: Settings, strategy: str) -> Settings:
    """DeepSpeed with bf16/fp16 mixed precision casts the module to that dtype
    (DeepSpeedEngine._configure_distributed_model) and keeps the fp32 master copy in its
    optimizer, whatever dtype the weights were loaded in."""
    compute = compute_dtype(s)
    if strategy.startswith("zero") and s.dtype == "fp32" and compute != "fp32":
        return replace(s, dtype=compute, compute_dtype=None)
    return s


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
    if s.optimizer in EIGHT_BIT_OPTIMIZERS:
        return 2.0  # two uint8 moments (blockwise absmax constants ignored: about 1.6%)
    return 0.0  # adafactor: factored second moment, no momentum; sgd: no momentum by default


def optimizer_bytes_per_param(s: Settings) -> float:
    """K of the ZeRO paper: 12 for mixed-precision Adam (4 master + 4 momentum + 4 variance)."""
    return master_bytes(s) + optimizer_state_bytes(s)


def nf4_bytes(s: Settings) -> float:
    return NF4_DQ_BYTES if s.double_quant else NF4_BYTES


def weight_bytes(shape: ModelShape, s: Settings) -> float:
    d = DTYPE_BYTES[s.dtype]
    if s.tuning == "full":
        return shape.params * d
    adapters = trainable_params(shape, s) * d
    if s.tuning == "lora":
        return shape.params * d + adapters
    kept = shape.params - shape.quantizable_params  # embeddings, lm_head, norms, biases
    return shape.quantizable_params * nf4_bytes(s) + kept * d + adapters


def gather_block_bytes(shape: ModelShape, s: Settings) -> float:
    """Unsharded working set under ZeRO-3/FSDP: two decoder layers (current + prefetch) or the
    gathered LM head, whichever is larger (the fused LM head gathers lm_head.weight whole)."""
    d = DTYPE_BYTES[s.dtype]
    block = shape.block_params * (nf4_bytes(s) if s.tuning == "qlora" else d)
    return max(2 * block, shape.vocab * shape.hidden * d)


def needs_reference_model(s: Settings) -> bool:
    if s.trainer in ("sft", "reward") or s.tuning != "full":
        return False  # with PEFT the reference is the adapter-disabled policy
    if s.trainer in ONLINE_TRAINERS:
        beta = DEFAULT_BETA[s.trainer] if s.beta is None else s.beta
        return beta != 0.0
    return not s.precompute_ref_log_probs  # dpo, kto


def sequences_per_micro_batch(s: Settings) -> int:
    return s.batch_size * (2 if s.trainer in PAIRED_TRAINERS else 1)


def compute_bytes(s: Settings) -> int:
    return DTYPE_BYTES[compute_dtype(s)]


def autocast_weights_bytes(s: Settings, strategy: str = "ddp") -> int | None:
    """The weights' size when they stay wider than the compute dtype in the forward (fp32 weights
    under bf16/fp16 autocast), else None. Only DDP runs so: DeepSpeed casts the module
    (deepspeed_view) and FSDP2's mixed-precision policy gathers 16-bit parameters and casts the
    forward's inputs (accelerate sets param_dtype to the compute dtype). QLoRA is estimated in
    the compute dtype: its 4-bit linears are no autocast ops (bitsandbytes is not installed
    here to measure the rest)."""
    weights, compute = DTYPE_BYTES[s.dtype], compute_bytes(s)
    if strategy.startswith(("zero", "fsdp")) or weights <= compute or s.tuning == "qlora":
        return None
    return weights


def lora_targets(shape: ModelShape, s: Settings) -> frozenset:
    """The adapted module names lora_param_count counts: every one for all-linear (peft's expert
    and router adapters included where it remaps them), else the listed ones the model has."""
    if s.lora_targets == "all-linear":
        names = list(shape.lora_dims)
    else:
        names = [name.strip() for name in s.lora_targets.split(",")]
    return frozenset(name for name in names if shape.lora_dims.get(name))


def adapter_bytes(s: Settings, strategy: str) -> int:
    """The adapters' dtype in TRL 1.16.0: get_peft_model upcasts 16-bit adapters to fp32
    (peft's autocast_adapter_dtype=True), except under DeepSpeed ZeRO-3 without quantization,
    where every trainer passes autocast_adapter_dtype=False (e.g. sft_trainer.py:857), and for
    QLoRA, whose adapters TRL casts to bf16 (sft_trainer.py:904-910)."""
    if s.tuning == "qlora":
        return DTYPE_BYTES["bf16"]
    if strategy.startswith("zero3"):
        return DTYPE_BYTES[s.dtype]
    return 4


def lora_activations(shape: ModelShape, s: Settings, strategy: str) -> activations.Lora | None:
    """What the adapters change in the activations (activations.Lora); None for full tuning.
    peft 0.21.2 refuses dropout on the expert stacks' adapters (tuners/lora/layer.py:2366), so
    with them the run needs lora_dropout=0 and is estimated so."""
    if s.tuning == "full":
        return None
    targets = lora_targets(shape, s)
    experts = "experts" in targets
    return activations.Lora(
        targets=targets,
        rank=s.lora_r,
        adapter_bytes=adapter_bytes(s, strategy),
        dropout=s.lora_dropout > 0 and not experts,
        mask_bytes=DROPOUT_MASK_BYTES,
        experts=experts,
    )


def attention_kernel(s: Settings) -> str:
    """The activation model's kernel: FlashAttention keeps what SDPA's fused kernels keep (q, k,
    v, output, log-sum-exp; unverified on a GPU here), eager the s x s scores."""
    return "eager" if s.attention == "eager" else "sdpa"


def sdpa_masked(s: Settings) -> bool:
    """Whether SDPA receives a mask, which makes transformers repeat GQA's K/V to every head.

    TRL 1.16.0 pads a batch to its longest sequence: SFT's DataCollatorForLanguageModeling (with
    padding_free or BFD packing it passes position ids of several sequences, which masking_utils
    turns into a block mask), the chosen and rejected pair of DPO and reward, and GRPO/RLOO's
    generation batch (each process's b x steps_per_generation completions are padded together
    before they are split into micro-batches). One unpadded sequence gets no mask. FlashAttention
    takes none (varlen kernels, native GQA).
    """
    if s.attention == "flash":
        return False
    if s.trainer in ONLINE_TRAINERS:
        return s.batch_size * steps_per_generation(s) > 1
    return sequences_per_micro_batch(s) > 1


def loss_head_bytes(shape: ModelShape, s: Settings) -> float:
    tokens = s.seq_len * sequences_per_micro_batch(s)
    if s.trainer == "reward":
        return 0.0  # sequence-classification head: one score per sequence
    if not uses_fused_loss(s):
        # Full logits: at the start of backward the fp32 log-softmax output and two logits-sized
        # fp32 gradients are live together (measured 3.1-3.2x one fp32 logits tensor on CPU).
        return tokens * shape.vocab * 4 * UNFUSED_LOGITS_COPIES
    d = DTYPE_BYTES[compute_dtype(s)]
    tile = min(tokens, FUSED_TOKEN_TILE) * min(shape.vocab, FUSED_VOCAB_TILE) * d
    grad_hidden = tokens * shape.hidden * 4  # backward accumulates in fp32
    grad_weight = shape.vocab * shape.hidden * 4 if s.tuning == "full" else 0
    return tile + grad_hidden + grad_weight


def uses_fused_loss(s: Settings) -> bool:
    return s.fused_loss and s.trainer in FUSED_LOSS_TRAINERS


def _decoder_args(shape: ModelShape, s: Settings, strategy: str) -> tuple:
    args = (
        shape.layer_kinds,
        s.seq_len,
        sequences_per_micro_batch(s),
        compute_bytes(s),
        attention_kernel(s),
    )
    kwargs = {
        "checkpointing": s.gradient_checkpointing,
        "padded": sdpa_masked(s),
        "weights_bytes": autocast_weights_bytes(s, strategy),
        "lora": lora_activations(shape, s, strategy),
    }
    return args, kwargs


def decoder_kept_bytes(shape: ModelShape, s: Settings, strategy: str = "ddp") -> float:
    """What the decoder layers hold when backward starts (activations.decoder_kept_bytes)."""
    args, kwargs = _decoder_args(shape, s, strategy)
    return activations.decoder_kept_bytes(*args, **kwargs)


def decoder_transient_bytes(shape: ModelShape, s: Settings, strategy: str = "ddp") -> float:
    """The most one layer adds during its backward (activations.decoder_transient_bytes)."""
    args, kwargs = _decoder_args(shape, s, strategy)
    return activations.decoder_transient_bytes(*args, **kwargs)


def autocast_cache_bytes(shape: ModelShape, s: Settings, strategy: str = "ddp") -> float:
    """Autocast's cached copies of trainable fp32 linear weights, held until the forward ends;
    they matter only with checkpointing, which otherwise frees each layer's copies."""
    weights = autocast_weights_bytes(s, strategy)
    if weights is None or s.tuning != "full" or not s.gradient_checkpointing:
        return 0.0
    return activations.decoder_autocast_cache_bytes(shape.layer_kinds, compute_bytes(s))


def shared_activation_bytes(shape: ModelShape, s: Settings, strategy: str = "ddp") -> float:
    """Input ids, rotary tables and the attention mask (activations.shared_bytes)."""
    (kinds, seq_len, batch, c, attention), kwargs = _decoder_args(shape, s, strategy)
    return activations.shared_bytes(
        kinds,
        seq_len,
        batch,
        c,
        attention,
        kwargs["padded"],
        weights_bytes=kwargs["weights_bytes"],
    )


def final_norm_bytes(shape: ModelShape, s: Settings, strategy: str = "ddp") -> float:
    """The last norm's saved tensors and the LM head's saved input: TRL's fused head saves the
    hidden states it scores (a copy of the valid positions on a GPU, trainer/utils.py:1638), the
    plain loss's lm_head saves them only when it trains."""
    (kinds, seq_len, batch, c, _), kwargs = _decoder_args(shape, s, strategy)
    weights = kwargs["weights_bytes"]
    norm = activations.final_norm_bytes(
        kinds, seq_len, batch, c, weights_bytes=weights, frozen=s.tuning != "full"
    )
    tokens = seq_len * batch
    if s.trainer == "reward":
        head_input = 0
    elif uses_fused_loss(s):
        head_input = tokens * shape.hidden * (weights or c)
    else:
        head_input = tokens * shape.hidden * c if s.tuning == "full" else 0
    return norm + head_input


def lm_head_autocast_bytes(shape: ModelShape, s: Settings, strategy: str = "ddp") -> float:
    """Under autocast the LM head's weight is cast too: whole by the plain loss (and saved for
    backward), one vocabulary tile at a time by TRL's fused head (trl/kernels/chunked_logprob.py
    casts ``weight[start:end]`` in forward and backward)."""
    if autocast_weights_bytes(s, strategy) is None or s.trainer == "reward":
        return 0.0
    rows = min(shape.vocab, FUSED_VOCAB_TILE) if uses_fused_loss(s) else shape.vocab
    return rows * shape.hidden * compute_bytes(s)


def loss_head_forward_bytes(shape: ModelShape, s: Settings) -> float:
    """What the loss head holds at the end of the forward: one tile for the fused head; for the
    plain loss the logits, their fp32 copy (when computed in 16 bits) and the log-softmax."""
    tokens = s.seq_len * sequences_per_micro_batch(s)
    if s.trainer == "reward":
        return 0.0
    c = compute_bytes(s)
    if uses_fused_loss(s):
        return min(tokens, FUSED_TOKEN_TILE) * min(shape.vocab, FUSED_VOCAB_TILE) * c
    return tokens * shape.vocab * (c + 4 + (4 if c < 4 else 0))


def activation_bytes(shape: ModelShape, s: Settings, strategy: str = "ddp") -> float:
    """Activation peak of one micro-batch. The loss head's backward runs before any decoder
    layer's, so its transient and a layer's do not add up: what the decoder keeps, plus what all
    layers share, plus the larger of the head's backward (on top of the final norm's saved
    tensors) and one layer's. With checkpointing under autocast the end of the forward can be
    higher: autocast's cached weight copies are still held (autocast_cache_bytes)."""
    kept = decoder_kept_bytes(shape, s, strategy) + shared_activation_bytes(shape, s, strategy)
    head = final_norm_bytes(shape, s, strategy) + lm_head_autocast_bytes(shape, s, strategy)
    backward = kept + max(
        head + loss_head_bytes(shape, s), decoder_transient_bytes(shape, s, strategy)
    )
    cache = autocast_cache_bytes(shape, s, strategy)
    forward = kept + head + loss_head_forward_bytes(shape, s) + cache
    return max(backward, forward)


# ----------------------------------------------------------------------------- vLLM


@dataclass
class VllmNeed:
    """What vLLM needs on each GPU it runs on (every training GPU in colocate mode, each server
    GPU in server mode) against the share it is given (gpu_memory_utilization x GPU memory)."""

    mode: str
    tensor_parallel_size: int
    data_parallel_size: int
    utilization: float
    max_model_len: int
    sequences: int  # sequences one engine generates at once: its part of the generation batch
    kv_tokens: int  # tokens its KV cache must hold
    weights: float
    kv_cache: float
    runtime: float
    share: float
    limit: float  # the largest share the GPU can give (usable memory after --headroom)
    sleep_mode: bool

    @property
    def needed(self) -> float:
        return self.weights + self.kv_cache + self.runtime

    @property
    def fits(self) -> bool:
        return self.needed <= self.share <= self.limit * (1 + 1e-9)  # 0.9 x GPU == usable


def vllm_utilization(s: Settings) -> float:
    if s.vllm_gpu_memory_utilization is not None:
        return s.vllm_gpu_memory_utilization
    return VLLM_DEFAULT_UTILIZATION.get(s.vllm_mode, 0.0)


def steps_per_generation(s: Settings) -> int:
    return s.steps_per_generation or s.gradient_accumulation_steps


def num_generations(s: Settings) -> int:
    return s.num_generations or trl_batch.DEFAULT_NUM_GENERATIONS.get(s.trainer, 0)


def generation_batch(s: Settings) -> int:
    """GRPOConfig/RLOOConfig generation_batch_size: completions generated at once, all GPUs."""
    return trl_batch.generation_batch(s.batch_size, s.gpus, steps_per_generation(s))


def vllm_sequences(s: Settings) -> int:
    """Sequences one vLLM engine holds at once. Colocate: TRL's max_num_seqs, the prompts of the
    engine's tensor-parallel group (each GPU's completions, num_generations copies included).
    Server: the whole generation batch, split over the server's data-parallel replicas."""
    if s.vllm_mode == "colocate":
        return s.batch_size * s.vllm_tensor_parallel_size * steps_per_generation(s)
    return math.ceil(generation_batch(s) / s.vllm_data_parallel_size)


def vllm_max_model_len(shape: ModelShape, s: Settings) -> int:
    """vllm_max_model_length, else what vLLM derives from the config (max_position_embeddings)."""
    return s.vllm_max_model_length or shape.max_positions or s.seq_len


def kv_bytes_per_token(shape: ModelShape, tensor_parallel: int) -> float:
    """KV cache bytes per token on one tensor-parallel rank. Attention heads split over ranks (a
    rank keeps at least one KV head); a multi-head latent is kept whole on every rank."""
    if shape.kv_latent:
        return shape.layers * shape.kv_latent * VLLM_KV_BYTES
    heads = math.ceil(shape.kv_heads / tensor_parallel)
    return shape.layers * 2 * heads * shape.head_dim * VLLM_KV_BYTES


def vllm_weight_bytes(shape: ModelShape, s: Settings) -> float:
    """vLLM's own copy of the base model: 16-bit, or bitsandbytes NF4 (no nested quantization)
    for the Linear weights when the policy is QLoRA. LoRA adapters are merged before each sync."""
    if s.tuning == "qlora":
        kept = shape.params - shape.quantizable_params
        return shape.quantizable_params * NF4_BYTES + kept * VLLM_WEIGHT_BYTES
    return shape.params * VLLM_WEIGHT_BYTES


def vllm_need(shape: ModelShape, s: Settings) -> VllmNeed | None:
    if s.vllm_mode == "none":
        return None
    tp = s.vllm_tensor_parallel_size
    max_len = vllm_max_model_len(shape, s)
    sequences = vllm_sequences(s)
    # vLLM refuses to start unless one max_model_len sequence fits its KV cache; a generation
    # batch that does not fit runs in waves (slower). Both are required here.
    tokens = max(sequences * min(s.seq_len, max_len), max_len)
    utilization = vllm_utilization(s)
    return VllmNeed(
        mode=s.vllm_mode,
        tensor_parallel_size=tp,
        data_parallel_size=s.vllm_data_parallel_size if s.vllm_mode == "server" else 1,
        utilization=utilization,
        max_model_len=max_len,
        sequences=sequences,
        kv_tokens=tokens,
        weights=vllm_weight_bytes(shape, s) / tp,
        kv_cache=tokens * kv_bytes_per_token(shape, tp),
        runtime=VLLM_RUNTIME_BYTES,
        share=utilization * s.gpu_memory_gb * GB,
        limit=usable_bytes(s),
        sleep_mode=s.vllm_mode == "colocate" and s.vllm_enable_sleep_mode,
    )


def vllm_bytes(s: Settings) -> float:
    """vLLM's share of each training GPU (colocate only)."""
    if s.vllm_mode == "colocate":
        return vllm_utilization(s) * s.gpu_memory_gb * GB
    return 0.0


def check_settings(shape: ModelShape, s: Settings) -> None:
    """What TRL or vLLM refuse before training starts, as a one-line UsageError."""
    if s.vllm_mode != "none" and s.trainer not in ONLINE_TRAINERS:
        raise UsageError("--vllm-mode applies to --trainer grpo or rloo only")
    if s.trainer in ONLINE_TRAINERS:
        _check_generation_batch(s)
    tp = s.vllm_tensor_parallel_size
    if s.vllm_mode == "colocate" and s.gpus % tp:
        # trl/generation/vllm_generation.py, colocate branch of _init_vllm
        raise UsageError(f"tensor_parallel_size ({tp}) must divide world size ({s.gpus}) evenly.")
    if s.vllm_mode != "none" and shape.heads % tp:
        raise UsageError(
            f"vLLM: total number of attention heads ({shape.heads}) must be divisible by tensor "
            f"parallel size ({tp})"
        )


def _check_generation_batch(s: Settings) -> None:
    """GRPOConfig/RLOOConfig.__post_init__ (TRL 1.16.0) at this world size."""
    count = num_generations(s)
    problem = trl_batch.minimum_problem(s.trainer, count)
    if problem:
        raise UsageError(problem)
    for _, message in trl_batch.batch_problems(
        s.batch_size, s.gpus, count, steps_per_generation(s)
    ):
        raise UsageError(
            f"{message} ({s.trainer.upper()}Config: per_device_train_batch_size x GPUs x "
            f"steps_per_generation = {s.batch_size} x {s.gpus} x {steps_per_generation(s)})"
        )


# ----------------------------------------------------------------------------- strategies


def estimate_strategy(shape: ModelShape, s: Settings, strategy: str) -> Estimate:
    """Partition model states per ZeRO stage (ZeRO paper sec. 5.1-5.3); FSDP2 shards like ZeRO-3.
    Offload follows DeepSpeed's estimators: ZeRO-Offload keeps fp32 master, moments and
    gradients on the CPU (16 B per trainable parameter), parameter offload adds the weights."""
    s = deepspeed_view(s, strategy)
    n = s.gpus
    trainable = trainable_params(shape, s)
    weights = weight_bytes(shape, s)
    grads = trainable * DTYPE_BYTES[s.dtype]
    optim = trainable * optimizer_bytes_per_param(s)
    ref = shape.params * DTYPE_BYTES[s.dtype] if needs_reference_model(s) else 0.0
    gather = cpu = 0.0
    if strategy == "zero1":
        optim /= n
    elif strategy == "zero2":
        optim, grads = optim / n, grads / n
    elif strategy in ("zero3", "fsdp2"):
        weights, grads, optim, ref = weights / n, grads / n, optim / n, ref / n
    elif strategy == "zero2_offload_opt":
        cpu, grads, optim = trainable * CPU_ADAM_BYTES / n, 0.0, 0.0
    elif strategy == "zero3_offload_opt":
        cpu, grads, optim = trainable * CPU_ADAM_BYTES / n, 0.0, 0.0
        weights, ref = weights / n, ref / n
    elif strategy == "zero3_offload":
        cpu = (trainable * CPU_ADAM_BYTES + weights + ref) / n
        weights = grads = optim = ref = 0.0
    elif strategy == "fsdp2_offload":
        cpu = (weights + grads + optim + ref) / n
        weights = grads = optim = ref = 0.0
    if strategy in ("zero3", "fsdp2", "zero3_offload_opt") + PARAM_OFFLOAD:
        gather = gather_block_bytes(shape, s)
    need = vllm_need(shape, s) if s.vllm_mode == "colocate" else None
    return Estimate(
        weights=weights,
        gradients=grads,
        optimizer=optim,
        gather_buffer=gather,
        activations=activation_bytes(shape, s, strategy),
        reference_model=ref,
        vllm=vllm_bytes(s),
        cpu_offload=cpu,
        offload=strategy in OFFLOADED,
        vllm_fits=need is None or need.fits,
        vllm_sleeps=need is not None and need.sleep_mode,
    )


def card_gib(detected_gib: float) -> float:
    """The size printed on a card, from the total the driver reports: a card keeps a little of
    its memory (an H100 80GB reports 81,559 MiB = 79.65 GiB), so a total within 1 % below a
    whole GiB is that whole GiB; anything else is taken as reported."""
    whole = math.ceil(detected_gib)
    return float(whole) if whole - detected_gib <= CARD_RESERVE * whole else detected_gib


def usable_bytes(s: Settings) -> float:
    return s.gpu_memory_gb * GB * (1 - s.headroom)


def host_bytes_per_node(estimate: Estimate, s: Settings) -> float:
    """Host RAM a node needs for the offloaded states of its GPUs (up to 8)."""
    return estimate.cpu_offload * min(s.gpus, GPUS_PER_NODE) * HOST_BUFFER_FACTOR


def host_fits(estimate: Estimate, s: Settings) -> bool:
    return s.cpu_memory_gb is None or host_bytes_per_node(estimate, s) <= s.cpu_memory_gb * GB


def fits(estimate: Estimate, s: Settings) -> bool:
    return estimate.vllm_fits and host_fits(estimate, s) and estimate.total <= usable_bytes(s)


def fits_with_margin(estimate: Estimate, s: Settings) -> bool:
    return fits(estimate, s) and estimate.total <= (1 - MARGIN) * usable_bytes(s)


def estimate_all(shape: ModelShape, s: Settings) -> dict:
    return {name: estimate_strategy(shape, s, name) for name in STRATEGIES}


# ----------------------------------------------------------------------------- recommendation


def _memory_variants(s: Settings) -> list:
    """(settings, changes) from as-given to checkpointing on to halved micro-batches down to 1,
    each keeping the effective batch by raising gradient_accumulation_steps (which TRL's
    steps_per_generation follows unless set, so the generation batch stays the same too)."""
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
        varied = replace(
            s, batch_size=batch, gradient_accumulation_steps=s.gradient_accumulation_steps * factor
        )
        if s.trainer in ONLINE_TRAINERS and generation_batch(varied) % num_generations(varied):
            continue  # TRL would refuse it (steps_per_generation set by hand)
        change = (
            f"per_device_train_batch_size={batch} (multiply gradient_accumulation_steps by "
            f"{factor} to keep the effective batch)"
        )
        variants.append((varied, base_changes + [change]))
    return variants


# Attention projections LoRA can target instead of all-linear (MLA names for DeepSeek).
ATTENTION_TARGETS = (
    "q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
    "kv_b_proj",
)  # fmt: skip


def _tuning_variants(shape: ModelShape, s: Settings) -> list:
    """As given, then LoRA, then QLoRA. On MoE models where all-linear adapts the fused expert
    stacks (each MoE layer then keeps a merged copy of them), LoRA and QLoRA on the attention
    projections alone come right after their all-linear form."""
    variants = [(s, [])]
    tunings = ["lora"] if s.tuning == "full" else []
    tunings += ["qlora"] if s.tuning != "qlora" else []
    for tuning in tunings:
        variants.append((replace(s, tuning=tuning), [_peft_change(tuning, s)]))
    narrow = _attention_only(shape, s)
    if narrow:
        for tuned, changes in list(variants):
            if tuned.tuning != "full":
                slim = replace(tuned, lora_targets=narrow)
                change = (
                    _peft_change(tuned.tuning, slim)
                    if changes
                    else (
                        f"lora_target_modules={narrow} (attention only: all-linear adapts the MoE "
                        "expert stacks, and each MoE layer then keeps a merged copy of them)"
                    )
                )
                index = variants.index((tuned, changes)) + 1
                variants.insert(index, (slim, [change]))
    return variants


def _peft_change(tuning: str, s: Settings) -> str:
    target = f"LoRA r={s.lora_r} on {s.lora_targets}"
    if tuning == "qlora":
        return f"use_peft=True, load_in_4bit=True (QLoRA NF4, {target})"
    return f"use_peft=True ({target})"


def _attention_only(shape: ModelShape, s: Settings) -> str | None:
    """The attention-only target list, when all-linear adapts MoE expert stacks."""
    if s.lora_targets != "all-linear" or not shape.lora_dims.get("experts"):
        return None
    names = [name for name in ATTENTION_TARGETS if name in shape.lora_dims]
    return ",".join(names) or None


def _optimizer_variants(s: Settings) -> list:
    """As given, then 8-bit AdamW moments (the cheapest rung: same method, 6 bytes less per
    trainable parameter with fp32 master weights)."""
    variants = [(s, [])]
    if s.optimizer in ("adamw", "paged_adamw"):
        eight_bit = "paged_adamw_8bit" if s.optimizer == "paged_adamw" else "adamw_8bit"
        change = (
            f'optim="{eight_bit}" (8-bit AdamW moments, needs bitsandbytes; paged_adamw_8bit '
            "also lets them spill to CPU RAM under pressure)"
        )
        variants.append((replace(s, optimizer=eight_bit), [change]))
    return variants


def _tensor_parallel_sizes(shape: ModelShape, s: Settings) -> list:
    """Tensor-parallel sizes vLLM accepts here: dividing the attention heads and, in colocate
    mode, the world size (TRL's check), within one node."""
    limit = min(s.gpus, GPUS_PER_NODE) if s.vllm_mode == "colocate" else GPUS_PER_NODE
    return [
        t
        for t in range(1, limit + 1)
        if shape.heads % t == 0 and (s.vllm_mode != "colocate" or s.gpus % t == 0)
    ]


def _utilization_for(shape: ModelShape, s: Settings) -> float:
    """The utilization to try besides the given one. Colocate: the smallest, in steps of 0.05,
    whose share holds what vLLM needs (the rest goes to training). Server: the GPUs are vLLM's
    own, so keep the given value within the usable memory (at most 1 - headroom), raised only
    as far as vLLM needs."""
    need = vllm_need(shape, s).needed / (s.gpu_memory_gb * GB)
    smallest = round(math.ceil(need / UTILIZATION_STEP - 1e-9) * UTILIZATION_STEP, 2)
    if s.vllm_mode == "server":
        return max(smallest, min(vllm_utilization(s), round(1 - s.headroom, 2)))
    return smallest


def _vllm_variants(shape: ModelShape, s: Settings) -> list:
    """(settings, changes) whose vLLM part fits, least invasive first: as given; the
    utilization vLLM needs when it is lower; a vllm_max_model_length of --seq-len; a larger
    tensor-parallel size; a higher utilization (the training share is re-checked by the plan);
    sleep mode; then, for colocate, server mode on GPUs taken from training."""
    if s.vllm_mode == "none":
        return [(s, [])]
    given_u = vllm_utilization(s)
    ranked = []
    for max_len in _max_len_options(shape, s):
        for tp in [t for t in _tensor_parallel_sizes(shape, s) if t >= s.vllm_tensor_parallel_size]:
            for sleep in _sleep_options(s):
                base = replace(
                    s,
                    vllm_max_model_length=max_len,
                    vllm_tensor_parallel_size=tp,
                    vllm_enable_sleep_mode=sleep,
                    vllm_gpu_memory_utilization=given_u,
                )
                for u in dict.fromkeys((given_u, _utilization_for(shape, base))):
                    varied = replace(base, vllm_gpu_memory_utilization=u)
                    if not vllm_need(shape, varied).fits:
                        continue
                    rank = (
                        sleep != s.vllm_enable_sleep_mode,
                        u > given_u,
                        tp,
                        max_len != s.vllm_max_model_length,
                        u != given_u,
                    )
                    ranked.append((rank, varied, _vllm_changes(shape, s, varied)))
    ranked.sort(key=lambda item: item[0])
    variants = [(varied, changes) for _, varied, changes in ranked]
    if s.vllm_mode == "colocate":
        variants += _server_variants(shape, s)
    return variants


def _max_len_options(shape: ModelShape, s: Settings) -> list:
    options = [s.vllm_max_model_length]
    if vllm_max_model_len(shape, s) > s.seq_len:
        options.append(s.seq_len)
    return options


def _sleep_options(s: Settings) -> list:
    if s.vllm_mode == "colocate" and not s.vllm_enable_sleep_mode:
        return [False, True]
    return [s.vllm_enable_sleep_mode]


def _server_variants(shape: ModelShape, s: Settings) -> list:
    """Colocate -> server: `trl vllm-serve` on k GPUs of the node, training on the others."""
    variants = []
    for k in _tensor_parallel_sizes(shape, replace(s, vllm_mode="server")):
        if k >= s.gpus:
            break
        for max_len in _max_len_options(shape, s):
            served = replace(
                s,
                vllm_mode="server",
                gpus=s.gpus - k,
                vllm_tensor_parallel_size=k,
                vllm_data_parallel_size=1,
                vllm_gpu_memory_utilization=VLLM_DEFAULT_UTILIZATION["server"],
                vllm_enable_sleep_mode=False,
                vllm_max_model_length=max_len,
            )
            if generation_batch(served) % num_generations(served):
                continue
            if vllm_need(shape, served).fits:
                flags = f"--tensor_parallel_size {k}" + (
                    f" --max_model_len {max_len}" if max_len != s.vllm_max_model_length else ""
                )
                change = (
                    f'vllm_mode="server": `trl vllm-serve --model <model> {flags}` on {k} GPU(s) '
                    f"of their own (CUDA_VISIBLE_DEVICES), training on the other {s.gpus - k} "
                    f"(--num_processes {s.gpus - k})"
                )
                variants.append((served, [change]))
                break
    return variants


def _vllm_changes(shape: ModelShape, given: Settings, varied: Settings) -> list:
    server = varied.vllm_mode == "server"
    changes = []
    if varied.vllm_max_model_length != given.vllm_max_model_length:
        default = vllm_max_model_len(shape, given)
        name = "trl vllm-serve --max_model_len " if server else "vllm_max_model_length="
        origin = "" if given.vllm_max_model_length else ", the config's max_position_embeddings"
        changes.append(
            f"{name}{varied.vllm_max_model_length} (vLLM otherwise sizes its KV cache for "
            f"{default:,} tokens{origin})"
        )
    if varied.vllm_tensor_parallel_size != given.vllm_tensor_parallel_size:
        tp = varied.vllm_tensor_parallel_size
        changes.append(
            f"trl vllm-serve --tensor_parallel_size {tp} (the server then uses {tp} GPUs)"
            if server
            else f"vllm_tensor_parallel_size={tp} (divides the {given.gpus} processes)"
        )
    if varied.vllm_enable_sleep_mode != given.vllm_enable_sleep_mode:
        changes.append(
            "vllm_enable_sleep_mode=True (vLLM releases its weights and KV cache while the "
            "model trains and reloads them for each generation)"
        )
    u = vllm_utilization(varied)
    if u != vllm_utilization(given):
        need = _gb(vllm_need(shape, varied).needed)
        name = (
            "trl vllm-serve --gpu_memory_utilization " if server else "vllm_gpu_memory_utilization="
        )
        changes.append(f"{name}{u:g} (vLLM needs {need} GB per GPU)")
    return changes


def candidate_plans(shape: ModelShape, s: Settings) -> list:
    """Plans in the skill's order, least invasive first. For the given tuning, then LoRA, then
    QLoRA: the optimizer as given, then 8-bit; within that the vLLM settings as given, then
    changed (see _vllm_variants); each on DDP before sharding, with checkpointing / smaller
    micro-batches. Then the offload ladder per tuning: optimizer offload (ZeRO-Offload) before
    parameter offload."""
    tunings = _tuning_variants(shape, s)
    plans = []
    for tuned, tuning_changes in tunings:
        for optimized, optimizer_changes in _optimizer_variants(tuned):
            for served, vllm_changes in _vllm_variants(shape, optimized):
                sharded = SHARDED if served.gpus > 1 else ()
                changes = tuning_changes + optimizer_changes + vllm_changes
                plans += _plans(served, (("ddp",), sharded), changes)
    for tuned, tuning_changes in tunings:
        for served, vllm_changes in _vllm_variants(shape, tuned):
            plans += _plans(
                served, (OPTIMIZER_OFFLOAD, PARAM_OFFLOAD), tuning_changes + vllm_changes
            )
    return plans


def _plans(s: Settings, groups: tuple, changes: list) -> list:
    plans = []
    for strategies in groups:
        for varied, memory_changes in _memory_variants(s):
            plans += [(strategy, varied, changes + memory_changes) for strategy in strategies]
    return plans


def recommend(shape: ModelShape, s: Settings) -> dict:
    """The first plan in candidate_plans' order that fits with the margin (MARGIN); failing
    that, the first that fits at all, marked tight; failing that, why nothing fits."""
    check_settings(shape, s)
    tight = None
    closest = None
    for strategy, varied, changes in candidate_plans(shape, s):
        estimate = estimate_strategy(shape, varied, strategy)
        if fits_with_margin(estimate, varied):
            return _fit(strategy, estimate, varied, changes, skipped=tight)
        if fits(estimate, varied):
            tight = tight or (strategy, estimate, varied, changes)
        elif closest is None or estimate.total < closest[1].total:
            closest = (strategy, estimate, varied, changes)
    if tight:
        return _fit(*tight, tight=True)
    return _no_fit(shape, s, closest)


def _fit(strategy, estimate, s, changes, skipped=None, tight=False) -> dict:
    return {
        "strategy": strategy,
        "changes": changes,
        "reason": _fit_reason(strategy, estimate, s, changes, skipped, tight),
        "fits": True,
        "tight": tight,
        "total_gb": _gb(estimate.total),
    }


def _no_fit(shape: ModelShape, s: Settings, closest) -> dict:
    if closest is None:  # no vLLM setting can hold the model
        reason, changes, total = _vllm_no_fit_reason(shape, s), [], None
    else:
        strategy, estimate, varied, changes = closest
        reason, total = _no_fit_reason(strategy, estimate, varied, changes), _gb(estimate.total)
    return {
        "strategy": None,
        "changes": changes,
        "reason": reason,
        "fits": False,
        "tight": False,
        "total_gb": total,
    }


def _vllm_no_fit_reason(shape: ModelShape, s: Settings) -> str:
    best = min(
        (
            vllm_need(shape, replace(s, vllm_tensor_parallel_size=tp, vllm_max_model_length=n))
            for tp in _tensor_parallel_sizes(shape, s)
            for n in _max_len_options(shape, s)
        ),
        key=lambda need: need.needed,
    )
    return (
        f"nothing fits: vLLM cannot hold the model on these GPUs; at best (tensor parallel size "
        f"{best.tensor_parallel_size}, max_model_len {best.max_model_len:,}) it needs "
        f"{_gb(best.needed)} GB per GPU ({_gb(best.weights)} GB weights + {_gb(best.kv_cache)} GB "
        f"KV cache + {_gb(best.runtime)} GB runtime), more than the {_gb(usable_bytes(s))} GB "
        f"usable; {_vllm_way_out(s)}"
    )


def _vllm_way_out(s: Settings) -> str:
    if s.vllm_mode == "server":
        return "give the server GPUs with more memory (or a larger --tensor_parallel_size)"
    if s.gpus == 1:
        return "run vLLM in server mode on a GPU of its own, or generate without vLLM"
    return "run vLLM in server mode on GPUs with more memory, or generate without vLLM"


def _no_fit_reason(strategy: str, estimate: Estimate, s: Settings, changes: list) -> str:
    plan = f"{strategy}, {'; '.join(changes) or 'as given'}"
    if estimate.total <= usable_bytes(s):
        return (
            f"nothing fits: the smallest plan ({plan}) needs {_gb(estimate.total)} GB per GPU but "
            f"{_gb(host_bytes_per_node(estimate, s))} GB of host RAM per node for its offloaded "
            f"states, more than the {s.cpu_memory_gb:g} GB {_host_source(s)}; add host RAM or GPUs "
            "(sharding divides model states by the GPU count)"
        )
    missing = estimate.total - usable_bytes(s)
    text = (
        f"nothing fits: the smallest plan ({plan}) needs {_gb(estimate.total)} GB per GPU, "
        f"{_gb(missing)} GB more than the {_gb(usable_bytes(s))} GB usable; add GPUs (sharding "
        "divides model states by the GPU count), use GPUs with more memory, or shorten --seq-len"
    )
    if estimate.vllm and not estimate.vllm_sleeps:
        text += f" (vLLM's colocated share, {_gb(estimate.vllm)} GB, is part of it)"
    return text


def _fit_reason(strategy, estimate, s, changes, skipped, tight) -> str:
    what = "as given" if not changes else "after " + "; ".join(changes)
    text = (
        f"{strategy} fits {what}: {_gb(estimate.total)} GB of {_gb(usable_bytes(s))} GB usable "
        f"per GPU (headroom {s.headroom:.0%})"
    )
    if tight:
        text += (
            f"; tight: within the last {MARGIN:.0%} of usable memory and no plan fits with more "
            "margin, so an activation estimate a few percent low runs out of memory"
        )
    elif skipped:
        name, other, other_s, other_changes = skipped
        how = f"after {len(other_changes)} change(s)" if other_changes else "as given"
        share = other.total / usable_bytes(other_s)
        text += (
            f"; an earlier plan, {name} {how}, is tight at {share:.0%} of usable memory (the "
            f"margin rule keeps {MARGIN:.0%} of it free)"
        )
    if strategy == "zero3":
        text += "; fsdp2 is estimated the same"
    if strategy == "zero1":
        # trl/accelerate_configs/zero1.yaml sets gradient_accumulation_steps: 1 in deepspeed_config.
        text += (
            "; TRL's shipped zero1 config pins gradient_accumulation_steps: 1, so copy it and "
            "delete that line (or use zero2) if you accumulate"
        )
    if strategy in OPTIMIZER_OFFLOAD:
        text += f"; DeepSpeed offload_optimizer_device: cpu (ZeRO-Offload){_host_text(estimate, s)}"
    if strategy in PARAM_OFFLOAD:
        text += f"; parameters and optimizer states on the CPU{_host_text(estimate, s)}"
    return text


def _host_text(estimate: Estimate, s: Settings) -> str:
    need = _gb(host_bytes_per_node(estimate, s))
    checked = (
        f"within the {s.cpu_memory_gb:g} GB {_host_source(s)}"
        if s.cpu_memory_gb is not None
        else "not checked: host RAM unknown"
    )
    return f", about {need} GB of host RAM per node ({checked}), and steps run slower"


def _host_source(s: Settings) -> str:
    return f"of host RAM ({s.cpu_memory_source})" if s.cpu_memory_source else "of host RAM"


def _gb(value: float) -> float:
    return round(value / GB, 2)


# ----------------------------------------------------------------------------- assumptions


def assumptions(shape: ModelShape, s: Settings) -> list:
    d = DTYPE_BYTES[s.dtype]
    k = optimizer_bytes_per_param(s)
    out = [
        f"parameters: {shape.params:,} ({shape.source}); "
        + ("counted exactly" if shape.exact else "hidden/layers/vocab inferred, approximate"),
        _units_assumption(s),
        f"model states per trainable parameter: {d} B weights ({s.dtype}) + {d} B gradients + "
        f"K={k:g} B optimizer ({master_bytes(s)} B fp32 master + {optimizer_state_bytes(s):g} B "
        f"{s.optimizer} states), as in the ZeRO paper's 2+2+K accounting",
        "sharding (ZeRO paper sec. 5): ddp replicates everything; zero1 shards optimizer states; "
        "zero2 also gradients; zero3 and fsdp2 also weights (fsdp2 is estimated like zero3)",
        "offload (DeepSpeed's estimators): zero2_offload_opt/zero3_offload_opt move fp32 master, "
        f"Adam moments and fp32 gradients to the CPU ({CPU_ADAM_BYTES} B per trainable parameter, "
        "DeepSpeed's CPU Adam whatever the optimizer); zero3_offload adds the weights; "
        "fsdp2_offload keeps weights, gradients and optimizer states on the CPU; host RAM per "
        f"node = offloaded bytes per GPU x GPUs per node (up to {GPUS_PER_NODE}) x "
        f"{HOST_BUFFER_FACTOR} (DeepSpeed's additional_buffer_factor)",
        _host_assumption(s),
        "zero3/fsdp2 add a gather buffer: two unsharded decoder layers or the whole lm_head "
        "(the fused LM head gathers it), whichever is larger",
        *activation_assumptions(shape, s),
        f"headroom: {s.headroom:.0%} of each GPU's memory kept free for the CUDA context, NCCL "
        f"buffers and fragmentation; margin: a plan above {1 - MARGIN:.0%} of the usable memory "
        "is tight and is recommended only when no plan in the order fits below it",
        "not modelled: DDP gradient buckets, temporary fp32 gradient copies, communication buckets, "
        "GPU kernels' workspaces, the CUDA context itself, host RAM of plans without offload (each "
        "process loads the checkpoint on the CPU first)",
    ]
    if s.dtype != compute_dtype(s):
        out.append(
            f"weights loaded in {s.dtype}, computed in {compute_dtype(s)} (autocast); DeepSpeed "
            f"(zero* rows) casts the module to {compute_dtype(s)} and keeps an fp32 master copy in "
            "its optimizer, DDP and FSDP2 keep the weights as loaded"
        )
    if s.trainer in PAIRED_TRAINERS:
        out.append(
            f"{s.trainer}: chosen and rejected sequences share one forward, so a micro-batch is "
            f"2 x {s.batch_size} sequences of --seq-len tokens"
        )
    if s.trainer in ONLINE_TRAINERS:
        out.append(
            f"{s.trainer}: per_device_train_batch_size counts completions (prompt+completion "
            f"= --seq-len tokens); num_generations={num_generations(s)} must divide the "
            f"generation batch (per_device_train_batch_size x GPUs x steps_per_generation = "
            f"{generation_batch(s)}) and adds no per-device memory beyond the micro-batch; "
            "generation KV cache without vLLM is not modelled"
        )
    out.append(_loss_assumption(s))
    out.append(_reference_assumption(s))
    out.extend(_tuning_assumptions(shape, s))
    out.extend(_optimizer_assumptions(s))
    out.extend(_vllm_assumptions(shape, s))
    return out


def activation_assumptions(shape: ModelShape, s: Settings) -> list:
    """How the activations were counted, with this run's per-layer figure."""
    kinds = shape.layer_kinds
    c = compute_bytes(s)
    weights = autocast_weights_bytes(s, "ddp")
    lora = lora_activations(shape, s, "ddp")
    kw = {"weights_bytes": weights, "lora": lora}
    per_token = max(
        sum(
            activations.saved_bytes_per_token(
                kind, s.seq_len, c, attention_kernel(s), sdpa_masked(s), **kw
            ).values()
        )
        for kind, _ in kinds
    )
    constant = max(activations.layer_constant_bytes(kind, c, **kw) for kind, _ in kinds)
    layer = (
        "a Llama-like layer (multi-head attention, SwiGLU MLP of width 8h/3)"
        if not shape.exact
        else "the config's layers"
    )
    out = [
        f"activations: what each decoder layer saves for backward, counted from {layer} as "
        "transformers 5.24 builds them (attention width heads x head_dim and the KV width, the "
        "gated MLP width, RMSNorm inputs kept in fp32, q/k norms, the MoE router's probabilities "
        "and each token's top-k expert rows, shared experts), measured on CPU within 10% per "
        f"layer for every fixture family; here {per_token / shape.hidden:.1f} bytes per s*b*h "
        f"per layer without checkpointing (ddp row, {compute_dtype(s)})"
        + (f", plus {_gb(constant)} GB per layer whatever the length" if constant else ""),
        _attention_assumption(s),
        "gradient checkpointing (TRL 1.16.0 default True): each layer keeps only its input "
        "hidden states, and one layer's saved tensors are rebuilt, with its gradients, during "
        "its backward",
        "activation peak: what the layers keep, plus the rotary tables, ids and mask they share, "
        "plus the larger of the loss head's backward (on the final norm's saved tensors) and one "
        "layer's backward: the head's runs first, so the two do not add up; activations are not "
        "sharded by ZeRO/FSDP",
    ]
    if weights:
        cache = activations.decoder_autocast_cache_bytes(kinds, c)
        out.append(
            f"{s.dtype} weights under {compute_dtype(s)} autocast (ddp rows; DeepSpeed and FSDP2 "
            "compute with 16-bit parameters): the residual stream stays fp32, every linear casts "
            f"its input and keeps a {compute_dtype(s)} copy of its weight, {_gb(cache)} GB over "
            "all layers without checkpointing; with it, autocast caches the copies of trainable "
            "weights until the forward ends"
        )
    if lora is not None:
        out.append(_lora_activation_assumption(s, lora))
    return out


def _attention_assumption(s: Settings) -> str:
    if s.attention == "eager":
        return (
            "eager attention keeps the s x s probabilities per head (fp32 and a 16-bit copy) and "
            "repeats GQA's K/V to every head"
        )
    kernel = (
        "--attention flash is counted as SDPA's fused kernels without a mask (FlashAttention "
        "keeps the same tensors; not measured here)"
        if s.attention == "flash"
        else "SDPA keeps q, k, v, its output and a log-sum-exp per head (no s x s scores)"
    )
    if not sdpa_masked(s):
        return f"{kernel}; one unpadded sequence per micro-batch gets no mask"
    return (
        f"{kernel}; TRL pads a batch to its longest sequence (SFT's collator; DPO's and reward's "
        "chosen+rejected pair; GRPO/RLOO's generation batch), so SDPA gets a mask, which every "
        "layer keeps as a (b, 1, s, s) bias and which repeats GQA's K/V to every head"
    )


def _lora_activation_assumption(s: Settings, lora: activations.Lora) -> str:
    names = ", ".join(sorted(lora.targets)) or "nothing"
    dropout = (
        f"the dropout's output in the adapter's dtype and a 1-byte mask (lora_dropout="
        f"{s.lora_dropout:g}; CUDA's fused dropout keeps a boolean mask)"
        if lora.dropout
        else "its input (no dropout)"
    )
    text = (
        f"{s.tuning}: the frozen base keeps no linear inputs and no normalised values; each "
        f"adapted linear ({names}) keeps {dropout} and lora_A's output; adapters in "
        f"{'fp32' if lora.adapter_bytes == 4 else '16 bits'} on the ddp row (peft upcasts 16-bit "
        "adapters to fp32; TRL keeps them in the base dtype under ZeRO-3 and casts QLoRA's to "
        "bf16)"
    )
    if lora.experts:
        text += (
            "; all-linear adapts the fused expert stacks, which peft merges with their adapters "
            "in every forward, so each MoE layer keeps its merged stacks (checkpointing frees "
            "them)"
        )
        if s.lora_dropout > 0:
            text += (
                f"; peft 0.21.2 refuses lora_dropout={s.lora_dropout:g} on them (tuners/lora/"
                "layer.py:2366): estimated with lora_dropout=0, which the run needs (or name the "
                "attention projections in lora_target_modules)"
            )
    if s.tuning == "qlora":
        text += "; 4-bit linears counted like frozen 16-bit ones (bitsandbytes not measured here)"
    return text


def _units_assumption(s: Settings) -> str:
    gib = s.gpu_memory_gb * GB / GIB
    return (
        f"units: GB = 1e9 bytes everywhere in this report; each GPU has {gib:.2f} GiB = "
        f"{s.gpu_memory_gb:.2f} GB ({s.gpu_memory_source or 'given'}); --gpu-memory-gb takes the "
        "size printed on the card (24, 48, 80), which counts GiB, and a detected size within 1% "
        "below a whole GiB is read as that size, so a typed and a detected card give one answer"
    )


def _host_assumption(s: Settings) -> str:
    if s.cpu_memory_gb is None:
        return "host RAM unknown: offload plans are not checked against it (pass --cpu-memory-gb)"
    return (
        f"host RAM {s.cpu_memory_gb:g} GB per node ({s.cpu_memory_source or '--cpu-memory-gb'}); "
        "offload plans that need more are refused"
    )


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
            "ddp/zero1/zero2, sharded under zero3/fsdp2, offloaded with parameter offload)"
        )
    if s.trainer in ONLINE_TRAINERS and s.tuning == "full":
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
        out.append(
            f"qlora: decoder-layer projections stored as NF4 at {8 * nf4_bytes(s):.3f} bits/param "
            + (
                "(double quantization, --double-quant: 8-bit absmax per 64 weights, fp32 constant "
                "per 256 blocks)"
                if s.double_quant
                else "(fp32 absmax per 64 weights: TRL's use_bnb_nested_quant default is False)"
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


def _vllm_assumptions(shape: ModelShape, s: Settings) -> list:
    need = vllm_need(shape, s)
    if need is None:
        return []
    where = (
        "on every training GPU, next to training"
        if s.vllm_mode == "colocate"
        else f"on {need.tensor_parallel_size * need.data_parallel_size} server GPU(s) of the "
        "same size as the training GPUs, none on the trainer's"
    )
    out = [
        f"vLLM {s.vllm_mode}: runs {where}, within gpu_memory_utilization={need.utilization:g} "
        f"of each GPU ({_gb(need.share)} GB); it must hold its weights per tensor-parallel rank "
        f"(16-bit{', bitsandbytes NF4 Linear weights for a QLoRA policy' if s.tuning == 'qlora' else ''}"
        "; LoRA adapters are merged into them), a KV cache for at least one generation batch and "
        f"one max_model_len sequence ({need.sequences} sequences x {s.seq_len} tokens vs "
        f"max_model_len {need.max_model_len:,}), and {_gb(VLLM_RUNTIME_BYTES)} GB of runtime "
        "(profiling activations, sampler, CUDA graphs; a flat allowance)",
        f"KV cache: {_kv_formula(shape)} bytes per token on each rank (kv_cache_dtype auto, "
        "16-bit; sliding windows and prefix sharing between the num_generations completions of a "
        "prompt are not counted)",
    ]
    if s.vllm_mode == "colocate":
        out.append(
            "colocate: TRL starts one engine per tensor-parallel group (max_num_seqs = "
            "per_device_train_batch_size x vllm_tensor_parallel_size x steps_per_generation); "
            + (
                "sleep mode releases vLLM's share while the model trains: the peak is the larger "
                "of training alone and model states plus vLLM's share"
                if s.vllm_enable_sleep_mode
                else "its share is held all the time, so it adds to every training row"
            )
        )
    return out


def _kv_formula(shape: ModelShape) -> str:
    if shape.kv_latent:
        return f"layers x (kv_lora_rank + qk_rope_head_dim) x 2 = {shape.layers} x {shape.kv_latent} x 2"
    return (
        f"layers x 2 x KV heads per rank x head_dim x 2 = {shape.layers} x 2 x "
        f"{shape.kv_heads}/TP x {shape.head_dim} x 2"
    )


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
        "host_ram_gb": _gb(host_bytes_per_node(estimate, s)),
        "fits": fits(estimate, s),
        "fits_with_margin": fits_with_margin(estimate, s),
        "offload": estimate.offload,
    }


def vllm_part(shape: ModelShape, s: Settings) -> dict | None:
    need = vllm_need(shape, s)
    if need is None:
        return None
    return {
        "mode": need.mode,
        "tensor_parallel_size": need.tensor_parallel_size,
        "data_parallel_size": need.data_parallel_size,
        "gpu_memory_utilization": need.utilization,
        "max_model_len": need.max_model_len,
        "sequences": need.sequences,
        "kv_tokens": need.kv_tokens,
        "weights_gb": _gb(need.weights),
        "kv_cache_gb": _gb(need.kv_cache),
        "runtime_gb": _gb(need.runtime),
        "needed_gb": _gb(need.needed),
        "share_gb": _gb(need.share),
        "sleep_mode": need.sleep_mode,
        "fits": need.fits,
    }


def build_report(shape: ModelShape, s: Settings) -> dict:
    check_settings(shape, s)
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
        "gpu": {
            "memory_gb": round(s.gpu_memory_gb, 2),
            "memory_gib": round(s.gpu_memory_gb * GB / GIB, 2),
            "source": s.gpu_memory_source,
        },
        "host": {"ram_gb": s.cpu_memory_gb, "source": s.cpu_memory_source},
        "usable_gb_per_gpu": _gb(usable_bytes(s)),
        "margin_gb_per_gpu": _gb(MARGIN * usable_bytes(s)),
        "vllm": vllm_part(shape, s),
        "strategies": {name: strategy_row(e, s) for name, e in estimate_all(shape, s).items()},
        "recommendation": recommend(shape, s),
        "assumptions": assumptions(shape, s),
    }
