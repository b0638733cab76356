"""Bytes autograd saves for backward in the decoder layers of a transformers model (CPU).

A model is built with random weights from a published config.json in ``fixtures/model_configs``
(transformers 5.24, nothing downloaded) and its decoder runs one forward pass under
``torch.autograd.graph.saved_tensors_hooks``. Every tensor autograd packs is reduced to its
storage: a view or slice keeps its whole storage alive, so the storage's bytes are counted, once,
however many views of it are saved. Parameter storages are left out (they are model states, not
activations). With gradient checkpointing the hooks see what the checkpoint keeps: non-reentrant
``torch.utils.checkpoint`` packs the tensor inputs of each checkpointed layer through the same hooks
(``_CheckpointFrame.save_inputs``), while the layer's own saves go to the checkpoint's hooks.

Per-layer bytes come from differences of layer counts, which cancel the embedding, rotary tables,
masks and final norm: the model is built with ``MAX_LAYERS`` layers and run with
``config.num_hidden_layers`` set lower, which every decoder used here honours
(``for decoder_layer in self.layers[: self.config.num_hidden_layers]``, e.g.
transformers/models/llama/modeling_llama.py:393).

Weights are not initialised (``transformers.initialization.no_init_weights``) but zeroed, except
the small embedding and MoE router weights, which get random values so tokens spread over experts:
saved bytes depend on shapes, not on values, and this keeps a 7B-shaped layer cheap to build.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.initialization import no_init_weights  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "model_configs"
MAX_LAYERS = 2
# The vocabulary only sizes the embedding and LM head, which the layer differences cancel.
PROBE_VOCAB = 512
# Weights with fewer elements than this get random values (embedding, routers); larger ones zeros.
RANDOM_INIT_MAX_NUMEL = 1 << 20
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def load_config(name: str, **overrides) -> dict:
    """The published config.json of fixture ``name`` (text part only) with ``overrides`` applied."""
    config = json.loads((FIXTURES / f"{name}.json").read_text())
    if "text_config" in config and "hidden_size" not in config:
        config = config["text_config"]
    return {**config, **overrides}


def build_model(config: dict, dtype: str = "bf16", layers: int = MAX_LAYERS):
    """A randomly initialised ``*ForCausalLM`` of ``config`` with ``layers`` decoder layers."""
    config = {**config, "num_hidden_layers": layers, "vocab_size": PROBE_VOCAB}
    for token in ("bos_token_id", "eos_token_id", "pad_token_id"):
        config.pop(token, None)  # ids of the real vocabulary would be out of range
    hf_config = transformers.AutoConfig.for_model(**config)
    torch.manual_seed(0)
    with no_init_weights():
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=DTYPES[dtype])
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.numel() < RANDOM_INIT_MAX_NUMEL and parameter.dim() > 1:
                parameter.normal_(0.0, 0.02)
    return model.train()


class SavedStorages:
    """Pack hook that records the storage of every tensor saved for backward."""

    def __init__(self, excluded: set) -> None:
        self.excluded = excluded
        self.nbytes: dict = {}  # storage data_ptr -> bytes
        self.records: list = []  # (data_ptr, shape, dtype) of each saved tensor, for describe()

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.excluded and storage.nbytes():
            self.nbytes[key] = storage.nbytes()
            self.records.append((key, tuple(tensor.shape), tensor.dtype))
        return tensor  # the graph keeps the tensor (and its storage) alive until it is freed

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @property
    def total(self) -> int:
        return sum(self.nbytes.values())


@dataclass(frozen=True)
class Run:
    """One measurement setting, batch 1."""

    seq_len: int
    attention: str = "sdpa"  # "sdpa" or "eager"
    checkpointing: bool = False
    padded: bool = False  # one left-padding position, so SDPA gets a mask
    autocast: bool = False  # bf16 autocast over the model's (fp32) weights, as accelerate runs it


@contextlib.contextmanager
def _configured(model, run: Run, layers: int):
    model.set_attn_implementation(run.attention)
    previous = model.config.num_hidden_layers
    model.config.num_hidden_layers = layers
    if run.checkpointing:
        # TRL 1.16.0 leaves activation_checkpointing_kwargs at None, and transformers 5.24 then
        # passes {"use_reentrant": False} (modeling_utils.py:3158).
        model.activation_checkpointing_enable()
    try:
        yield
    finally:
        model.config.num_hidden_layers = previous
        if run.checkpointing:
            model.activation_checkpointing_disable()


def saved_bytes(model, run: Run, layers: int) -> SavedStorages:
    """Storages saved for backward by one forward of the decoder running its first ``layers``."""
    excluded = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = SavedStorages(excluded)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, PROBE_VOCAB, (1, run.seq_len), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[:, 0] = 0 if run.padded else 1
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=run.autocast)
    with _configured(model, run, layers), autocast:
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
            out = model.model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
        del out  # frees the graph; the byte counts are already taken
    return saved


def layer_bytes(model, run: Run, layers: int = MAX_LAYERS) -> list:
    """Bytes saved by each of the first ``layers`` decoder layers: differences of layer counts."""
    totals = [saved_bytes(model, run, n).total for n in range(layers + 1)]
    return [after - before for before, after in zip(totals, totals[1:])]


def describe(model, run: Run, layers: int = 1) -> str:
    """The saved storages of a run, largest first, as bytes per token per hidden unit."""
    saved = saved_bytes(model, run, layers)
    scale = run.seq_len * model.config.hidden_size
    shapes = {}
    for key, shape, dtype in saved.records:
        shapes.setdefault(key, f"{shape} {str(dtype).removeprefix('torch.')}")
    lines = [
        f"{saved.nbytes[key] / scale:9.4f}  {shapes[key]}"
        for key in sorted(saved.nbytes, key=saved.nbytes.get, reverse=True)
    ]
    return "\n".join(lines + [f"{saved.total / scale:9.4f}  total"])


# The reference points of issue 9 (published configs, full expert count): run this file.
REFERENCE_POINTS = (("llama-3.1-8b", 1024), ("qwen3-0.6b", 1024), ("qwen3-30b-a3b", 512))


def main() -> None:
    torch.set_num_threads(1)
    print("bytes per token per hidden unit saved by decoder layer 2 (bf16, batch 1, SDPA):")
    for name, seq_len in REFERENCE_POINTS:
        model = build_model(load_config(name))
        for checkpointing in (False, True):
            per_layer = layer_bytes(model, Run(seq_len, checkpointing=checkpointing))[-1]
            label = "checkpointed" if checkpointing else "no checkpointing"
            scale = seq_len * model.config.hidden_size
            print(f"  {name:16} s={seq_len:<5} {label:17} {per_layer / scale:7.2f}")
        del model


if __name__ == "__main__":
    main()
