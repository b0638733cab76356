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

fp32 weights under bf16 autocast (TRL's CLI default, ``dtype="float32"`` with ``bf16=True``) are
checked twice: the whole layer, dominated at these lengths by autocast's bf16 weight copies, and
its per-token part alone, from the difference of two lengths (the copies do not grow with s).

LoRA cases wrap the model with peft 0.21.2 as TRL does (``get_peft_model``, fp32 adapters unless
said otherwise, and ``enable_input_require_grads``, which TRL calls with checkpointing,
sft_trainer.py:899; without it the first layer's input needs no gradient and that layer keeps
less than the model counts). CPU dropout keeps its mask in the adapter's dtype, not the boolean
mask of CUDA's fused dropout, so the model is given the CPU's mask size here.

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
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import activation_probe as probe  # noqa: E402  (tests/ is on sys.path via conftest.py)
import script_modules  # noqa: E402,F401  (puts scripts/ on sys.path)
from _scaling import activations, model_shape  # noqa: E402
from memtrack import StorageLog  # noqa: E402
from transformers.initialization import no_init_weights  # noqa: E402

CONFIGS = Path(__file__).parent / "fixtures" / "model_configs"

# peft 0.21.2 reads transformers 5.24's deprecated ``is_gradient_checkpointing`` property
pytestmark = pytest.mark.filterwarnings(
    "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"
)

TOLERANCE = 0.10
SEQ_LENS = (32, 64)
COMPUTE_BYTES = {"bf16": 2, "fp32": 4}
LORA_RANK = 16
GRID = [
    probe.Run(seq_len, attention, checkpointing)
    for attention in ("sdpa", "eager")
    for checkpointing in (False, True)
    for seq_len in SEQ_LENS
]
# Without checkpointing: with it a layer keeps its input only, adapters or not.
LORA_GRID = [probe.Run(64, "sdpa"), probe.Run(64, "eager"), probe.Run(64, "sdpa", padded=True)]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    overrides: tuple = ()  # (key, value) pairs applied to the published config
    extra_runs: tuple = ()  # (dtype, Run) beyond the bf16 grid
    attentions: tuple = ("sdpa", "eager")
    source: str = "fixture"  # or the name of a transformers config class
    # (target_modules, lora_dropout, fp32 adapters): peft's LoRA on the model, LORA_GRID runs
    lora: tuple = ()

    @property
    def label(self) -> str:
        if not self.lora:
            return self.name
        targets, dropout, fp32 = self.lora
        names = targets if isinstance(targets, str) else ",".join(targets)
        return f"{self.name} lora {names} p={dropout} {'fp32' if fp32 else 'bf16'}"

    def config(self) -> dict:
        if self.source == "fixture":
            return probe.load_config(self.name, **dict(self.overrides))
        values = getattr(transformers, self.source)().to_dict()
        values.pop("layer_types", None)  # re-derived from num_hidden_layers
        return {**values, **dict(self.overrides)}

    def lora_model(self, model):
        """``model`` with peft's adapters injected, as TRL's trainers set it up."""
        targets, dropout, fp32 = self.lora
        config = peft.LoraConfig(
            r=LORA_RANK, lora_alpha=32, lora_dropout=dropout, target_modules=targets
        )
        model = peft.get_peft_model(model, config, autocast_adapter_dtype=fp32).get_base_model()
        model.enable_input_require_grads()
        return model

    def lora_spec(self, dtype: str) -> activations.Lora | None:
        """The estimator's view of the adapters: all-linear resolved by model_shape, as there."""
        if not self.lora:
            return None
        targets, dropout, fp32 = self.lora
        if targets == "all-linear":
            dims = model_shape.count_params(self.config()).lora_dims
            targets = [name for name, count in dims.items() if count]
        return activations.Lora(
            targets=frozenset(targets),
            rank=LORA_RANK,
            adapter_bytes=4 if fp32 else COMPUTE_BYTES[dtype],
            dropout=dropout > 0,
            mask_bytes=None,  # CPU dropout: a mask in the adapter's dtype
            experts="experts" in targets,
        )


def _fp32(*runs):
    return tuple(("fp32", run) for run in runs)


def _padded(seq_len=SEQ_LENS[-1]):
    return (("bf16", probe.Run(seq_len, "sdpa", padded=True)),)


def _autocast():
    """fp32 weights under bf16 autocast, at both lengths (for the per-token slope) and
    checkpointed (the layer keeps its fp32 input)."""
    runs = [probe.Run(s, autocast=True) for s in SEQ_LENS]
    return _fp32(*runs, probe.Run(SEQ_LENS[-1], checkpointing=True, autocast=True))


DEEPSEEK_SHRUNK = (
    ("n_routed_experts", 4),
    ("num_experts_per_tok", 2),
    ("n_group", 2),
    ("topk_group", 1),
    ("first_k_dense_replace", 1),
    ("v_head_dim", 192),
)
CASES = [
    Case("llama-3.1-8b", extra_runs=_padded()),
    # A window between the two lengths: unmasked at 32, masked (K/V repeated) at 64.
    Case("mistral-7b-v0.1", overrides=(("sliding_window", 48),)),
    Case("tinyllama-1.1b", extra_runs=_fp32(probe.Run(64), probe.Run(64, "eager")) + _autocast()),
    Case("gemma-2b", extra_runs=_padded()),  # one KV head: repeat_kv stays a view
    Case("qwen2.5-0.5b"),
    Case(
        "qwen3-0.6b",
        extra_runs=_padded() + _fp32(probe.Run(64), probe.Run(64, "eager")) + _autocast(),
    ),
    Case("mixtral-8x7b-v0.1", overrides=(("num_local_experts", 2),)),
    Case(
        "qwen1.5-moe-a2.7b",
        overrides=(("num_experts", 8),),
        extra_runs=_fp32(probe.Run(64)) + _autocast(),
    ),
    Case("qwen3-30b-a3b", overrides=(("num_experts", 16),), extra_runs=_fp32(probe.Run(64))),
    Case("deepseek-v3", overrides=DEEPSEEK_SHRUNK),
    # SDPA refuses Gemma 2's attention logit softcap (sdpa_attention.py:106-109): eager only.
    Case("gemma2", source="Gemma2Config", attentions=("eager",)),
    Case("gemma3", source="Gemma3TextConfig"),
    # LoRA: TRL's defaults (fp32 adapters, dropout 0.05) on every linear, and under autocast
    Case(
        "tinyllama-1.1b",
        lora=("all-linear", 0.05, True),
        extra_runs=_fp32(probe.Run(64, autocast=True)),
    ),
    # peft's default targets for Qwen3 (q_proj, v_proj); frozen q/k norms
    Case("qwen3-0.6b", lora=(["q_proj", "v_proj"], 0.05, True)),
    # no dropout, adapters in the base dtype: lora_A saves its input itself, which for o_proj
    # is SDPA's saved output and for down_proj the MLP's product
    Case("qwen3-0.6b", lora=(["o_proj", "down_proj"], 0.0, False)),
    Case("gemma-2b", lora=("all-linear", 0.0, True)),  # Gemma norms, frozen
    # all-linear adapts the fused expert stacks and the router (dropout must be 0 there)
    Case("qwen3-30b-a3b", overrides=(("num_experts", 16),), lora=("all-linear", 0.0, True)),
    # shared expert and its gate adapted, routed experts frozen
    Case("qwen1.5-moe-a2.7b", overrides=(("num_experts", 8),), lora=("all-linear", 0.05, True)),
    Case("deepseek-v3", overrides=DEEPSEEK_SHRUNK, lora=(["q_b_proj", "kv_b_proj"], 0.0, False)),
]
# (case label, Run): peak of a one-layer backward pass, dense and MoE layers, eager at a length
# where the attention scores' gradients overtake the MLP's, without checkpointing (the same
# saved tensors plus gradients, kept from the forward instead of rebuilt), and with adapters,
# checkpointed as TRL runs them by default. (Without checkpointing a LoRA layer's backward peaks
# up to 19% above the model, with gradients of the attention's adapters it does not count: at
# 16 layers or more that is under 1% of the decoder's activations.)
RECOMPUTE_RUNS = [
    ("qwen3-0.6b", probe.Run(64, "sdpa", True)),
    ("qwen3-0.6b", probe.Run(512, "eager", True)),
    ("qwen1.5-moe-a2.7b", probe.Run(64, "sdpa", True)),
    ("qwen3-30b-a3b", probe.Run(64, "sdpa", True)),
    ("qwen3-30b-a3b", probe.Run(64, "sdpa", False)),
    ("tinyllama-1.1b lora all-linear p=0.05 fp32", probe.Run(64, "sdpa", True)),
    ("qwen3-0.6b lora o_proj,down_proj p=0.0 bf16", probe.Run(64, "sdpa", True)),
    ("qwen3-30b-a3b lora all-linear p=0.0 fp32", probe.Run(64, "sdpa", True)),
]
CASE_BY_LABEL = {case.label: case for case in CASES}


def _layer_shapes(config: dict) -> list:
    """The LayerShape of decoder layers 0 and 1, in order."""
    first = activations.layer_kinds({**config, "num_hidden_layers": 1})
    both = activations.layer_kinds({**config, "num_hidden_layers": 2})
    ((shape0, _),) = first
    counts = dict(both)
    counts[shape0] -= 1
    (shape1,) = [shape for shape, n in counts.items() if n]
    return [shape0, shape1]


def _dtypes(run: probe.Run, dtype: str) -> dict:
    """compute_bytes and the keyword arguments for activations' functions."""
    if run.autocast:
        return {"compute_bytes": 2, "weights_bytes": 4}
    return {"compute_bytes": COMPUTE_BYTES[dtype]}


def modelled(shape, run: probe.Run, dtype: str, lora=None) -> float:
    kw = _dtypes(run, dtype)
    c = kw.pop("compute_bytes")
    if run.checkpointing:
        return activations.checkpointed_bytes_per_layer(shape, run.seq_len, 1, c, **kw)
    return activations.saved_bytes_per_layer(
        shape, run.seq_len, 1, c, run.attention, run.padded, lora=lora, **kw
    )


def modelled_per_token(shape, run: probe.Run, dtype: str, lora=None) -> float:
    kw = _dtypes(run, dtype)
    c = kw.pop("compute_bytes")
    parts = activations.saved_bytes_per_token(
        shape, run.seq_len, c, run.attention, run.padded, lora=lora, **kw
    )
    return sum(parts.values())


def _runs(case: Case) -> list:
    grid = LORA_GRID if case.lora else GRID
    grid = [("bf16", run) for run in grid if run.attention in case.attentions]
    return grid + list(case.extra_runs)


def _build(case: Case, dtype: str, layers: int = probe.MAX_LAYERS):
    model = probe.build_model(case.config(), dtype=dtype, layers=layers)
    return case.lora_model(model) if case.lora else model


def _measure_case(case: Case) -> list:
    """[(dtype, Run, layer index, measured, modelled)] for every run of ``case``."""
    shapes = _layer_shapes(case.config())
    rows = []
    for dtype in dict.fromkeys(dtype for dtype, _ in _runs(case)):
        model = _build(case, dtype)
        lora = case.lora_spec(dtype)
        for run_dtype, run in _runs(case):
            if run_dtype == dtype:
                for index, got in enumerate(probe.layer_bytes(model, run)):
                    est = modelled(shapes[index], run, dtype, lora)
                    rows.append((dtype, run, index, got, est))
        del model
    return rows


def _recompute_peak(case: Case, run: probe.Run) -> tuple:
    """(measured, modelled) working set of one layer during its backward: the activation peak of
    a one-layer model less what a checkpoint keeps; the loss is a plain sum, so no head
    transient competes with the layer's."""
    config = case.config()
    model = _build(case, "bf16", layers=1)
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
    lora = case.lora_spec("bf16")
    return measured, activations.recompute_bytes(shape, run.seq_len, 1, 2, run.attention, lora=lora)


@pytest.fixture(scope="module")
def measured() -> dict:
    # One intra-op thread: byte counts do not depend on it, and the machine is shared.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = {case.label: _measure_case(case) for case in CASES}
        peaks = {
            (label, run): _recompute_peak(CASE_BY_LABEL[label], run)
            for label, run in RECOMPUTE_RUNS
        }
    finally:
        torch.set_num_threads(threads)
    _print_table(rows, peaks)
    return {"rows": rows, "peaks": peaks}


def _hidden(label: str) -> int:
    return CASE_BY_LABEL[label].config()["hidden_size"]


def _print_table(rows: dict, peaks: dict) -> None:
    lines = ["case               dtype attn  ckpt pad ac  s layer   measured  modelled  ratio"]
    for label, case_rows in rows.items():
        h = _hidden(label)
        for dtype, run, index, got, est in case_rows:
            sbh = run.seq_len * h
            lines.append(
                f"{label:18} {dtype:5} {run.attention:5} {int(run.checkpointing):4} "
                f"{int(run.padded):3} {int(run.autocast):2} {run.seq_len:3} {index:5} "
                f"{got / sbh:10.3f} {est / sbh:9.3f} {got / est:6.3f}"
            )
    lines.append("one layer's backward working set (saved + activation gradients; ckpt, attn):")
    for (label, run), (got, est) in peaks.items():
        sbh = run.seq_len * _hidden(label)
        lines.append(
            f"{label:18} bf16  {int(run.checkpointing)} {run.attention:5} s={run.seq_len:<4} "
            f"{got / sbh:8.3f} {est / sbh:9.3f} {got / est:6.3f}"
        )
    print("\nbytes per token per hidden unit (s*b*h) saved by one decoder layer:")
    print("\n".join(lines))


@pytest.mark.parametrize("label", list(CASE_BY_LABEL))
def test_saved_bytes_per_layer_within_tolerance(measured, label):
    misses = [
        f"{dtype} {run} layer {index}: measured/modelled = {got / est:.3f}"
        for dtype, run, index, got, est in measured["rows"][label]
        if abs(got / est - 1) > TOLERANCE
    ]
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("label", list(CASE_BY_LABEL))
def test_every_setting_was_measured(measured, label):
    settings = {(dtype, run) for dtype, run, *_ in measured["rows"][label]}
    assert settings == set(_runs(CASE_BY_LABEL[label]))
    assert all(got > 0 for *_, got, _ in measured["rows"][label])


AUTOCAST_LABELS = [
    label for label, case in CASE_BY_LABEL.items() if _autocast()[0] in case.extra_runs
]


@pytest.mark.parametrize("label", AUTOCAST_LABELS)
def test_autocast_per_token_part_within_tolerance(measured, label):
    """Under autocast the bf16 weight copies dominate a short sequence, so the per-token part is
    checked on its own: the growth from the shorter to the longer length, per token."""
    case = CASE_BY_LABEL[label]
    shapes = _layer_shapes(case.config())
    got = {
        (run.seq_len, index): saved
        for dtype, run, index, saved, _ in measured["rows"][label]
        if run.autocast and not run.checkpointing
    }
    short, long = SEQ_LENS
    for index, shape in enumerate(shapes):
        slope = (got[long, index] - got[short, index]) / (long - short)
        est = modelled_per_token(shape, probe.Run(long, autocast=True), "fp32")
        assert abs(slope / est - 1) <= TOLERANCE, f"layer {index}: {slope / est:.3f}"


@pytest.mark.parametrize(("label", "run"), RECOMPUTE_RUNS, ids=lambda v: str(v))
def test_recompute_working_set_within_tolerance(measured, label, run):
    got, est = measured["peaks"][(label, run)]
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
    # what autocast casts (every 2D weight: projections and routers) and the fused expert stacks
    weights = collections.Counter(p.dim() for p in layer.parameters())
    sizes = collections.Counter()
    for parameter in layer.parameters():
        sizes[parameter.dim()] += parameter.numel()
    assert set(weights) <= {1, 2, 3}
    return (
        (sizes[2], sizes[3]),
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
        (activations.linear_weight_params(shape), activations.expert_stack_params(shape)),
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


HEAD_DIM_TYPES = [name for name in model_shape.SUPPORTED_MODEL_TYPES if name != "deepseek_v3"]


def _one_layer(model_type: str, **attention) -> dict:
    """A one-layer config.json of a family, with one expert of each kind for the MoE ones."""
    return {
        "model_type": model_type,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "vocab_size": 64,
        "num_local_experts": 2,
        "num_experts": 2,
        "num_experts_per_tok": 1,
        "moe_intermediate_size": 64,
        **attention,
    }


def _on_meta(config: dict):
    """The model transformers builds from `config`, on the meta device (no memory)."""
    with torch.device("meta"), no_init_weights():
        return transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config)
        )


