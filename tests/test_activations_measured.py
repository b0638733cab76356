"""scripts/_scaling/activations.py against the bytes real transformers layers save (CPU).

For every decoder architecture in fixtures/model_configs that transformers 5.24 builds on a CPU
(bert and vit are not causal decoders), plus Gemma 2 and Gemma 3 from their config classes'
defaults (no fixture; their norms and softcap differ), tests/activation_probe.py counts the
storages autograd saves in a forward pass, bf16, batch 1, at two sequence lengths, and takes the
first and the second decoder layer from three layer counts (0, 1, 2). Each layer must be within
``TOLERANCE`` of the model, with SDPA and eager attention, with and without gradient
checkpointing. A few cases add fp32 compute, a padded batch (SDPA gets a mask and repeats GQA's
K/V) or a sliding window shorter than the sequence. Peaks of a backward pass (memtrack.StorageLog)
check the working set of a checkpointed layer while it is recomputed.

Shrunk where a published size does not fit a CPU test, with the model evaluated on the same
shrunk config: the expert count (it only sizes the router's per-token probabilities), and for
DeepSeek-V3 also top-k (2 of 4 experts in 2 groups, keeping the group-limited routing path) and
v_head_dim = qk_head_dim = 192, because CPU SDPA has no fused kernel for unequal q/v head dims
and falls back to the math path (fp32 copies and the s x s probabilities), which GPUs do not.
Its first layer is dense (first_k_dense_replace=1) and its second MoE, as in the published model.
Run with ``-s`` for the table of measured and modelled bytes per token per hidden unit.
"""

from __future__ import annotations

import collections
import dataclasses

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import activation_probe as probe  # noqa: E402  (tests/ is on sys.path via conftest.py)
import script_modules  # noqa: E402,F401  (puts scripts/ on sys.path)
from _scaling import activations  # noqa: E402
from memtrack import StorageLog  # noqa: E402
from transformers.initialization import no_init_weights  # noqa: E402

TOLERANCE = 0.10
SEQ_LENS = (32, 64)
COMPUTE_BYTES = {"bf16": 2, "fp32": 4}
GRID = [
    probe.Run(seq_len, attention, checkpointing)
    for attention in ("sdpa", "eager")
    for checkpointing in (False, True)
    for seq_len in SEQ_LENS
]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    overrides: tuple = ()  # (key, value) pairs applied to the published config
    extra_runs: tuple = ()  # (dtype, Run) beyond the bf16 grid
    attentions: tuple = ("sdpa", "eager")
    source: str = "fixture"  # or the name of a transformers config class

    def config(self) -> dict:
        if self.source == "fixture":
            return probe.load_config(self.name, **dict(self.overrides))
        values = getattr(transformers, self.source)().to_dict()
        values.pop("layer_types", None)  # re-derived from num_hidden_layers
        return {**values, **dict(self.overrides)}


def _fp32(*runs):
    return tuple(("fp32", run) for run in runs)


def _padded(seq_len=SEQ_LENS[-1]):
    return (("bf16", probe.Run(seq_len, "sdpa", padded=True)),)


CASES = [
    Case("llama-3.1-8b", extra_runs=_padded()),
    # A window between the two lengths: unmasked at 32, masked (K/V repeated) at 64.
    Case("mistral-7b-v0.1", overrides=(("sliding_window", 48),)),
    Case("tinyllama-1.1b", extra_runs=_fp32(probe.Run(64), probe.Run(64, "eager"))),
    Case("gemma-2b", extra_runs=_padded()),  # one KV head: repeat_kv stays a view
    Case("qwen2.5-0.5b"),
    Case("qwen3-0.6b", extra_runs=_padded() + _fp32(probe.Run(64), probe.Run(64, "eager"))),
    Case("mixtral-8x7b-v0.1", overrides=(("num_local_experts", 2),)),
    Case("qwen1.5-moe-a2.7b", overrides=(("num_experts", 8),), extra_runs=_fp32(probe.Run(64))),
    Case("qwen3-30b-a3b", overrides=(("num_experts", 16),), extra_runs=_fp32(probe.Run(64))),
    Case(
        "deepseek-v3",
        overrides=(
            ("n_routed_experts", 4),
            ("num_experts_per_tok", 2),
            ("n_group", 2),
            ("topk_group", 1),
            ("first_k_dense_replace", 1),
            ("v_head_dim", 192),
        ),
    ),
    # SDPA refuses Gemma 2's attention logit softcap (sdpa_attention.py:106-109): eager only.
    Case("gemma2", source="Gemma2Config", attentions=("eager",)),
    Case("gemma3", source="Gemma3TextConfig"),
]
# (case, Run): peak of a one-layer backward pass, dense and MoE layers, eager at a length where
# the attention scores' gradients overtake the MLP's, and without checkpointing (the same saved
# tensors plus gradients, kept from the forward instead of rebuilt).
RECOMPUTE_RUNS = [
    ("qwen3-0.6b", probe.Run(64, "sdpa", True)),
    ("qwen3-0.6b", probe.Run(512, "eager", True)),
    ("qwen1.5-moe-a2.7b", probe.Run(64, "sdpa", True)),
    ("qwen3-30b-a3b", probe.Run(64, "sdpa", True)),
    ("qwen3-30b-a3b", probe.Run(64, "sdpa", False)),
]


