"""scripts/estimate_memory.py against measured memory of real training steps (CPU).

Tiny randomly initialised Llama models (transformers 5.24, built from a config, nothing downloaded)
run two AdamW steps on the CPU while ``memtrack.StorageLog`` records every live tensor storage.
Peaks per category are compared with the script's ``ddp`` numbers for one GPU. The batch is
padded as TRL pads it (one sequence is a token shorter), so SDPA gets a mask.

Model states must match to ``STATE_TOLERANCE``: they are plain byte counts. Activations follow
the per-layer model of scripts/_scaling/activations.py (checked layer by layer in
test_activations_measured.py) composed as the estimator does: what the layers keep, what they
share, and the larger of the loss head's and one layer's backward. The whole activation peak
must fall in ``ACT_BAND``. Its upper end is set by checkpointing under autocast, whose peak is at
the end of the forward (autocast's cached weight copies, the plain loss's logits) and 1.2% above
the estimate; every other setting without adapters is within 0.5%. Its lower end by LoRA without
checkpointing: TRL calls ``enable_input_require_grads`` only with checkpointing, so the first
layer's input needs no gradient and that layer keeps less than the others, which the estimate
does not take off (4% of the peak at these four layers, less in a deeper model). The per-layer
part alone, the peak less that of the same model without decoder layers, must be within
``LAYER_TOLERANCE`` of the estimate's per-layer bytes, the issue's 10%. LoRA's dropout keeps its
mask in the adapter's dtype on a CPU, a byte per element on a GPU, so the estimate is made with
the CPU's mask here (memory.DROPOUT_MASK_BYTES = None).

The total is a sum of peaks that do not coincide (the gradients are not allocated yet when the
activations peak in the first step), so the estimate may only overstate it, by at most the
``TOTAL_BAND`` measured here. Run with ``-s`` to see the table of estimated and measured
gigabytes.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import script_modules  # noqa: E402  (tests/ is on sys.path via conftest.py)
from _scaling import memory, model_shape  # noqa: E402
from memtrack import StorageLog  # noqa: E402

# peft 0.21.2 reads transformers 5.24's deprecated ``is_gradient_checkpointing`` property
pytestmark = pytest.mark.filterwarnings(
    "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"
)

GB = 1e9

# Model states are byte counts: exact up to AdamW's scalar step tensors.
STATE_TOLERANCE = 0.02
# measured / estimated activation peak (see the module docstring for both ends)
ACT_BAND = (0.95, 1.02)
# measured / estimated activations of one decoder layer
LAYER_TOLERANCE = 0.10
# measured / estimated total peak: the estimate adds peaks that do not coincide
TOTAL_BAND = (0.80, 1.0)

SEQ_LEN, BATCH, STEPS = 256, 2, 2
MODEL = dict(
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=4096,
    tie_word_embeddings=False,
)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


em = script_modules.load("estimate_memory")


@dataclasses.dataclass(frozen=True)
class Setting:
    dtype: str = "fp32"  # "fp32": 4+4+8 B/param; "bf16": pure bf16, moments in bf16 (2+2+4)
    checkpointing: bool = False
    lora: bool = False
    autocast: bool = False  # bf16 autocast over fp32 weights: TRL's CLI default
    attention: str = "sdpa"
    layers: int = MODEL["num_hidden_layers"]

    def script_args(self) -> list:
        args = ["--trainer", "sft", "--dtype", self.dtype, "--optimizer", "adamw"]
        # fp32 has no separate master copy whatever --master-weights says (master_bytes is 0);
        # bf16 without master weights is what torch.optim.AdamW does on bf16 parameters.
        args += ["--master-weights", "none"]
        args += ["--seq-len", str(SEQ_LEN), "--batch-size", str(BATCH)]
        args += [
            "--gradient-checkpointing" if self.checkpointing else "--no-gradient-checkpointing"
        ]
        args += ["--attention", self.attention, "--no-fused-loss"]
        args += ["--gpus", "1", "--gpu-memory-gb", "80"]
        if self.autocast:
            args += ["--compute-dtype", "bf16"]
        if self.lora:  # TRL's ModelConfig: lora_dropout 0.05
            args += ["--tuning", "lora", "--lora-r", "8", "--lora-targets", ",".join(LORA_TARGETS)]
        return args


SETTINGS = {
    "bf16": Setting(dtype="bf16"),
    "bf16+gc": Setting(dtype="bf16", checkpointing=True),
    "bf16 eager": Setting(dtype="bf16", attention="eager"),
    "fp32": Setting(),
    "fp32+gc": Setting(checkpointing=True),
    "fp32+lora": Setting(lora=True),
    "fp32+lora+gc": Setting(lora=True, checkpointing=True),
    "autocast": Setting(autocast=True),
    "autocast+gc": Setting(autocast=True, checkpointing=True),
    "autocast+lora+gc": Setting(autocast=True, lora=True, checkpointing=True),
}
# Embedding, final norm and LM head only: the per-layer part is the difference.
HEAD_ONLY = {
    name: dataclasses.replace(SETTINGS[name], layers=0) for name in ("bf16", "fp32", "autocast")
}


def _config(layers: int, attention: str = "sdpa"):
    return transformers.LlamaConfig(
        **{**MODEL, "num_hidden_layers": layers}, attn_implementation=attention
    )


def estimate(setting: Setting):
    shape = model_shape.count_params(_config(MODEL["num_hidden_layers"]).to_dict())
    s = em.settings_from_args(em.build_parser().parse_args(setting.script_args()))
    return shape, s, memory.estimate_strategy(shape, s, "ddp")


def measure(setting: Setting) -> dict:
    """Two training steps as a TRL run would take them, with the categories of live storages."""
    torch.manual_seed(0)
    dtype = torch.bfloat16 if setting.dtype == "bf16" else torch.float32
    config = _config(setting.layers, setting.attention)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.train()
    if setting.checkpointing:
        model.config.use_cache = False
        model.activation_checkpointing_enable()  # gradient_checkpointing_enable is deprecated
    if setting.lora:  # TRL ModelConfig defaults: lora_alpha=32, lora_dropout=0.05
        config = peft.LoraConfig(
            r=8, lora_alpha=32, lora_dropout=0.05, target_modules=list(LORA_TARGETS)
        )
        model = peft.get_peft_model(model, config)
        if setting.checkpointing:  # as TRL does (sft_trainer.py:899)
            model.enable_input_require_grads()
    trainable = [p for p in model.parameters() if p.requires_grad]
    # TrainingArguments.optim defaults to adamw_torch_fused with torch >= 2.8
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=True)
    input_ids = torch.randint(0, MODEL["vocab_size"], (BATCH, SEQ_LEN))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, -1] = 0  # a padded batch, as TRL's collators make
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=setting.autocast)
    log = StorageLog()
    log.track(model.parameters(), "param")
    log.track(model.buffers(), "buffer")
    with log:
        for _ in range(STEPS):
            with autocast:  # accelerate wraps the model's forward only
                loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)
                loss = loss.loss
            loss.backward()
            del loss
            log.mark_grads(trainable)
            with log.labelled("opt"):
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    result = log.replay()
    result["numel"] = sum(p.numel() for p in model.parameters())
    return result


@pytest.fixture(scope="module")
def runs() -> dict:
    # One intra-op thread: byte counts do not depend on it, and on a loaded machine spinning
    # OpenMP workers cost ten times the compute.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(memory, "DROPOUT_MASK_BYTES", None)  # a CPU's dropout mask
            out = {
                name: (estimate(setting), measure(setting)) for name, setting in SETTINGS.items()
            }
        heads = {name: measure(setting)["peak"]["act"] for name, setting in HEAD_ONLY.items()}
    finally:
        torch.set_num_threads(threads)
    _print_table(out, heads)
    return {"settings": out, "heads": heads}


def _layer_measured(runs: dict, name: str) -> float:
    """Per-layer activations: (peak with all layers - peak of the head-only model) / layers."""
    measured = runs["settings"][name][1]["peak"]["act"]
    return (measured - runs["heads"][name]) / MODEL["num_hidden_layers"]


def _layer_estimated(shape, s) -> float:
    return memory.decoder_kept_bytes(shape, s) / MODEL["num_hidden_layers"]


def _rows(out: dict, heads: dict) -> list:
    rows = []
    for name, ((shape, s, est), got) in out.items():
        peak = got["peak"]
        rows += [
            (name, "weights", est.weights, peak["param"]),
            (name, "gradients", est.gradients, peak["grad"]),
            (name, "optimizer", est.optimizer, got["current"]["opt"]),
            (name, "activations", est.activations, peak["act"]),
            (name, "total (peak)", est.total, got["total_peak"]),
        ]
        if name in heads:
            layer = (peak["act"] - heads[name]) / shape.layers
            rows.append((name, "  per layer", _layer_estimated(shape, s), layer))
    return rows


def _print_table(out: dict, heads: dict) -> None:
    sbh = SEQ_LEN * BATCH * MODEL["hidden_size"]
    lines = [f"{'setting':<16} | {'component':<13} | {'est GB':>8} | {'meas GB':>8} | ratio"]
    for name, component, est, got in _rows(out, heads):
        ratio = got / est if est else float("nan")
        line = f"{name:<16} | {component:<13} | {est / GB:8.4f} | {got / GB:8.4f} | {ratio:5.3f}"
        if component == "  per layer":
            line += f"  ({got / sbh:.1f} vs {est / sbh:.1f} bytes per s*b*h)"
        lines.append(line)
    print("\nestimate_memory.py (ddp, 1 GPU) vs measured on CPU, two AdamW steps:")
    print("\n".join(lines))


@pytest.mark.parametrize("name", list(SETTINGS))
def test_model_states_match_measured_bytes(runs, name):
    (_, _, est), got = runs["settings"][name]
    assert got["peak"]["param"] == pytest.approx(est.weights, rel=STATE_TOLERANCE)
    assert got["peak"]["grad"] == pytest.approx(est.gradients, rel=STATE_TOLERANCE)
    # optimizer states left after the step; the fused step allocates no temporaries beyond them
    assert got["current"]["opt"] == pytest.approx(est.optimizer, rel=STATE_TOLERANCE)
    assert got["peak"]["opt"] == pytest.approx(est.optimizer, rel=STATE_TOLERANCE)
    assert got["current"]["act"] == 0 and got["current"]["grad"] == 0  # nothing leaked


@pytest.mark.parametrize("name", list(SETTINGS))
def test_activation_peak_within_band(runs, name):
    (_, _, est), got = runs["settings"][name]
    ratio = got["peak"]["act"] / est.activations
    low, high = ACT_BAND
    assert low <= ratio <= high, f"{name}: measured/estimated = {ratio:.3f}"


@pytest.mark.parametrize("name", list(HEAD_ONLY))
def test_per_layer_activations_within_tolerance(runs, name):
    (shape, s, _), _ = runs["settings"][name]
    ratio = _layer_measured(runs, name) / _layer_estimated(shape, s)
    assert abs(ratio - 1) <= LAYER_TOLERANCE, f"{name}: per-layer ratio {ratio:.3f}"


def test_checkpointing_reduces_measured_and_estimated_activations(runs):
    for plain, ckpt in (("fp32", "fp32+gc"), ("autocast", "autocast+gc")):
        plain, ckpt = runs["settings"][plain], runs["settings"][ckpt]
        assert ckpt[0][2].activations < plain[0][2].activations
        assert ckpt[1]["peak"]["act"] < plain[1]["peak"]["act"]


@pytest.mark.parametrize("name", list(SETTINGS))
def test_total_peak_within_band(runs, name):
    (_, _, est), got = runs["settings"][name]
    ratio = got["total_peak"] / est.total
    low, high = TOTAL_BAND
    assert low <= ratio <= high, f"{name}: total ratio {ratio:.3f}"
