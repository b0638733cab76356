"""Activation memory of a decoder layer: the bytes autograd saves for backward, per token.

A pure model of the tensors each transformers 5.24.0 decoder layer hands to autograd in training,
read from the modules themselves and checked against the storages saved on CPU
(tests/test_activations_measured.py). Paths below are relative to the installed ``transformers``
package, release 5.24.0; ``moe.py`` and ``sdpa_attention.py`` live in ``transformers/integrations``.

Conventions: ``c`` is the compute dtype's size (2 for bf16/fp16, 4 for fp32); ``w`` (keyword
``weights_bytes``) is the weights' size when it is larger, fp32 weights under 16-bit autocast, where
the residual stream keeps the weights' dtype and each linear casts its weight and input (see
_pre_norm and autocast_weight_bytes); bytes are per token unless a name says otherwise. A saved view keeps its whole storage, and a storage saved by several
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
# Config-class defaults used when config.json leaves a field out (configuration_<family>.py):
# Qwen3Config.head_dim = 128 and Gemma*Config.head_dim = 256 whatever the hidden size; the other
# families compute hidden_size // num_attention_heads. The one table for the whole package
# (model_shape reads head_dim() too); tests/test_activations_shapes.py checks it against the
# attention modules transformers builds.
HEAD_DIM_DEFAULTS = {"qwen3": 128, "gemma": 256, "gemma2": 256, "gemma3_text": 256}
# The num_key_value_heads a config.json without the field gets from its config class
# (transformers 5.24.0 configuration_<family>.py); other families fall back to the head count.
KV_HEADS_DEFAULTS = {
    "mistral": 8, "mixtral": 8, "qwen2": 32, "qwen3": 32, "qwen2_moe": 16, "qwen3_moe": 4,
    "gemma": 16, "gemma2": 4, "gemma3_text": 4,
}  # fmt: skip
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


def head_dim(config: dict) -> int:
    """Query/key width per head of a standard-attention config.json (text part): ``head_dim``,
    else the family's config-class default (HEAD_DIM_DEFAULTS), else hidden ÷ heads."""
    c = _text_config(config)
    hidden, heads = _positive(c, "hidden_size"), _positive(c, "num_attention_heads")
    default = HEAD_DIM_DEFAULTS.get(c.get("model_type", "llama"), hidden // heads)
    return _positive(c, "head_dim", default)


def kv_heads(config: dict) -> int:
    """Key/value heads of a standard-attention config.json (text part): ``num_key_value_heads``,
    else the family's config-class default (KV_HEADS_DEFAULTS), else the head count."""
    c = _text_config(config)
    heads = _positive(c, "num_attention_heads")
    return _positive(c, "num_key_value_heads", KV_HEADS_DEFAULTS.get(c.get("model_type"), heads))


def _attention_fields(c: dict, model_type: str) -> dict:
    heads = _positive(c, "num_attention_heads")
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
    width = head_dim(c)
    softcap = c.get("attn_logit_softcapping", SOFTCAP_DEFAULTS.get(model_type))
    return {
        "heads": heads,
        "kv_heads": kv_heads(c),
        "head_dim": width,
        "v_head_dim": width,
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


def is_moe_layer(config: dict, index: int) -> bool:
    """Whether decoder layer `index` has a sparse MoE block instead of the dense MLP (the
    modules' own rule; _moe_layer_count counts the same layers without a loop)."""
    c = _text_config(config)
    model_type = c.get("model_type")
    if model_type == "mixtral":
        return True
    if model_type in ("qwen2_moe", "qwen3_moe"):
        # models/qwen2_moe/modeling_qwen2_moe.py:358-361: (i + 1) % decoder_sparse_step == 0,
        # i not in mlp_only_layers, num_experts > 0
        step = c.get("decoder_sparse_step", 1) or 1
        dense_only = c.get("mlp_only_layers") or []
        return bool(c.get("num_experts")) and (index + 1) % step == 0 and index not in dense_only
    if model_type == "deepseek_v3":  # modeling_deepseek_v3.py:493: i >= first_k_dense_replace
        return bool(c.get("n_routed_experts")) and index >= _first_dense(c)
    return False


def _first_dense(c: dict) -> int:
    # configuration_deepseek_v3.py:100 defaults first_k_dense_replace to 3; moe_layer_freq,
    # which some checkpoints carry, is read by no 5.24 module.
    value = c.get("first_k_dense_replace")
    return 3 if value is None else value


def _moe_layer_count(c: dict, model_type: str, layers: int) -> int:
    """How many of the first `layers` layers is_moe_layer marks, in O(1) for any depth."""
    if model_type == "mixtral":
        return layers
    if model_type in ("qwen2_moe", "qwen3_moe"):
        if not c.get("num_experts"):
            return 0
        step = c.get("decoder_sparse_step", 1) or 1
        dense_only = {i for i in c.get("mlp_only_layers") or [] if 0 <= i < layers}
        return layers // step - sum(1 for i in dense_only if (i + 1) % step == 0)
    if model_type == "deepseek_v3":
        return max(0, layers - _first_dense(c)) if c.get("n_routed_experts") else 0
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


# ----------------------------------------------------------------------------- LoRA


@dataclass(frozen=True)
class Lora:
    """LoRA adapters on a frozen base, as peft 0.21.2 runs them (tuners/lora/layer.py:1088-1113):
    ``base(x) + lora_B(lora_A(dropout(x.to(adapter dtype)))) * scaling``.

    A frozen linear saves no input (its weight gradient is not needed), nor does the weight
    multiply of a frozen norm, so the base layer keeps less, and each adapter keeps its own input
    (the dropout's output and mask, or without dropout the input itself) and lora_A's output.
    """

    targets: frozenset = frozenset()  # linear module names adapted in every layer (q_proj, ...)
    rank: int = 16
    # peft upcasts 16-bit adapters to fp32 (get_peft_model's autocast_adapter_dtype=True); TRL
    # keeps them in the base dtype under ZeRO-3 and casts QLoRA's to bf16.
    adapter_bytes: int = FP32
    dropout: bool = True  # lora_dropout > 0: TRL's ModelConfig.lora_dropout is 0.05
    # CUDA's fused dropout (native_dropout) keeps a boolean mask; on CPU dropout multiplies by a
    # mask in the input's dtype (None: the adapter's), which the CPU tests measure.
    mask_bytes: int | None = BOOL
    # peft's target_parameters on the fused expert stacks and the router (all-linear on the MoE
    # layouts peft remaps, model_shape.PEFT_MOE_REMAPPED_TYPES): each stack is merged with its
    # adapter (W + BA, tuners/lora/layer.py:2324) and the merged copy is saved by grouped_mm.
    experts: bool = False


@dataclass(frozen=True)
class _Step:
    """What the byte counts of one layer depend on besides its shape."""

    seq_len: int
    c: int  # compute dtype
    w: int  # residual stream and weights (> c under autocast)
    attention: str
    padded: bool
    lora: Lora | None = None

    @property
    def autocast(self) -> bool:
        return self.w > self.c

    @property
    def frozen(self) -> bool:
        return self.lora is not None


def _step(seq_len, compute_bytes, attention, padded, weights_bytes, lora) -> _Step:
    if attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    w = max(compute_bytes, weights_bytes or compute_bytes)
    return _Step(seq_len, compute_bytes, w, attention, padded, lora)


# ----------------------------------------------------------------------------- bytes per token


def _rms_norm(width: int, rows: int, c: int, gemma: bool, frozen: bool = False) -> float:
    """What an RMSNorm over ``width`` keeps, ``rows`` normalised rows per token.

    Llama style (models/llama/modeling_llama.py:62-67): the fp32 copy of the input (pow and the
    multiply by rsqrt save it; with fp32 compute ``.to(float32)`` is a no-op and this is the input
    itself), rsqrt (one fp32 per row), and the normalised values cast back to the compute dtype
    (saved by ``weight * x`` for the weight's gradient, so not when the weight is frozen). Gemma
    style (models/gemma/modeling_gemma.py:73-78) multiplies the weight in fp32, so the normalised
    values stay fp32. The output is counted by its consumer.
    """
    if frozen:
        return FP32 * width + FP32 * rows
    normalised = FP32 if gemma else c
    return (FP32 + normalised) * width + FP32 * rows


def _pre_norm(shape: LayerShape, st: _Step, readers: int) -> float:
    """A pre-norm over the hidden size and its output, saved by the ``readers`` linears reading it
    (for their weights' gradients: nothing when they are frozen).

    Under autocast the residual stream is in the weights' dtype, so the norm's input is the fp32
    tensor itself and its normalised values stay fp32 (the cast back to the input dtype is a
    no-op), and every linear that reads the output casts its own copy to the compute dtype
    (autocast caches casts of leaf parameters only, not of activations).
    """
    h, c = shape.hidden, st.c
    if st.frozen:
        return _rms_norm(h, 1, c, shape.gemma_norms, frozen=True)
    if st.autocast:
        return _rms_norm(h, 1, c, gemma=True) + readers * c * h
    return _rms_norm(h, 1, c, shape.gemma_norms) + (c * h if readers else 0)


def _attention_readers(shape: LayerShape) -> int:
    """Linears reading the attention's input norm: q, k, v, or MLA's two down-projections."""
    return 2 if shape.is_mla else 3


def _mlp_readers(shape: LayerShape) -> int:
    """Linears reading the MLP's input norm: gate and up, or the router, the shared expert's gate
    and up and qwen2_moe's shared-expert gate. Routed experts cast it to the experts' dtype
    (integrations/moe.py:379), a no-op for fp32 weights."""
    if not shape.is_moe:
        return 2
    return 1 + (2 if shape.shared_intermediate else 0) + (1 if shape.shared_gate else 0)


def _kv_expanded(shape: LayerShape, st: _Step) -> bool:
    """Whether K and V reach the kernel repeated to every query head.

    Eager always repeats them (models/llama/modeling_llama.py:190-191). SDPA passes
    ``enable_gqa`` only without a mask and with equal q/v head dims <= 256
    (sdpa_attention.py:42-51), else repeats (:126-127); a mask exists with padding or once the
    sequence reaches the sliding window (masking_utils.py:284-293).
    """
    if shape.kv_heads in (1, shape.heads):
        return False  # one KV head: repeat_kv's expand + reshape stays a view (stride 0)
    if st.attention == "eager":
        return True
    return _sdpa_masked(shape, st) or shape.head_dim != shape.v_head_dim or shape.head_dim > 256


def _sdpa_masked(shape: LayerShape, st: _Step) -> bool:
    window = shape.sliding_window and st.seq_len >= shape.sliding_window
    return bool(st.padded or window)


def _scores(shape: LayerShape, st: _Step) -> float:
    """Per-head scores an attention implementation keeps, per token.

    SDPA keeps a log-sum-exp per head, and with a mask the mask as an additive float bias in the
    query's dtype, (b, 1, s, s): torch converts the boolean mask transformers passes in every
    layer's call, and the kernel saves the bias for backward (measured on CPU).
    """
    c = st.c
    if st.attention != "eager":
        mask = c * st.seq_len if _sdpa_masked(shape, st) else 0
        return FP32 * shape.heads + mask
    # models/llama/modeling_llama.py:197: softmax in fp32 (saved), cast back (saved by the next
    # matmul) unless the compute dtype is fp32; gemma2 also keeps tanh(scores) for the softcap
    # (models/gemma2/modeling_gemma2.py:195-198).
    per_score = FP32 + (c if c != FP32 else 0) + (c if shape.logit_softcap else 0)
    return per_score * shape.heads * st.seq_len


def _attention(shape: LayerShape, st: _Step) -> float:
    """Standard attention (models/llama/modeling_llama.py:241-271) after its input norm.

    Kept: q and k after RoPE (``q * cos`` saves only cos, so the projections' outputs are not
    kept), v, the attention output, and the kernel's scores. SDPA's fused kernels keep their
    output, which is also o_proj's input (it comes back (b, s, h, d) contiguous, so the
    ``transpose(1, 2).contiguous()`` of sdpa_attention.py:195 copies nothing); eager's output is
    kept by o_proj only, for its weight's gradient. Qwen3/Gemma3 add an RMSNorm over head_dim
    on q and k.
    """
    c = st.c
    q_width = shape.heads * shape.head_dim
    kv_heads = shape.heads if _kv_expanded(shape, st) else shape.kv_heads
    kept = c * (q_width + kv_heads * (shape.head_dim + shape.v_head_dim))
    if st.attention != "eager" or not st.frozen:
        kept += c * shape.heads * shape.v_head_dim  # output
    if shape.qk_norm:
        gemma, frozen = shape.gemma_norms, st.frozen
        kept += _rms_norm(q_width, shape.heads, c, gemma, frozen)
        kept += _rms_norm(shape.kv_heads * shape.head_dim, shape.kv_heads, c, gemma, frozen)
    return kept + _scores(shape, st)


def _mla(shape: LayerShape, st: _Step) -> float:
    """DeepSeek multi-head latent attention (models/deepseek_v3/modeling_deepseek_v3.py:435-483).

    Kept: q_a and kv_a latents through their RMSNorms and the projections reading them; the query
    built by ``torch.cat`` (:462); the key, a new tensor filled by copies (:421-423); kv_b_proj's
    whole output, alive through the value view that the kernel keeps (:416-417); the output.
    Under SDPA the output is kept twice: fused kernels lay it out like the query, which the
    ``cat`` made (b, h, s, d)-contiguous, so the ``transpose(1, 2).contiguous()`` of
    sdpa_attention.py:195 copies it for o_proj (measured on CPU; a CUDA kernel that writes
    (b, s, h, d) regardless, as the memory-efficient one may, would save that copy: 6% of a
    DeepSeek-V3 layer, counted here to stay on the safe side). Eager copies it once either way.
    A frozen o_proj keeps no copy.
    """
    c, frozen = st.c, st.frozen
    nope = shape.head_dim - shape.qk_rope_head_dim
    latent_output = 0 if frozen else c
    kept = 0.0
    if shape.q_lora_rank:
        kept += _rms_norm(shape.q_lora_rank, 1, c, False, frozen)
        kept += latent_output * shape.q_lora_rank
    kept += _rms_norm(shape.kv_lora_rank, 1, c, False, frozen) + latent_output * shape.kv_lora_rank
    kept += c * shape.heads * (2 * shape.head_dim + nope + shape.v_head_dim)  # q, k, kv_b output
    outputs = (1 if st.attention == "eager" else 2) - (1 if frozen else 0)
    kept += outputs * c * shape.heads * shape.v_head_dim
    return kept + _scores(shape, st)


def _gated_mlp(width: int, c: int, frozen: bool = False) -> float:
    """gate_proj output (the activation's input), act(gate), up_proj output and their product
    (down_proj's input, for its weight's gradient): models/llama/modeling_llama.py:164. SiLU and
    tanh-GELU save only their input. The MLP's input is the norm output, counted with the norm."""
    return (3 if frozen else 4) * c * width


def _router(shape: LayerShape, st: _Step) -> float:
    """Routing: fp32 probabilities over the experts, top-k indices, and the top-k values with their
    sum when they are renormalised in place (models/qwen3_moe/modeling_qwen3_moe.py:261-266,
    models/mixtral/modeling_mixtral.py:106-109). The router logits themselves are not saved:
    softmax keeps its fp32 output instead. An adapted router (peft's target_parameters) keeps
    its input for its weight's gradient, which a frozen base does not count with the norm."""
    c = st.c
    kept = FP32 * shape.experts + INDEX * shape.top_k
    if shape.renormalize_top_k:
        kept += FP32 * shape.top_k + FP32
    if shape.router == "grouped_sigmoid":
        # models/deepseek_v3/modeling_deepseek_v3.py:135-153: an fp32 copy of the input (unless
        # it is fp32 already; saved by the router's linear, for its weight), the group mask, the
        # top-2-per-group and chosen-group indices.
        trained = not st.frozen or st.lora.experts
        kept += (FP32 * shape.hidden if c != FP32 and trained else 0) + BOOL * shape.experts
        kept += INDEX * (2 * shape.expert_groups + shape.topk_groups)
    if st.frozen and st.lora.experts:
        kept += c * shape.hidden
    return kept


def _experts(shape: LayerShape, st: _Step) -> float:
    """Routed experts through grouped_mm, the default implementation (moe.py:424-537).

    Each token appears top_k times: its gathered hidden state (:441, saved by the up grouped_mm
    for the weights' gradient), the gate_up output (2 x expert width), act(gate) and the gated
    product (the down grouped_mm's input, also for the weights' gradient), the down output (saved
    with the routing weight by the weighting multiply, :524), the routing weight, and three int64
    permutations (:440-442, :528-529). grouped_mm is not autocast (moe.py:374-379 casts its
    input to the weights' dtype), so under autocast the experts compute in the weights' dtype.
    """
    w = st.w
    trained = not st.frozen or st.lora.experts
    weight = FP32 if shape.routing_weights_fp32 else st.c
    gathered = w * shape.hidden if trained else 0
    per_route = gathered + w * shape.hidden + _gated_mlp(shape.expert_intermediate, w, not trained)
    return shape.top_k * (per_route + weight + 3 * INDEX)


def _shared_experts(shape: LayerShape, st: _Step) -> float:
    if not shape.shared_intermediate:
        return 0.0
    c = st.c
    kept = _gated_mlp(shape.shared_intermediate, c, st.frozen)
    if shape.shared_gate:  # sigmoid output and the shared expert's output, saved by their product
        kept += c + c * shape.hidden
    return kept


def _adapted_linears(shape: LayerShape, lora: Lora) -> list:
    """(input, in width, out width) of each adapted linear of the layer; linears reading one
    tensor share the input's name. gate/up/down_proj name the dense MLP, or in an MoE layer the
    shared expert."""
    h = shape.hidden
    q_width = shape.heads * shape.head_dim
    if shape.is_mla:
        nope = shape.head_dim - shape.qk_rope_head_dim
        kv_a = shape.kv_lora_rank + shape.qk_rope_head_dim
        if shape.q_lora_rank:
            linears = [("q_a_proj", "attn_in", h, shape.q_lora_rank)]
            linears.append(("q_b_proj", "q_latent", shape.q_lora_rank, q_width))
        else:
            linears = [("q_proj", "attn_in", h, q_width)]
        linears.append(("kv_a_proj_with_mqa", "attn_in", h, kv_a))
        kv_b = shape.heads * (nope + shape.v_head_dim)
        linears.append(("kv_b_proj", "kv_latent", shape.kv_lora_rank, kv_b))
    else:
        kv_width = shape.kv_heads * shape.head_dim
        linears = [("q_proj", "attn_in", h, q_width)]
        linears += [(name, "attn_in", h, kv_width) for name in ("k_proj", "v_proj")]
    linears.append(("o_proj", "attn_out", shape.heads * shape.v_head_dim, h))
    mlp_width = shape.shared_intermediate if shape.is_moe else shape.intermediate
    if mlp_width:
        linears += [("gate_proj", "mlp_in", h, mlp_width), ("up_proj", "mlp_in", h, mlp_width)]
        linears.append(("down_proj", "mlp_mid", mlp_width, h))
    if shape.shared_gate:
        linears.append(("shared_expert_gate", "mlp_in", h, 1))
    return [linear[1:] for linear in linears if linear[0] in lora.targets]


def expert_lora_dims(shape: LayerShape) -> dict:
    """LoRA parameters per unit of rank that peft 0.21.2 adds to one MoE layer's router and fused
    expert stacks through target_parameters: rank r on the router, 2rE on gate_up_proj, rE on
    down_proj (model_shape counts the trainable parameters with it too)."""
    h, experts, width = shape.hidden, shape.experts, shape.expert_intermediate
    return {
        "router": h + experts,
        "experts": 2 * experts * (h + 2 * width) + experts * (width + h),
    }


def expert_adapter_params(shape: LayerShape, rank: int) -> int:
    if not shape.is_moe:
        return 0
    return rank * sum(expert_lora_dims(shape).values())


def _adapters(shape: LayerShape, st: _Step) -> float:
    """What the adapters keep: lora_A's output (saved by lora_B) and lora_A's input. With dropout
    that input is the dropout's output, with its mask. Without, it is the adapter's cast of the
    linear's input, or under autocast lora_A's own cast to the compute dtype; when no cast
    happens it is the input itself, one tensor for every adapter reading it, already kept when
    it is SDPA's output."""
    lora = st.lora
    if lora is None:
        return 0.0
    dtype = st.c if st.autocast else lora.adapter_bytes
    kept = 0.0
    inputs = {}
    for group, width, _ in _adapted_linears(shape, lora):
        kept += dtype * lora.rank
        arrives = st.w if st.autocast and group in ("attn_in", "mlp_in") else st.c
        if lora.dropout:
            mask = lora.adapter_bytes if lora.mask_bytes is None else lora.mask_bytes
            kept += (mask + dtype) * width
        elif arrives == lora.adapter_bytes == dtype:
            inputs[group] = width
        else:
            kept += dtype * width
    for group, width in inputs.items():
        if not (group == "attn_out" and st.attention != "eager"):
            kept += st.c * width
    return kept


def saved_bytes_per_token(
    shape: LayerShape,
    seq_len: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
    *,
    weights_bytes: int | None = None,
    lora: Lora | None = None,
) -> dict:
    """Bytes one decoder layer saves for backward per token, by part of the layer.

    ``padded``: the batch has padding, so SDPA receives a mask (GQA K/V are then repeated).
    Only eager attention and a masked SDPA depend on ``seq_len`` (the s x s scores or mask).
    ``weights_bytes`` larger than ``compute_bytes``: fp32 weights under 16-bit autocast (the
    weight copies are per layer, not per token: layer_constant_bytes). ``lora``: a frozen base
    with adapters.
    """
    st = _step(seq_len, compute_bytes, attention, padded, weights_bytes, lora)
    parts = {
        "input_norm": _pre_norm(shape, st, _attention_readers(shape)),
        "attention": _mla(shape, st) if shape.is_mla else _attention(shape, st),
        "mlp_norm": _pre_norm(shape, st, _mlp_readers(shape)),
    }
    if shape.sandwich_norms:  # post-attention and post-feedforward norms feed residual adds
        parts["sandwich_norms"] = 2 * _rms_norm(shape.hidden, 1, st.c, shape.gemma_norms, st.frozen)
    if shape.is_moe:
        parts["router"] = _router(shape, st)
        parts["experts"] = _experts(shape, st)
        parts["shared_experts"] = _shared_experts(shape, st)
    else:
        parts["mlp"] = _gated_mlp(shape.intermediate, st.c, st.frozen)
    if lora is not None:
        parts["adapters"] = _adapters(shape, st)
    return parts


def linear_weight_params(shape: LayerShape) -> int:
    """Weights of the layer's nn.Linear modules: what autocast casts (routed experts are fused 3D
    tensors run through grouped_mm, which autocast leaves alone)."""
    h = shape.hidden
    if shape.is_mla:
        q_width = shape.heads * shape.head_dim
        q = (
            h * shape.q_lora_rank + shape.q_lora_rank * q_width
            if shape.q_lora_rank
            else h * q_width
        )
        nope = shape.head_dim - shape.qk_rope_head_dim
        kv = h * (shape.kv_lora_rank + shape.qk_rope_head_dim)
        kv += shape.kv_lora_rank * shape.heads * (nope + shape.v_head_dim)
        attention = q + kv
    else:
        attention = h * shape.head_dim * (shape.heads + 2 * shape.kv_heads)
    attention += shape.heads * shape.v_head_dim * h  # o_proj
    if not shape.is_moe:
        return attention + 3 * h * shape.intermediate
    gate = h if shape.shared_gate else 0
    return attention + h * shape.experts + 3 * h * shape.shared_intermediate + gate


def expert_stack_params(shape: LayerShape) -> int:
    """The fused routed-expert weights of an MoE layer (gate_up and down stacks)."""
    return 3 * shape.experts * shape.hidden * shape.expert_intermediate if shape.is_moe else 0


def autocast_weight_bytes(shape: LayerShape, compute_bytes: int) -> float:
    """Compute-dtype copies of one layer's linear weights made by autocast over fp32 weights.

    Every autocast linear casts its weight and saves the copy for backward (the input gradient
    needs it), trainable or frozen; a checkpointed layer rebuilds them when it is recomputed.
    """
    return compute_bytes * linear_weight_params(shape)


def layer_constant_bytes(
    shape: LayerShape,
    compute_bytes: int,
    *,
    weights_bytes: int | None = None,
    lora: Lora | None = None,
) -> float:
    """What a layer keeps for backward whatever the number of tokens: autocast's weight copies
    (the adapters' too), and when peft adapts the expert stacks, each merged stack and the
    adapter factors cast to the stacks' dtype (saved by baddbmm, tuners/lora/layer.py:2324)."""
    c = compute_bytes
    w = max(c, weights_bytes or c)
    kept = 0.0
    if w > c:
        kept += autocast_weight_bytes(shape, c)
        if lora is not None:
            adapted = _adapted_linears(shape, lora)
            kept += c * lora.rank * sum(fan_in + fan_out for _, fan_in, fan_out in adapted)
    if lora is not None and lora.experts:
        kept += w * (expert_stack_params(shape) + expert_adapter_params(shape, lora.rank))
    return kept


def decoder_autocast_cache_bytes(kinds: list, compute_bytes: int) -> float:
    """Copies autocast keeps in its cache until the forward ends: every layer's trainable linear
    weights (it caches casts of leaf tensors that require grad), whether or not checkpointing
    frees the layers' saved tensors. Only with fp32 trainable weights under autocast."""
    return sum(n * autocast_weight_bytes(shape, compute_bytes) for shape, n in kinds)


def saved_bytes_per_layer(
    shape: LayerShape,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
    *,
    weights_bytes: int | None = None,
    lora: Lora | None = None,
) -> float:
    """Bytes one decoder layer keeps for backward without checkpointing."""
    kw = {"weights_bytes": weights_bytes, "lora": lora}
    per_token = saved_bytes_per_token(shape, seq_len, compute_bytes, attention, padded, **kw)
    tokens = seq_len * micro_batch
    return sum(per_token.values()) * tokens + layer_constant_bytes(shape, compute_bytes, **kw)


def checkpointed_bytes_per_layer(
    shape: LayerShape,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    *,
    weights_bytes: int | None = None,
) -> float:
    """Bytes one checkpointed layer keeps until its backward: its input hidden states.

    transformers checkpoints each layer's forward with the hidden states as the only positional
    argument (modeling_layers.py:123); non-reentrant torch.utils.checkpoint (what TRL 1.16.0 gets:
    modeling_utils.py:3158) saves the tensor arguments (torch/utils/checkpoint.py:842-847). The
    rotary tables, mask and position ids passed by keyword are shared by all layers. Under
    autocast the hidden states are in the weights' dtype.
    """
    residual = max(compute_bytes, weights_bytes or compute_bytes)
    return residual * shape.hidden * seq_len * micro_batch


def _backward_peak_per_token(shape: LayerShape, st: _Step) -> float:
    """Saved tensors plus activation gradients at the worst moment of a layer's backward.

    MLP first: the gradients of the gated product, of act(gate) and of up_proj's output are alive
    together while the product itself is already freed (2 x the MLP width); in an MoE layer three
    top_k x hidden gradients are (the scatter back through ``weighted_out[inv_perm]``, moe.py:529,
    the weighted product's and proj_out's; fp32 where the routing weights are). Both come with the
    residual gradient and the one accumulating for the block's input. Eager attention later holds
    its saved scores and their gradients (the probabilities' and fp32 scores') with the MLP's
    saved tensors already freed, which overtakes the MLP wave at long sequences. Fitted to peaks
    measured on CPU within 4% (tests/test_activations_measured.py); GPU kernels' workspaces are
    not included. Residual-stream gradients are in the weights' dtype under autocast.
    """
    c, w = st.c, st.w
    parts = saved_bytes_per_token(
        shape, st.seq_len, c, st.attention, st.padded, weights_bytes=w, lora=st.lora
    )
    if shape.is_moe:
        combine = FP32 if shape.routing_weights_fp32 else w
        wave = 3 * combine * shape.top_k * shape.hidden
    else:
        wave = 2 * c * shape.intermediate
    wave += _adapter_wave(shape, st)
    mlp_phase = sum(parts.values()) + wave + 2 * w * shape.hidden
    if st.attention != "eager":
        return mlp_phase
    scores_gradients = (c + FP32) * shape.heads * st.seq_len
    attention_phase = parts["input_norm"] + parts["attention"] + scores_gradients + w * shape.hidden
    return max(mlp_phase, attention_phase)


def _adapter_wave(shape: LayerShape, st: _Step) -> float:
    """The MLP adapters' share of the MLP wave: the gradient of lora_A's input in the adapter's
    dtype (when it differs from the compute dtype) and, with dropout, the gradient through the
    mask, for the widest adapted MLP input (fitted to CPU peaks: 5.7 x the width measured for 6
    counted with fp32 adapters and dropout; nothing measured or counted for adapters in the
    compute dtype without dropout)."""
    lora = st.lora
    if lora is None:
        return 0.0
    widths = [w for group, w, _ in _adapted_linears(shape, lora) if group.startswith("mlp")]
    if not widths:
        return 0.0
    per_unit = (lora.adapter_bytes if lora.adapter_bytes != st.c else 0) + (
        st.c if lora.dropout else 0
    )
    return per_unit * max(widths)


def _backward_constant(shape: LayerShape, st: _Step) -> float:
    """A per-layer gradient alive at the backward peak: with adapted expert stacks, one stack's
    weight gradient beyond the saved merged stacks (the down stack's with everything still saved,
    or gate_up's, twice its size, once the merged down stack is freed): E x width x hidden."""
    if st.lora is None or not st.lora.experts or not shape.is_moe:
        return 0.0
    return st.w * shape.experts * shape.expert_intermediate * shape.hidden


def backward_transient_bytes(
    shape: LayerShape,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
    *,
    weights_bytes: int | None = None,
    lora: Lora | None = None,
) -> float:
    """Activation gradients alive on top of a layer's saved tensors during its backward (with or
    without checkpointing; without it, on top of every layer's saved bytes for the first layer
    backpropagated, unless the loss head's own transient is larger)."""
    st = _step(seq_len, compute_bytes, attention, padded, weights_bytes, lora)
    saved = saved_bytes_per_token(
        shape, seq_len, compute_bytes, attention, padded, weights_bytes=st.w, lora=lora
    )
    per_token = _backward_peak_per_token(shape, st) - sum(saved.values())
    return per_token * seq_len * micro_batch + _backward_constant(shape, st)


def recompute_bytes(
    shape: LayerShape,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
    *,
    weights_bytes: int | None = None,
    lora: Lora | None = None,
) -> float:
    """Working set of a checkpointed layer during its backward: everything the layer saves,
    rebuilt at once (its per-layer constants included), plus the activation gradients
    (backward_transient_bytes)."""
    st = _step(seq_len, compute_bytes, attention, padded, weights_bytes, lora)
    constant = layer_constant_bytes(shape, compute_bytes, weights_bytes=st.w, lora=lora)
    constant += _backward_constant(shape, st)
    return _backward_peak_per_token(shape, st) * seq_len * micro_batch + constant


def decoder_kept_bytes(
    kinds: list,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    checkpointing: bool = False,
    padded: bool = False,
    *,
    weights_bytes: int | None = None,
    lora: Lora | None = None,
) -> float:
    """What all decoder layers hold when backward starts: every layer's saved bytes, or with
    checkpointing every layer's input. ``kinds`` is layer_kinds(config)."""
    args = (seq_len, micro_batch, compute_bytes)
    if checkpointing:
        return sum(
            n * checkpointed_bytes_per_layer(s, *args, weights_bytes=weights_bytes)
            for s, n in kinds
        )
    kw = {"weights_bytes": weights_bytes, "lora": lora}
    return sum(n * saved_bytes_per_layer(s, *args, attention, padded, **kw) for s, n in kinds)


def decoder_transient_bytes(
    kinds: list,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    checkpointing: bool = False,
    padded: bool = False,
    *,
    weights_bytes: int | None = None,
    lora: Lora | None = None,
) -> float:
    """The most any one layer adds on top of decoder_kept_bytes during its backward: the
    activation gradients, and with checkpointing also the layer's rebuilt saved tensors.

    The loss head's backward runs before any layer's, so the two transients do not add up: the
    activation peak of a step is ``decoder_kept_bytes + max(loss head transient, this)``.
    """
    per_layer = recompute_bytes if checkpointing else backward_transient_bytes
    args = (seq_len, micro_batch, compute_bytes, attention, padded)
    kw = {"weights_bytes": weights_bytes, "lora": lora}
    return max(per_layer(s, *args, **kw) for s, _ in kinds)


def final_norm_bytes(
    kinds: list,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    *,
    weights_bytes: int | None = None,
    frozen: bool = False,
) -> float:
    """What the decoder's last norm keeps (its output is counted by the head that reads it):
    alive through the loss head's backward."""
    shape = kinds[0][0]
    st = _step(seq_len, compute_bytes, "sdpa", False, weights_bytes, Lora() if frozen else None)
    return _pre_norm(shape, st, 0) * seq_len * micro_batch


def shared_bytes(
    kinds: list,
    seq_len: int,
    micro_batch: int,
    compute_bytes: int,
    attention: str = "sdpa",
    padded: bool = False,
    *,
    weights_bytes: int | None = None,
) -> float:
    """Tensors every layer reads, alive until the first layer's backward: the input ids (int64,
    saved by the embedding), the rotary cos and sin (saved by each layer's ``q * cos``, in the
    hidden states' dtype), and the 4D mask, (b, 1, s, s): in the hidden states' dtype for eager,
    boolean for SDPA when it gets one (padding, masking_utils.py:517); checkpointing keeps it for
    the recompute."""
    shape = kinds[0][0]
    residual = max(compute_bytes, weights_bytes or compute_bytes)
    rotary = shape.qk_rope_head_dim if shape.is_mla else shape.head_dim
    per_token = INDEX + 2 * residual * rotary
    if attention == "eager":
        per_token += residual * seq_len
    elif padded:
        per_token += BOOL * seq_len
    return per_token * seq_len * micro_batch
