"""Activation memory of a decoder layer: the bytes autograd saves for backward, per token.

A pure model of the tensors each transformers 5.24.0 decoder layer hands to autograd in training,
read from the modules themselves and checked against the storages saved on CPU
(tests/test_activations_measured.py). Paths below are relative to the installed ``transformers``
package, release 5.24.0; ``moe.py`` and ``sdpa_attention.py`` live in ``transformers/integrations``.

Conventions: ``c`` is the compute dtype's size (2 for bf16/fp16, 4 for fp32); bytes are per token
unless a name says otherwise. A saved view keeps its whole storage, and a storage saved by several
ops counts once (a normalised hidden state feeds q, k and v but is stored once). Attention kernels
are those a GPU picks: SDPA's flash or memory-efficient kernels (and flash-attention packages)
keep q, k, v, the output and a log-sum-exp per head, never the s x s scores; eager attention keeps
the scores. Attention dropout is not modelled: every supported config ships 0.0.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

FP32 = 4
INDEX = 8  # int64 index tensors (topk indices, sort permutations)
BOOL = 1
ATTENTIONS = ("sdpa", "eager")

# Families whose RMSNorm multiplies in fp32 before casting back, ``(x * w).to(dtype)``, so the
# normalised activations are kept in fp32 (models/gemma/modeling_gemma.py:73-78).
GEMMA_NORM_TYPES = ("gemma", "gemma2", "gemma3_text")
# Layers with a second pair of norms around the MLP (models/gemma2/modeling_gemma2.py:320-326).
SANDWICH_NORM_TYPES = ("gemma2", "gemma3_text")
# Attention with an RMSNorm over head_dim on q and k (models/qwen3/modeling_qwen3.py:245-246,
# models/gemma3/modeling_gemma3.py:329-330).
QK_NORM_TYPES = ("qwen3", "qwen3_moe", "gemma3_text")
# Config-class defaults used when config.json leaves a field out (configuration_<family>.py).
HEAD_DIM_DEFAULTS = {"qwen3": 128, "gemma": 256, "gemma2": 256, "gemma3_text": 256}
NORM_TOPK_DEFAULTS = {"qwen2_moe": False, "qwen3_moe": False, "deepseek_v3": True}
SOFTCAP_DEFAULTS = {"gemma2": 50.0}  # Gemma2Config.attn_logit_softcapping
GEMMA3_SLIDING_PATTERN = 6  # models/gemma3/configuration_gemma3.py:105


@dataclass(frozen=True)
class LayerShape:
    """What one decoder layer's saved activations depend on."""

    hidden: int
    heads: int
    head_dim: int  # query/key width per head (MLA: qk_nope_head_dim + qk_rope_head_dim)
    kv_heads: int
    v_head_dim: int
    intermediate: int = 0  # gated MLP width of a dense layer (0 in an MoE layer)
    gemma_norms: bool = False  # RMSNorm output kept in fp32 (GEMMA_NORM_TYPES)
    sandwich_norms: bool = False  # four norms per layer (SANDWICH_NORM_TYPES)
    qk_norm: bool = False
    logit_softcap: bool = False  # eager keeps tanh(scores) too (gemma2)
    sliding_window: int = 0  # 0: full attention
    # multi-head latent attention (deepseek_v3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0  # > 0 means MLA
    qk_rope_head_dim: int = 0
    # mixture of experts
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0  # shared expert(s) in the same layer, all together
    shared_gate: bool = False  # qwen2_moe's sigmoid gate on the shared expert
    router: str = "softmax"  # "softmax" (mixtral, qwen*_moe) or "grouped_sigmoid" (deepseek_v3)
    renormalize_top_k: bool = False
    routing_weights_fp32: bool = False
    expert_groups: int = 1
    topk_groups: int = 1

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


# ----------------------------------------------------------------------------- shapes from config


def _text_config(config: dict) -> dict:
    if "text_config" in config and "hidden_size" not in config:
        return config["text_config"]
    return config


def _positive(config: dict, key: str, default=None) -> int:
    value = config.get(key)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"config.json field {key!r} must be a positive integer, got {value!r}")
    return value