def _layer_shapes(config: dict) -> list:
    """The LayerShape of decoder layers 0 and 1, in order."""
    first = activations.layer_kinds({**config, "num_hidden_layers": 1})
    both = activations.layer_kinds({**config, "num_hidden_layers": 2})
    ((shape0, _),) = first
    counts = dict(both)
    counts[shape0] -= 1
    (shape1,) = [shape for shape, n in counts.items() if n]
    return [shape0, shape1]


def modelled(shape, run: probe.Run, dtype: str) -> float:
    c = COMPUTE_BYTES[dtype]
    if run.checkpointing:
        return activations.checkpointed_bytes_per_layer(shape, run.seq_len, 1, c)
    return activations.saved_bytes_per_layer(shape, run.seq_len, 1, c, run.attention, run.padded)


def _runs(case: Case) -> list:
    grid = [("bf16", run) for run in GRID if run.attention in case.attentions]
    return grid + list(case.extra_runs)


def _measure_case(case: Case) -> list:
    """[(dtype, Run, layer index, measured, modelled)] for every run of ``case``."""
    config = case.config()
    shapes = _layer_shapes(config)
    rows = []
    for dtype in dict.fromkeys(dtype for dtype, _ in _runs(case)):
        model = probe.build_model(config, dtype=dtype)
        for run_dtype, run in _runs(case):
            if run_dtype == dtype:
                for index, got in enumerate(probe.layer_bytes(model, run)):
                    rows.append((dtype, run, index, got, modelled(shapes[index], run, dtype)))
        del model
    return rows


def _recompute_peak(case: Case, run: probe.Run) -> tuple:
    """(measured, modelled) working set of one layer during its backward: the activation peak of
    a one-layer model less what a checkpoint keeps; the loss is a plain sum, so no head
    transient competes with the layer's."""
    config = case.config()
    model = probe.build_model(config, layers=1)
    model.set_attn_implementation(run.attention)
    if run.checkpointing:
        model.activation_checkpointing_enable()
    input_ids = torch.randint(0, probe.PROBE_VOCAB, (1, run.seq_len))
    log = StorageLog()
    log.track(model.parameters(), "param")
    log.track(model.buffers(), "buffer")
    with log:
        model.model(input_ids=input_ids, use_cache=False).last_hidden_state.sum().backward()
        log.mark_grads(list(model.parameters()))
    (shape,) = _layer_shapes(config)[:1]
    kept = activations.checkpointed_bytes_per_layer(shape, run.seq_len, 1, 2)
    measured = log.replay()["peak"]["act"] - (kept if run.checkpointing else 0)
    return measured, activations.recompute_bytes(shape, run.seq_len, 1, 2, run.attention)


@pytest.fixture(scope="module")
def measured() -> dict:
    # One intra-op thread: byte counts do not depend on it, and the machine is shared.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = {case.name: _measure_case(case) for case in CASES}
        cases = {case.name: case for case in CASES}
        peaks = {(name, run): _recompute_peak(cases[name], run) for name, run in RECOMPUTE_RUNS}
    finally:
        torch.set_num_threads(threads)
    _print_table(rows, peaks)
    return {"rows": rows, "peaks": peaks}


def _hidden(name: str) -> int:
    return next(case for case in CASES if case.name == name).config()["hidden_size"]


