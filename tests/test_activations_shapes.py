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

    assert grows(gqa) == 2 * 2 * (32 - 8) * 128 * 1024  # K and V, 24 more heads each
    assert grows(mqa) == grows(mha) == 0


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
