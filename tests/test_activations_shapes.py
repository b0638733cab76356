"""scripts/_scaling/activations.py as a pure model: shapes from config.json, composition, input.

The byte counts themselves are checked against measurements in test_activations_measured.py, and
layer_kinds against the modules transformers builds there; this file needs no torch.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import script_modules  # noqa: F401  (puts scripts/ on sys.path)
from _scaling import activations

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "model_configs"


def _config(name: str, **overrides) -> dict:
    return {**json.loads((CONFIGS / f"{name}.json").read_text(encoding="utf-8")), **overrides}


def test_deepseek_v3_has_dense_then_moe_layers_with_mla():
    kinds = dict(activations.layer_kinds(_config("deepseek-v3")))
    moe = next(shape for shape in kinds if shape.is_moe)
    dense = next(shape for shape in kinds if not shape.is_moe)
    assert (kinds[dense], kinds[moe]) == (3, 58)  # first_k_dense_replace = 3 of 61
    assert (moe.experts, moe.top_k, moe.expert_intermediate, moe.shared_intermediate) == (
        256,
        8,
        2048,
        2048,
    )
    assert moe.router == "grouped_sigmoid" and moe.routing_weights_fp32
    assert (moe.expert_groups, moe.topk_groups) == (8, 4)
    assert (moe.head_dim, moe.v_head_dim, moe.q_lora_rank, moe.kv_lora_rank) == (
        192,
        128,
        1536,
        512,
    )
    assert dense.intermediate == 18432 and dense.is_mla


def test_qwen_moe_sparse_step_and_mlp_only_layers():
    config = _config("qwen1.5-moe-a2.7b", decoder_sparse_step=2, mlp_only_layers=[1, 4, 99])
    kinds = dict(activations.layer_kinds(config))
    moe = [n for shape, n in kinds.items() if shape.is_moe]
    # odd indices are sparse (12 of 24); layer 1 is forced dense; 4 was dense; 99 does not exist
    assert moe == [11] and sum(kinds.values()) == 24


def test_shared_expert_gate_is_qwen2_moe_only():
    ((qwen2_moe, _),) = activations.layer_kinds(_config("qwen1.5-moe-a2.7b"))
    ((qwen3_moe, _),) = activations.layer_kinds(_config("qwen3-30b-a3b"))
    assert qwen2_moe.shared_gate and qwen2_moe.shared_intermediate == 5632
    assert not qwen3_moe.shared_gate and qwen3_moe.shared_intermediate == 0
    assert qwen3_moe.qk_norm and qwen3_moe.renormalize_top_k


def test_sliding_window_layers():
    ((mistral, n),) = activations.layer_kinds(_config("mistral-7b-v0.1"))
    assert mistral.sliding_window == 4096 and n == 32
    ((qwen, _),) = activations.layer_kinds(_config("qwen2.5-0.5b"))  # use_sliding_window: false
    assert qwen.sliding_window == 0
    gemma2 = {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "num_hidden_layers": 5, "sliding_window": 32}  # fmt: skip
    windows = sorted((s.sliding_window, n) for s, n in activations.layer_kinds(gemma2))
    assert windows == [(0, 2), (32, 3)]  # even layers slide
    gemma3 = {**gemma2, "model_type": "gemma3_text", "num_hidden_layers": 10}
    windows = sorted((s.sliding_window, n) for s, n in activations.layer_kinds(gemma3))
    assert windows == [(0, 1), (32, 9)]  # every sixth layer is global


def test_multimodal_wrapper_reads_text_config():
    wrapped = {"model_type": "llava", "text_config": _config("llama-3.1-8b")}
    assert activations.layer_kinds(wrapped) == activations.layer_kinds(_config("llama-3.1-8b"))


@pytest.mark.parametrize(
    ("key", "value"),
    [("intermediate_size", -1), ("head_dim", -5), ("num_key_value_heads", 0), ("hidden_size", 1.5)],
)
def test_bad_dimensions_are_refused(key, value):
    with pytest.raises(ValueError, match=key):
        activations.layer_kinds(_config("llama-3.1-8b", **{key: value}))


def test_layer_count_costs_nothing():
    start = time.perf_counter()
    kinds = activations.layer_kinds(_config("deepseek-v3", num_hidden_layers=100_000_000))
    assert sum(n for _, n in kinds) == 100_000_000
    assert time.perf_counter() - start < 0.1


def test_unknown_attention_is_refused():
    ((shape, _),) = activations.layer_kinds(_config("llama-3.1-8b"))
    with pytest.raises(ValueError, match="attention"):
        activations.saved_bytes_per_layer(shape, 1024, 1, 2, "flash")


def test_llama_like_matches_a_published_llama():
    ((published, _),) = activations.layer_kinds(_config("llama-3.1-8b"))
    assert activations.llama_like(4096, 32, kv_heads=8, intermediate=14336) == published
    assert activations.llama_like(4096, 32).intermediate == 4096 * 8 // 3


def test_only_eager_grows_with_sequence_length_per_token():
    ((shape, _),) = activations.layer_kinds(_config("llama-3.1-8b"))
    per_token = {
        (attention, s): activations.saved_bytes_per_layer(shape, s, 1, 2, attention) / s
        for attention in activations.ATTENTIONS
        for s in (512, 4096)
    }
    assert per_token["sdpa", 512] == per_token["sdpa", 4096]
    assert per_token["eager", 4096] > per_token["eager", 512] > per_token["sdpa", 512]


def test_padding_repeats_kv_only_for_grouped_query_attention():
    ((gqa, _),) = activations.layer_kinds(_config("llama-3.1-8b"))  # 32 heads, 8 KV heads
    ((mqa, _),) = activations.layer_kinds(_config("gemma-2b"))  # one KV head: a view
    ((mha, _),) = activations.layer_kinds(_config("qwen1.5-moe-a2.7b"))

    def grows(shape):
        plain = activations.saved_bytes_per_layer(shape, 1024, 1, 2)
        return activations.saved_bytes_per_layer(shape, 1024, 1, 2, padded=True) - plain

    mask = 2 * 1024 * 1024  # the (b, 1, s, s) bf16 bias SDPA keeps, in every layer
    assert grows(gqa) == 2 * 2 * (32 - 8) * 128 * 1024 + mask  # K and V, 24 more heads each
    assert grows(mqa) == grows(mha) == mask
    eager = activations.saved_bytes_per_layer(gqa, 1024, 1, 2, "eager")
    assert activations.saved_bytes_per_layer(gqa, 1024, 1, 2, "eager", padded=True) == eager


def test_decoder_composition_with_and_without_checkpointing():
    kinds = activations.layer_kinds(_config("deepseek-v3"))
    args = (2048, 2, 2)
    saved = {s: activations.saved_bytes_per_layer(s, *args) for s, _ in kinds}
    assert activations.decoder_kept_bytes(kinds, *args) == sum(n * saved[s] for s, n in kinds)
    transient = activations.decoder_transient_bytes(kinds, *args)
    assert transient == max(activations.backward_transient_bytes(s, *args) for s in saved)

    kept = activations.decoder_kept_bytes(kinds, *args, checkpointing=True)
    assert kept == 61 * 2 * 7168 * 2048 * 2  # each layer's bf16 input
    rebuilt = activations.decoder_transient_bytes(kinds, *args, checkpointing=True)
    assert rebuilt == max(saved[s] + activations.backward_transient_bytes(s, *args) for s in saved)


def test_sliding_window_mixed_with_dense_and_moe_layers_is_refused():
    config = _config("qwen1.5-moe-a2.7b", use_sliding_window=True, sliding_window=4096)
    config["decoder_sparse_step"] = 2  # dense and MoE layers, all sliding
    assert len(activations.layer_kinds(config)) == 2
    with pytest.raises(ValueError, match="sliding-window layers mixed"):
        activations.layer_kinds({**config, "layer_types": ["sliding_attention", "full_attention"]})


def test_autocast_keeps_weight_copies_and_a_wide_residual():
    """fp32 weights under bf16 autocast: every linear's bf16 weight copy is kept per layer, and a
    checkpoint keeps the fp32 hidden states; weights no wider than the compute dtype change
    nothing."""
    ((shape, _),) = activations.layer_kinds(_config("llama-3.1-8b"))
    per_token = activations.saved_bytes_per_token(shape, 1024, 2, weights_bytes=4)
    layer = activations.saved_bytes_per_layer(shape, 1024, 1, 2, weights_bytes=4)
    copies = 2 * (4096 * 128 * (32 + 2 * 8) + 4096 * 4096 + 3 * 4096 * 14336)
    assert activations.autocast_weight_bytes(shape, 2) == copies
    assert layer == sum(per_token.values()) * 1024 + copies
    # the norms keep fp32 normalised values and q, k, v (gate, up) each cast the output
    bf16 = activations.saved_bytes_per_token(shape, 1024, 2)
    assert per_token["input_norm"] - bf16["input_norm"] == (4 - 2) * 4096 + (3 - 1) * 2 * 4096
    assert activations.checkpointed_bytes_per_layer(shape, 1024, 1, 2, weights_bytes=4) == (
        4 * 4096 * 1024
    )
    assert activations.saved_bytes_per_layer(shape, 1024, 1, 2, weights_bytes=2) == (
        activations.saved_bytes_per_layer(shape, 1024, 1, 2)
    )


def test_lora_on_a_frozen_llama_layer_hand_computed():
    """peft's defaults for Llama (q_proj, v_proj), TRL's dropout and fp32 adapters, CUDA's bool
    dropout mask: the frozen base keeps no linear inputs and no normalised values."""
    ((shape, _),) = activations.layer_kinds(_config("llama-3.1-8b"))
    lora = activations.Lora(targets=frozenset({"q_proj", "v_proj"}), rank=16)
    parts = activations.saved_bytes_per_token(shape, 2048, 2, lora=lora)
    h, c = 4096, 2
    assert parts["input_norm"] == parts["mlp_norm"] == 4 * h + 4  # fp32 input copy and rsqrt
    assert parts["attention"] == c * (4096 + 8 * 256) + c * 4096 + 4 * 32  # q, k, v, out, lse
    assert parts["mlp"] == 3 * c * 14336  # gate, act(gate), up; not the product
    assert parts["adapters"] == 2 * ((1 + 4) * h + 4 * 16)  # mask, dropout output, lora_A out
    full = sum(activations.saved_bytes_per_token(shape, 2048, 2).values())
    assert sum(parts.values()) < full  # 180,488 against 200,840 bytes per token


def test_lora_without_dropout_shares_an_input_already_kept():
    ((shape, _),) = activations.layer_kinds(_config("llama-3.1-8b"))

    def adapters(names, attention="sdpa", adapter_bytes=2):
        lora = activations.Lora(frozenset(names), 16, adapter_bytes=adapter_bytes, dropout=False)
        return activations.saved_bytes_per_token(shape, 64, 2, attention, lora=lora)["adapters"]

    a_out = 2 * 16
    # q, k and v read one tensor: kept once; o_proj reads SDPA's output, kept already
    assert adapters(["q_proj", "k_proj", "v_proj"]) == 3 * a_out + 2 * 4096
    assert adapters(["o_proj"]) == a_out
    assert adapters(["o_proj"], "eager") == a_out + 2 * 4096  # eager's output: o_proj only
    # fp32 adapters cast the input: a copy per adapter
    assert adapters(["q_proj", "k_proj"], adapter_bytes=4) == 2 * (4 * 16 + 4 * 4096)


def test_adapted_expert_stacks_keep_the_merged_weights():
    """all-linear on Qwen3-MoE: peft merges each expert stack with its adapter per forward and
    grouped_mm saves the merged copy, whatever the number of tokens."""
    kinds = activations.layer_kinds(_config("qwen3-30b-a3b"))
    ((moe, layers),) = kinds
    lora = activations.Lora(frozenset({"router", "experts"}), 16, dropout=False, experts=True)
    stacks = 128 * 3 * 2048 * 768
    assert activations.expert_stack_params(moe) == stacks
    constant = activations.layer_constant_bytes(moe, 2, lora=lora)
    assert constant == 2 * (stacks + activations.expert_adapter_params(moe, 16))
    assert constant > 1.2e9  # per layer: no checkpointing cannot fit 48 such layers on a GPU
    kept = activations.decoder_kept_bytes(kinds, 1, 1, 2, lora=lora)
    assert kept > layers * constant


def test_shared_tensors_and_the_final_norm():
    kinds = activations.layer_kinds(_config("llama-3.1-8b"))
    tokens = 2 * 1024
    rotary_and_ids = (8 + 2 * 2 * 128) * tokens
    assert activations.shared_bytes(kinds, 1024, 2, 2) == rotary_and_ids
    padded = activations.shared_bytes(kinds, 1024, 2, 2, padded=True)
    assert padded == rotary_and_ids + 1024 * tokens  # the boolean (b, 1, s, s) mask
    eager = activations.shared_bytes(kinds, 1024, 2, 2, "eager")
    assert eager == rotary_and_ids + 2 * 1024 * tokens  # eager's additive mask
    assert activations.final_norm_bytes(kinds, 1024, 2, 2) == ((4 + 2) * 4096 + 4) * tokens
    frozen = activations.final_norm_bytes(kinds, 1024, 2, 2, frozen=True)
    assert frozen == (4 * 4096 + 4) * tokens