def _attention_fields(c: dict, model_type: str) -> dict:
    h, heads = c["hidden_size"], _positive(c, "num_attention_heads")
    if model_type == "deepseek_v3":  # models/deepseek_v3/modeling_deepseek_v3.py:360-366
        rope = _positive(c, "qk_rope_head_dim", 64)
        return {
            "heads": heads,
            "kv_heads": heads,  # MLA expands the latent to every head (expand_kv, :407-424)
            "head_dim": _positive(c, "qk_nope_head_dim", 128) + rope,
            "v_head_dim": _positive(c, "v_head_dim", 128),
            "q_lora_rank": c.get("q_lora_rank", 1536) or 0,
            "kv_lora_rank": _positive(c, "kv_lora_rank", 512),
            "qk_rope_head_dim": rope,
        }
    head_dim = _positive(c, "head_dim", HEAD_DIM_DEFAULTS.get(model_type, h // heads))
    softcap = c.get("attn_logit_softcapping", SOFTCAP_DEFAULTS.get(model_type))
    return {
        "heads": heads,
        "kv_heads": _positive(c, "num_key_value_heads", heads),
        "head_dim": head_dim,
        "v_head_dim": head_dim,
        "gemma_norms": model_type in GEMMA_NORM_TYPES,
        "sandwich_norms": model_type in SANDWICH_NORM_TYPES,
        "qk_norm": model_type in QK_NORM_TYPES,
        "logit_softcap": softcap is not None,
    }


def _moe_fields(c: dict, model_type: str) -> dict:
    experts = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts")
    fields = {
        "experts": _positive({"experts": experts}, "experts"),
        "top_k": _positive(c, "num_experts_per_tok"),
        "expert_intermediate": _positive(
            c, "moe_intermediate_size" if model_type != "mixtral" else "intermediate_size"
        ),
    }
    if model_type == "mixtral":  # models/mixtral/modeling_mixtral.py:107-110
        return {**fields, "renormalize_top_k": True, "routing_weights_fp32": True}
    renormalize = bool(c.get("norm_topk_prob", NORM_TOPK_DEFAULTS[model_type]))
    if model_type == "deepseek_v3":  # models/deepseek_v3/modeling_deepseek_v3.py:133-158, :211
        shared = fields["expert_intermediate"] * (c.get("n_shared_experts", 1) or 0)
        return {
            **fields,
            "router": "grouped_sigmoid",
            "renormalize_top_k": renormalize,
            "routing_weights_fp32": True,
            "expert_groups": _positive(c, "n_group", 8),
            "topk_groups": _positive(c, "topk_group", 4),
            "shared_intermediate": shared,
        }
    shared = (c.get("shared_expert_intermediate_size") or 0) if model_type == "qwen2_moe" else 0
    # models/qwen2_moe/modeling_qwen2_moe.py:337-347: a shared MLP scaled by sigmoid(linear(x))
    return {
        **fields,
        "renormalize_top_k": renormalize,
        "shared_intermediate": shared,
        "shared_gate": shared > 0,
    }


def _moe_layer_count(c: dict, model_type: str, layers: int) -> int:
    """Decoder layers with a sparse MoE block instead of the dense MLP."""
    if model_type == "mixtral":
        return layers
    if model_type in ("qwen2_moe", "qwen3_moe"):
        # models/qwen2_moe/modeling_qwen2_moe.py:358-361: (i + 1) % decoder_sparse_step == 0,
        # i not in mlp_only_layers, num_experts > 0
        if not c.get("num_experts"):
            return 0
        step = c.get("decoder_sparse_step", 1) or 1
        dense_only = {i for i in c.get("mlp_only_layers") or [] if 0 <= i < layers}
        return layers // step - sum(1 for i in dense_only if (i + 1) % step == 0)
    if model_type == "deepseek_v3":  # modeling_deepseek_v3.py:493: i >= first_k_dense_replace
        return (
            max(0, layers - c.get("first_k_dense_replace", 3)) if c.get("n_routed_experts") else 0
        )
    return 0


def _sliding_layer_count(c: dict, model_type: str, layers: int) -> int:
    """Layers whose attention is restricted to a sliding window (it changes the SDPA mask)."""
    if not c.get("sliding_window"):
        return 0
    if c.get("layer_types"):
        return sum(1 for kind in c["layer_types"][:layers] if kind == "sliding_attention")
    if model_type in ("mistral", "mixtral"):  # every layer (modeling_mistral.py:173, :355)
        return layers
    if model_type == "gemma2":  # even layers (configuration_gemma2.py:94-97)
        return (layers + 1) // 2
    if model_type == "gemma3_text":  # all but every sixth (configuration_gemma3.py:105-111)
        pattern = (
            c.get("sliding_window_pattern")
            or c.get("_sliding_window_pattern")  # Gemma3TextConfig.to_dict() spells it so
            or GEMMA3_SLIDING_PATTERN
        )
        return layers - layers // pattern
    if c.get("use_sliding_window"):  # qwen families: only when switched on; assume all layers
        return layers
    return 0


def layer_kinds(config: dict) -> list:
    """[(LayerShape, number of layers of that shape)] of a config.json dict, in O(kinds) time.

    Dense and MoE layers of one model differ only in the MLP; sliding-window layers only in the
    window. The rules are the modules' own (see _moe_layer_count and _sliding_layer_count).
    """
    c = _text_config(config)
    model_type = c.get("model_type", "llama")
    layers = _positive(c, "num_hidden_layers")
    base = LayerShape(hidden=_positive(c, "hidden_size"), **_attention_fields(c, model_type))
    dense = replace(base, intermediate=_positive(c, "intermediate_size"))
    moe_layers = _moe_layer_count(c, model_type, layers)
    sliding = _sliding_layer_count(c, model_type, layers)
    counts = {replace(base, **_moe_fields(c, model_type)): moe_layers} if moe_layers else {}
    if layers > moe_layers:
        counts[dense] = layers - moe_layers
    if sliding == layers:
        return [(replace(s, sliding_window=c["sliding_window"]), n) for s, n in counts.items()]
    if sliding:
        if len(counts) > 1:
            raise ValueError("sliding-window layers mixed with dense and MoE layers: not modelled")
        ((shape, _),) = counts.items()
        counts = {replace(shape, sliding_window=c["sliding_window"]): sliding}
        counts[shape] = layers - sliding
    return list(counts.items())


def llama_like(
    hidden: int,
    heads: int,
    kv_heads: int | None = None,
    intermediate: int | None = None,
    head_dim: int | None = None,
) -> LayerShape:
    """A Llama layer (SwiGLU MLP, RMSNorm, RoPE) for when only a parameter count is known.

    ``intermediate`` defaults to 8h/3, the width that makes the MLP 8h^2 parameters, as in a
    12h^2-per-layer parameter model; Llama 3's 3.5h keeps about 15% more activations.
    """
    head_dim = head_dim or hidden // heads
    return LayerShape(
        hidden=hidden,
        heads=heads,
        head_dim=head_dim,
        kv_heads=kv_heads or heads,
        v_head_dim=head_dim,
        intermediate=intermediate or 8 * hidden // 3,
    )


# ----------------------------------------------------------------------------- bytes per token


def _rms_norm(width: int, rows: int, c: int, gemma: bool) -> float:
    """What an RMSNorm over ``width`` keeps, ``rows`` normalised rows per token.

    Llama style (models/llama/modeling_llama.py:62-67): the fp32 copy of the input (pow and the
    multiply by rsqrt save it; with fp32 compute ``.to(float32)`` is a no-op and this is the input
    itself), rsqrt (one fp32 per row), and the normalised values cast back to the compute dtype
    (saved by ``weight * x``). Gemma style (models/gemma/modeling_gemma.py:73-78) multiplies the
    weight in fp32, so the normalised values stay fp32. The output is counted by its consumer.
    """
    normalised = FP32 if gemma else c
    return (FP32 + normalised) * width + FP32 * rows


def _norm_then_linear(shape: LayerShape, c: int) -> float:
    """A pre-norm over the hidden size and its output, saved by the projections that read it."""
    return _rms_norm(shape.hidden, 1, c, shape.gemma_norms) + c * shape.hidden


def _kv_expanded(shape: LayerShape, seq_len: int, attention: str, padded: bool) -> bool:
    """Whether K and V reach the kernel repeated to every query head.

    Eager always repeats them (models/llama/modeling_llama.py:190-191). SDPA passes
    ``enable_gqa`` only without a mask and with equal q/v head dims <= 256
    (sdpa_attention.py:42-51), else repeats (:126-127); a mask exists with padding or once the
    sequence reaches the sliding window (masking_utils.py:284-293).
    """
    if shape.kv_heads in (1, shape.heads):
        return False  # one KV head: repeat_kv's expand + reshape stays a view (stride 0)
    if attention == "eager":
        return True
    masked = padded or (shape.sliding_window and seq_len >= shape.sliding_window)
    return bool(masked) or shape.head_dim != shape.v_head_dim or shape.head_dim > 256


def _scores(shape: LayerShape, seq_len: int, c: int, attention: str) -> float:
    """Per-head scores an attention implementation keeps, per token."""
    if attention != "eager":
        return FP32 * shape.heads  # log-sum-exp of the fused kernel
    # models/llama/modeling_llama.py:197: softmax in fp32 (saved), cast back (saved by the next
    # matmul) unless the compute dtype is fp32; gemma2 also keeps tanh(scores) for the softcap
    # (models/gemma2/modeling_gemma2.py:195-198).
    per_score = FP32 + (c if c != FP32 else 0) + (c if shape.logit_softcap else 0)
    return per_score * shape.heads * seq_len


def _attention(shape: LayerShape, seq_len: int, c: int, attention: str, padded: bool) -> float:
    """Standard attention (models/llama/modeling_llama.py:241-271) after its input norm.

    Kept: q and k after RoPE (``q * cos`` saves only cos, so the projections' outputs are not
    kept), v, the attention output (which is also o_proj's input: it comes back (b, s, h, d)
    contiguous, so the ``transpose(1, 2).contiguous()`` of sdpa_attention.py:195 copies nothing),
    and the kernel's scores. Qwen3/Gemma3 add an RMSNorm over head_dim on q and k.
    """
    q_width = shape.heads * shape.head_dim
    kv_heads = shape.heads if _kv_expanded(shape, seq_len, attention, padded) else shape.kv_heads
    kept = c * (q_width + kv_heads * (shape.head_dim + shape.v_head_dim))
    kept += c * shape.heads * shape.v_head_dim  # output
    if shape.qk_norm:
        kept += _rms_norm(q_width, shape.heads, c, shape.gemma_norms)
        kept += _rms_norm(shape.kv_heads * shape.head_dim, shape.kv_heads, c, shape.gemma_norms)
    return kept + _scores(shape, seq_len, c, attention)


def _mla(shape: LayerShape, seq_len: int, c: int, attention: str) -> float:
    """DeepSeek multi-head latent attention (models/deepseek_v3/modeling_deepseek_v3.py:435-483).

    Kept: q_a and kv_a latents through their RMSNorms and the projections reading them; the query
    built by ``torch.cat`` (:462); the key, a new tensor filled by copies (:421-423); kv_b_proj's
    whole output, alive through the value view that the kernel keeps (:416-417); the output.
    Under SDPA the output is kept twice: fused kernels lay it out like the query, which the
    ``cat`` made (b, h, s, d)-contiguous, so the ``transpose(1, 2).contiguous()`` of
    sdpa_attention.py:195 copies it for o_proj (measured on CPU; a CUDA kernel that writes
    (b, s, h, d) regardless, as the memory-efficient one may, would save that copy: 6% of a
    DeepSeek-V3 layer, counted here to stay on the safe side). Eager copies it once either way.
    """
    nope = shape.head_dim - shape.qk_rope_head_dim
    kept = 0.0
    if shape.q_lora_rank:
        kept += _rms_norm(shape.q_lora_rank, 1, c, False) + c * shape.q_lora_rank
    kept += _rms_norm(shape.kv_lora_rank, 1, c, False) + c * shape.kv_lora_rank
    kept += c * shape.heads * (2 * shape.head_dim + nope + shape.v_head_dim)  # q, k, kv_b output
    outputs = 1 if attention == "eager" else 2
    kept += outputs * c * shape.heads * shape.v_head_dim
    return kept + _scores(shape, seq_len, c, attention)


def _gated_mlp(width: int, c: int) -> float:
    """gate_proj output (the activation's input), act(gate), up_proj output and their product
    (down_proj's input): models/llama/modeling_llama.py:164. SiLU and tanh-GELU save only their
    input. The MLP's input is the norm output, counted with the norm."""
    return 4 * c * width


def _router(shape: LayerShape, c: int) -> float:
    """Routing: fp32 probabilities over the experts, top-k indices, and the top-k values with their
    sum when they are renormalised in place (models/qwen3_moe/modeling_qwen3_moe.py:261-266,
    models/mixtral/modeling_mixtral.py:106-109). The router logits themselves are not saved:
    softmax keeps its fp32 output instead."""
    kept = FP32 * shape.experts + INDEX * shape.top_k
    if shape.renormalize_top_k:
        kept += FP32 * shape.top_k + FP32
    if shape.router == "grouped_sigmoid":
        # models/deepseek_v3/modeling_deepseek_v3.py:135-153: an fp32 copy of the input (unless
        # it is fp32 already), the group mask, the top-2-per-group and chosen-group indices.
        kept += (FP32 * shape.hidden if c != FP32 else 0) + BOOL * shape.experts
        kept += INDEX * (2 * shape.expert_groups + shape.topk_groups)
    return kept


def _experts(shape: LayerShape, c: int) -> float:
    """Routed experts through grouped_mm, the default implementation (moe.py:424-537).

    Each token appears top_k times: its gathered hidden state (:441, saved by the up grouped_mm),
    the gate_up output (2 x expert width), act(gate) and the gated product, the down output
    (saved with the routing weight by the weighting multiply, :524), the routing weight, and three
    int64 permutations (:440-442, :528-529).
    """
    weight = FP32 if shape.routing_weights_fp32 else c
    per_route = 2 * c * shape.hidden + _gated_mlp(shape.expert_intermediate, c) + weight
    return shape.top_k * (per_route + 3 * INDEX)


def _shared_experts(shape: LayerShape, c: int) -> float:
    if not shape.shared_intermediate:
        return 0.0
    kept = _gated_mlp(shape.shared_intermediate, c)
    if shape.shared_gate:  # sigmoid output and the shared expert's output, saved by their product
        kept += c + c * shape.hidden
    return kept


def saved_bytes_per_token(
    shape: LayerShape,
    seq_len: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
) -> dict:
    """Bytes one decoder layer saves for backward per token, by part of the layer.

    ``padded``: the batch has padding, so SDPA receives a mask (GQA K/V are then repeated).
    Only eager attention depends on ``seq_len`` (its s x s scores).
    """
    if attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    c = compute_bytes
    if shape.is_mla:
        attention_bytes = _mla(shape, seq_len, c, attention)
    else:
        attention_bytes = _attention(shape, seq_len, c, attention, padded)
    parts = {
        "input_norm": _norm_then_linear(shape, c),
        "attention": attention_bytes,
        "mlp_norm": _norm_then_linear(shape, c),
    }
    if shape.sandwich_norms:  # post-attention and post-feedforward norms feed residual adds
        parts["sandwich_norms"] = 2 * _rms_norm(shape.hidden, 1, c, shape.gemma_norms)
    if shape.is_moe:
        parts["router"] = _router(shape, c)
        parts["experts"] = _experts(shape, c)
        parts["shared_experts"] = _shared_experts(shape, c)
    else:
        parts["mlp"] = _gated_mlp(shape.intermediate, c)
    return parts


def saved_bytes_per_layer(
    shape: LayerShape,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
) -> float:
    """Bytes one decoder layer keeps for backward without checkpointing."""
    per_token = saved_bytes_per_token(shape, seq_len, compute_bytes, attention, padded)
    return sum(per_token.values()) * seq_len * micro_batch


def checkpointed_bytes_per_layer(
    shape: LayerShape, seq_len: int, micro_batch: int, compute_bytes: int
) -> float:
    """Bytes one checkpointed layer keeps until its backward: its input hidden states.

    transformers checkpoints each layer's forward with the hidden states as the only positional
    argument (modeling_layers.py:123); non-reentrant torch.utils.checkpoint (what TRL 1.16.0 gets:
    modeling_utils.py:3158) saves the tensor arguments (torch/utils/checkpoint.py:842-847). The
    rotary tables, mask and position ids passed by keyword are shared by all layers.
    """
    return compute_bytes * shape.hidden * seq_len * micro_batch


def _backward_peak_per_token(
    shape: LayerShape, seq_len: int, c: int, attention: str, padded: bool
) -> float:
    """Saved tensors plus activation gradients at the worst moment of a layer's backward.

    MLP first: the gradients of the gated product, of act(gate) and of up_proj's output are alive
    together while the product itself is already freed (2 x the MLP width); in an MoE layer three
    top_k x hidden gradients are (the scatter back through ``weighted_out[inv_perm]``, moe.py:529,
    the weighted product's and proj_out's; fp32 where the routing weights are). Both come with the
    residual gradient and the one accumulating for the block's input. Eager attention later holds
    its saved scores and their gradients (the probabilities' and fp32 scores') with the MLP's
    saved tensors already freed, which overtakes the MLP wave at long sequences. Fitted to peaks
    measured on CPU within 4% (tests/test_activations_measured.py); GPU kernels' workspaces are
    not included.
    """
    parts = saved_bytes_per_token(shape, seq_len, c, attention, padded)
    if shape.is_moe:
        combine = FP32 if shape.routing_weights_fp32 else c
        wave = 3 * combine * shape.top_k * shape.hidden
    else:
        wave = 2 * c * shape.intermediate
    mlp_phase = sum(parts.values()) + wave + 2 * c * shape.hidden
    if attention != "eager":
        return mlp_phase
    scores_gradients = (c + FP32) * shape.heads * seq_len
    attention_phase = parts["input_norm"] + parts["attention"] + scores_gradients + c * shape.hidden
    return max(mlp_phase, attention_phase)


def backward_transient_bytes(
    shape: LayerShape,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
) -> float:
    """Activation gradients alive on top of a layer's saved tensors during its backward (with or
    without checkpointing; without it, on top of every layer's saved bytes for the first layer
    backpropagated, unless the loss head's own transient is larger)."""
    peak = _backward_peak_per_token(shape, seq_len, compute_bytes, attention, padded)
    saved = saved_bytes_per_token(shape, seq_len, compute_bytes, attention, padded)
    return (peak - sum(saved.values())) * seq_len * micro_batch


def recompute_bytes(
    shape: LayerShape,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
) -> float:
    """Working set of a checkpointed layer during its backward: everything the layer saves,
    rebuilt at once, plus the activation gradients (backward_transient_bytes)."""
    peak = _backward_peak_per_token(shape, seq_len, compute_bytes, attention, padded)
    return peak * seq_len * micro_batch


def decoder_kept_bytes(
    kinds: list,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    checkpointing: bool = False,
    padded: bool = False,
) -> float:
    """What all decoder layers hold when backward starts: every layer's saved bytes, or with
    checkpointing every layer's input. ``kinds`` is layer_kinds(config)."""
    args = (seq_len, micro_batch, compute_bytes)
    if checkpointing:
        return sum(n * checkpointed_bytes_per_layer(s, *args) for s, n in kinds)
    return sum(n * saved_bytes_per_layer(s, *args, attention, padded) for s, n in kinds)


def decoder_transient_bytes(
    kinds: list,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    checkpointing: bool = False,
    padded: bool = False,
) -> float:
    """The most any one layer adds on top of decoder_kept_bytes during its backward: the
    activation gradients, and with checkpointing also the layer's rebuilt saved tensors.

    The loss head's backward runs before any layer's, so the two transients do not add up: the
    activation peak of a step is ``decoder_kept_bytes + max(loss head transient, this)``.
    """
    per_layer = recompute_bytes if checkpointing else backward_transient_bytes
    args = (seq_len, micro_batch, compute_bytes, attention, padded)
    return max(per_layer(s, *args) for s, _ in kinds)