def _print_table(rows: dict, peaks: dict) -> None:
    lines = ["case               dtype attn  ckpt pad   s layer   measured  modelled  ratio"]
    for name, case_rows in rows.items():
        h = _hidden(name)
        for dtype, run, index, got, est in case_rows:
            sbh = run.seq_len * h
            lines.append(
                f"{name:18} {dtype:5} {run.attention:5} {int(run.checkpointing):4} "
                f"{int(run.padded):3} {run.seq_len:3} {index:5} {got / sbh:10.3f} "
                f"{est / sbh:9.3f} {got / est:6.3f}"
            )
    lines.append("one layer's backward working set (saved + activation gradients; ckpt, attn):")
    for (name, run), (got, est) in peaks.items():
        sbh = run.seq_len * _hidden(name)
        lines.append(
            f"{name:18} bf16  {int(run.checkpointing)} {run.attention:5} s={run.seq_len:<4} {got / sbh:8.3f} "
            f"{est / sbh:9.3f} {got / est:6.3f}"
        )
    print("\nbytes per token per hidden unit (s*b*h) saved by one decoder layer:")
    print("\n".join(lines))


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_saved_bytes_per_layer_within_tolerance(measured, name):
    misses = [
        f"{dtype} {run} layer {index}: measured/modelled = {got / est:.3f}"
        for dtype, run, index, got, est in measured["rows"][name]
        if abs(got / est - 1) > TOLERANCE
    ]
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_every_setting_was_measured(measured, name):
    case = next(case for case in CASES if case.name == name)
    settings = {(dtype, run) for dtype, run, *_ in measured["rows"][name]}
    assert settings == set(_runs(case))
    assert all(got > 0 for *_, got, _ in measured["rows"][name])


@pytest.mark.parametrize(("name", "run"), RECOMPUTE_RUNS, ids=lambda v: str(v))
def test_recompute_working_set_within_tolerance(measured, name, run):
    got, est = measured["peaks"][(name, run)]
    assert abs(got / est - 1) <= TOLERANCE, f"measured/modelled = {got / est:.3f}"


# ----------------------------------------------------------------------------- layer kinds


def _module_facts(layer, config) -> tuple:
    """What the built decoder layer says about the fields layer_kinds derives from config.json."""
    attn, mlp = layer.self_attn, layer.mlp
    if hasattr(attn, "kv_a_proj_with_mqa"):  # MLA: query width and latent ranks
        q_proj = attn.q_b_proj if attn.q_lora_rank else attn.q_proj
        attention = (
            q_proj.out_features,
            attn.kv_a_layernorm.weight.shape[0],
            attn.o_proj.in_features,
        )
    else:
        attention = (attn.q_proj.out_features, attn.k_proj.out_features, attn.o_proj.in_features)
    if hasattr(mlp, "experts"):
        experts, double_width, _ = mlp.experts.gate_up_proj.shape
        shared = getattr(mlp, "shared_expert", None) or getattr(mlp, "shared_experts", None)
        moe = (
            experts,
            mlp.gate.top_k,
            double_width // 2,
            shared.gate_proj.out_features if shared else 0,
        )
        dense = 0
    else:
        moe, dense = None, mlp.gate_proj.out_features
    # Mistral and Mixtral give every layer the config's window (modeling_mistral.py:173)
    window = getattr(attn, "sliding_window", None)
    if config.model_type in ("mistral", "mixtral"):
        window = config.sliding_window
    norms = (
        type(layer.input_layernorm).__name__.startswith("Gemma"),
        hasattr(layer, "pre_feedforward_layernorm"),
    )
    return (
        layer.input_layernorm.weight.shape[0],
        attention,
        hasattr(attn, "q_norm"),
        dense,
        moe,
        window or 0,
        norms,
    )


def _shape_facts(shape) -> tuple:
    if shape.is_mla:
        q_width = shape.heads * shape.head_dim
        attention = (q_width, shape.kv_lora_rank, shape.heads * shape.v_head_dim)
    else:
        kv = shape.kv_heads * shape.head_dim
        attention = (shape.heads * shape.head_dim, kv, shape.heads * shape.v_head_dim)
    moe = None
    if shape.is_moe:
        moe = (shape.experts, shape.top_k, shape.expert_intermediate, shape.shared_intermediate)
    norms = (shape.gemma_norms, shape.sandwich_norms)
    return (
        shape.hidden,
        attention,
        shape.qk_norm,
        shape.intermediate,
        moe,
        shape.sliding_window,
        norms,
    )


KIND_CASES = [case for case in CASES] + [
    Case("qwen1.5-moe-a2.7b", overrides=(("decoder_sparse_step", 2), ("mlp_only_layers", [1]))),
]


@pytest.mark.parametrize("case", KIND_CASES, ids=lambda case: f"{case.name}{dict(case.overrides)}")
def test_layer_kinds_match_the_modules_transformers_builds(case):
    """Ten published-size layers on the meta device (no memory): enough for every layer rule
    (DeepSeek-V3's 3 dense layers, Gemma 3's every sixth global layer)."""
    config = {**case.config(), "num_hidden_layers": 10}
    config.pop("layer_types", None)
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"), no_init_weights():
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    built = collections.Counter(_module_facts(layer, hf_config) for layer in model.model.layers)
    modelled = collections.Counter()
    for shape, count in activations.layer_kinds(config):
        modelled[_shape_facts(shape)] += count
    assert modelled == built
