"""What the memory estimate needs to know about a model: its exact parameter count, layout and
LoRA-targetable linears, counted from a Hugging Face config.json (transformers 5.x layouts), or a
Llama-like shape for a bare parameter count."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import activations
from .cli import UsageError

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
    # What an inference engine caches per token and layer: kv_heads x head_dim for keys and for
    # values, or, with multi-head latent attention, one latent of kv_latent values.
    kv_heads: int = 0
    head_dim: int = 0
    kv_latent: int = 0
    max_positions: int | None = None  # max_position_embeddings: vLLM's default max_model_len
    # [(activations.LayerShape, number of decoder layers of that shape)]: what each layer keeps
    # for backward (attention and KV widths, gated MLP, norms, MoE routing, sliding windows)
    layer_kinds: list = field(default_factory=list)


# ----------------------------------------------------------------------------- parameter counting


def _get(config: dict, *names, default=None):
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def _text_config(config: dict) -> dict:
    if "text_config" in config and "hidden_size" not in config:
        if not isinstance(config["text_config"], dict):
            raise UsageError("config.json field 'text_config' is not an object")
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


# Largest parameter count the estimate accepts: far above any published model (about 2e12), low
# enough that a typo such as 1e300 is caught instead of printed as a 300-digit count.
MAX_PARAMS = 10**14
REQUIRED_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
# Whole-number config.json fields the count reads: (smallest, largest) accepted when present. The
# upper bounds sit far above published models (DeepSeek-V3: 61 layers, 256 experts) and keep the
# per-layer count fast; a config with 1e8 layers is a typo, not a model.
FIELD_BOUNDS = {
    "hidden_size": (1, 1_000_000),
    "num_hidden_layers": (1, 10_000),
    "num_attention_heads": (1, 100_000),
    "vocab_size": (1, 100_000_000),
    "num_key_value_heads": (1, 100_000),
    "head_dim": (1, 100_000),
    "intermediate_size": (1, 10_000_000),
    "moe_intermediate_size": (1, 10_000_000),
    "shared_expert_intermediate_size": (0, 10_000_000),
    "num_local_experts": (0, 100_000),
    "num_experts": (0, 100_000),
    "n_routed_experts": (0, 100_000),
    "n_shared_experts": (0, 100_000),
    "num_experts_per_tok": (1, 100_000),
    "decoder_sparse_step": (0, 10_000),
    "first_k_dense_replace": (0, 10_000),
    "moe_layer_freq": (0, 10_000),
    "q_lora_rank": (1, 1_000_000),
    "kv_lora_rank": (1, 1_000_000),
    "qk_nope_head_dim": (0, 100_000),
    "qk_rope_head_dim": (1, 100_000),
    "v_head_dim": (1, 100_000),
    "max_position_embeddings": (1, 1_000_000_000),
}


def _check_decoder_config(config: dict) -> None:
    model_type = config.get("model_type")
    archs = config.get("architectures") or []
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UsageError(
            f"model_type {model_type!r} is not a supported causal LM decoder "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)}); use --params instead"
        )
    if archs and not any(a.endswith("ForCausalLM") for a in archs):
        raise UsageError(f"architectures {archs} contain no *ForCausalLM class")
    for key in REQUIRED_FIELDS:
        if config.get(key) is None:
            raise UsageError(f"config.json has no {key!r} field")
    for key, (low, high) in FIELD_BOUNDS.items():
        _check_whole(config, key, low, high)
    _check_heads(config)


def _check_whole(config: dict, key: str, low: int, high: int) -> None:
    value = config.get(key)
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        kind = "a positive integer" if low == 1 else "a non-negative integer"
        raise UsageError(f"config.json field {key!r} must be {kind} up to {high:,}, got {value!r}")


def _check_heads(config: dict) -> None:
    heads = config["num_attention_heads"]
    kv_heads = activations.kv_heads(config)
    if heads % kv_heads:
        raise UsageError(
            f"config.json: num_attention_heads ({heads}) is not a multiple of "
            f"num_key_value_heads ({kv_heads})"
        )
    if config.get("head_dim") is None and config["hidden_size"] < heads:
        raise UsageError(
            f"config.json: hidden_size ({config['hidden_size']}) is smaller than "
            f"num_attention_heads ({heads}) and no head_dim is given"
        )


def _attention_linears(c: dict) -> dict:
    """(in, out, bias) per attention projection of one layer."""
    h, n_heads = c["hidden_size"], c["num_attention_heads"]
    if c["model_type"] == "deepseek_v3":
        return _mla_linears(c)
    n_kv = activations.kv_heads(c)
    head_dim = activations.head_dim(c)
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
        return 2 * activations.head_dim(c)  # q_norm and k_norm
    if c["model_type"] == "deepseek_v3":
        return (c.get("q_lora_rank") or 0) + c["kv_lora_rank"]  # q_a_layernorm, kv_a_layernorm
    return 0


def _layer_norm_count(c: dict) -> int:
    # Gemma 2/3 add pre- and post-feedforward norms to the two usual ones.
    return 4 if c["model_type"] in ("gemma2", "gemma3_text") else 2


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


def _expert_lora_dims(c: dict, kinds: list) -> dict:
    """LoRA params per unit of rank that peft 0.21.2 adds to one MoE layer's router and experts."""
    moe = next((shape for shape, _ in kinds if shape.is_moe), None)
    if c["model_type"] not in PEFT_MOE_REMAPPED_TYPES or moe is None:
        return {}
    return activations.expert_lora_dims(moe)


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
    kinds = _layer_kinds(c)
    expert_dims = _expert_lora_dims(c, kinds)
    for index in range(layers):
        linears = dict(attention)
        routed = 0
        if activations.is_moe_layer(c, index):
            routed, shared = _moe_layer(c)
            linears.update(shared)
            for name, dims in expert_dims.items():
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
    if total > MAX_PARAMS:
        raise UsageError(
            f"config.json describes {total:.3g} parameters, more than {MAX_PARAMS:.0e}"
        )
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
        layer_kinds=kinds,
        **_kv_cache_fields(c),
    )