@pytest.mark.parametrize("model_type", HEAD_DIM_TYPES)
def test_head_dim_default_is_the_config_class_one(model_type):
    """A config.json without head_dim: the width of q_proj transformers builds, per head, is what
    activations.head_dim (the one table, also behind model_shape's counts) reads. Qwen3 and the
    Gemma family default to a fixed width, not hidden / heads."""
    config = _one_layer(model_type, hidden_size=512, num_attention_heads=8, num_key_value_heads=8)
    model = _on_meta(config)
    built = model.model.layers[0].self_attn.q_proj.out_features // 8
    assert activations.head_dim(config) == built
    assert model_shape.count_params(config).head_dim == built


@pytest.mark.parametrize("model_type", HEAD_DIM_TYPES)
def test_kv_heads_default_is_the_config_class_one(model_type):
    """A config.json without num_key_value_heads: Mistral, Qwen and Gemma configs default to a
    fixed count, Llama's to the head count. activations.kv_heads (also behind model_shape's counts
    and the vLLM KV cache) must read what transformers builds."""
    config = _one_layer(model_type, hidden_size=1024, num_attention_heads=32, head_dim=32)
    model = _on_meta(config)
    built = model.model.layers[0].self_attn.k_proj.out_features // 32
    assert activations.kv_heads(config) == built
    assert model_shape.count_params(config).kv_heads == built