def _layer_kinds(c: dict) -> list:
    try:
        return activations.layer_kinds(c)
    except ValueError as exc:  # a field or a layer mix the activation model does not cover
        message = str(exc)
        if not message.startswith("config.json"):
            message = f"config.json: {message}"
        raise UsageError(message) from None


def _kv_cache_fields(c: dict) -> dict:
    """What vLLM caches per token and layer: keys and values of each KV head, or for DeepSeek's
    multi-head latent attention the compressed latent plus the shared rope key."""
    if c["model_type"] == "deepseek_v3":
        latent = c["kv_lora_rank"] + c["qk_rope_head_dim"]
        return {"kv_heads": 0, "head_dim": 0, "kv_latent": latent, "max_positions": _max_pos(c)}
    return {
        "kv_heads": activations.kv_heads(c),
        "head_dim": activations.head_dim(c),
        "kv_latent": 0,
        "max_positions": _max_pos(c),
    }


def _max_pos(c: dict) -> int | None:
    return c.get("max_position_embeddings")


def shape_from_params(params: float, vocab: int = 32000) -> ModelShape:
    """Llama-like shape for a bare parameter count: h/L = 128 and 12*L*h^2 non-embedding params,
    multi-head attention with head_dim 128 (every head keeps its own keys and values) and a
    SwiGLU MLP of width 8h/3, the one that makes a layer 12h^2 parameters."""
    if params != int(params) or not 1 <= params <= MAX_PARAMS:
        raise UsageError(f"a parameter count must be a whole number from 1 to {MAX_PARAMS:.0e}")
    hidden = max(128, int(round((128 * params / 12) ** (1 / 3) / 128)) * 128)
    embed = 2 * vocab * hidden
    layers = max(1, int(round(max(params - embed, 12 * hidden * hidden) / (12 * hidden * hidden))))
    inter = 8 * hidden // 3
    heads = max(1, hidden // 128)
    # all-linear LoRA dims of one MHA layer with a SwiGLU MLP of 8h/3
    lora_dims = {name: layers * 2 * hidden for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
    lora_dims.update({n: layers * (hidden + inter) for n in ("gate_proj", "up_proj", "down_proj")})
    return ModelShape(
        params=int(params),
        hidden=hidden,
        layers=layers,
        heads=heads,
        vocab=vocab,
        block_params=int(max(params - embed, 0) / layers),
        lora_dims=lora_dims,
        quantizable_params=int(max(params - embed, 0)),
        exact=False,
        source="--params (Llama-like shape assumed)",
        kv_heads=heads,
        head_dim=128,
        layer_kinds=[(activations.llama_like(hidden, heads, intermediate=inter), layers)],
    )


def lora_param_count(shape: ModelShape, rank: int, targets: str) -> int:
    """LoRA adds r*(in+out) per targeted linear (A: r x in, B: out x r)."""
    if targets == "all-linear":
        names = list(shape.lora_dims)
    else:
        names = [t.strip() for t in targets.split(",") if t.strip()]
        unknown = [n for n in names if n not in LINEAR_NAMES]
        if unknown:
            raise UsageError(
                f"unknown --lora-targets {unknown}; choose from {', '.join(LINEAR_NAMES)}"
            )
    return rank * sum(shape.lora_dims.get(name, 0) for name in names)