MOE_LAYER_CASES = [
    ("deepseek-v3", {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1}),
    ("deepseek-v3", {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
                     "first_k_dense_replace": None}),
    ("qwen1.5-moe-a2.7b", {"num_experts": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3, 4]}),
    ("qwen3-30b-a3b", {"num_experts": 4, "decoder_sparse_step": 3, "mlp_only_layers": [0]}),
    ("mixtral-8x7b-v0.1", {"num_local_experts": 2}),
]  # fmt: skip


@pytest.mark.parametrize(("fixture", "overrides"), MOE_LAYER_CASES)
def test_moe_layers_are_the_ones_transformers_builds(fixture, overrides):
    """One rule for which layers are MoE (activations.is_moe_layer, also behind model_shape's
    parameter count), checked layer by layer against the modules transformers builds, and its
    loop-free count against the rule."""
    config = json.loads((CONFIGS / f"{fixture}.json").read_text())
    config.update(overrides, num_hidden_layers=7)
    config = {k: v for k, v in config.items() if v is not None}
    model = _on_meta(config)
    built = [hasattr(layer.mlp, "experts") for layer in model.model.layers]
    rule = [activations.is_moe_layer(config, i) for i in range(7)]
    assert rule == built, (rule, built)
    counted = activations._moe_layer_count(config, config["model_type"], 7)
    assert counted == sum(rule)
    assert model_shape.count_params(config).params == sum(p.numel() for p in model.parameters())


def test_peft_adapts_expert_stacks_for_all_linear_only_without_dropout():
    """What the estimator assumes for all-linear LoRA on Qwen3-MoE: peft 0.21.2 wraps the fused
    expert stacks (target_parameters, ParamWrapper), and only with lora_dropout=0."""
    model = probe.build_model(probe.load_config("qwen3-30b-a3b", num_experts=4), layers=1)
    config = peft.LoraConfig(r=4, lora_dropout=0.05, target_modules="all-linear")
    with pytest.raises(ValueError, match=r"does not work with lora_dropout != 0"):
        peft.get_peft_model(model, config)
    model = probe.build_model(probe.load_config("qwen3-30b-a3b", num_experts=4), layers=1)
    config = peft.LoraConfig(r=4, lora_dropout=0.0, target_modules="all-linear")
    wrapped = peft.get_peft_model(model, config).get_base_model()
    kinds = {type(module).__name__ for module in wrapped.model.layers[0].mlp.modules()}
    assert "ParamWrapper" in kinds
