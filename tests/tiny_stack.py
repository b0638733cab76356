"""A tiny, randomly initialised stack for running TRL, transformers and accelerate on CPU.

Everything is built in-process from configs: a word-level tokenizer, a two-layer Llama, small
in-memory datasets, and accelerate's own launcher functions turned into the environment a
launched process would see. Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

VOCAB = ["<pad>", "<eos>", "<unk>", *(f"w{i}" for i in range(61))]


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def llama_config(layers: int = 2):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=len(VOCAB),
        pad_token_id=0,
        eos_token_id=1,
    )


def llama(layers: int = 2):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(llama_config(layers))


def saved_llama(directory: Path) -> str:
    """A tiny Llama and its tokenizer saved to `directory`: a local model id, no download."""
    llama().save_pretrained(directory)
    tokenizer().save_pretrained(directory)
    return str(directory)


def text_dataset():
    from datasets import Dataset

    return Dataset.from_dict({"text": ["w1 w2 w3 w4", "w5 w6 w7"]})


def prompt_dataset():
    from datasets import Dataset

    return Dataset.from_dict({"prompt": ["w1 w2 w3", "w4 w5"]})


def preference_dataset():
    from datasets import Dataset

    return Dataset.from_dict(
        {"prompt": ["w1 w2", "w3 w4"], "chosen": ["w5 w6", "w7"], "rejected": ["w8", "w9 w10"]}
    )


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


@contextlib.contextmanager
def environment(env: dict[str, str]):
    """os.environ updated with `env` inside the block, restored afterwards."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


LAUNCHERS = ("simple_launcher", "multi_gpu_launcher", "deepspeed_launcher")


def launched(yaml_text: str, tmp_path: Path, *flags: str):
    """Run accelerate's own `launch_command` for `accelerate launch --config_file <yaml> [flags]
    train.py` up to the point where it starts processes. Returns (launcher name, its args)."""
    from unittest import mock

    import accelerate.commands.launch as launch

    config = tmp_path / "accelerate.yaml"
    config.write_text(yaml_text, encoding="utf-8")
    args = launch.launch_command_parser().parse_args(
        ["--config_file", str(config), *flags, "train.py"]
    )
    chosen = {}
    with contextlib.ExitStack() as stack:
        for name in LAUNCHERS:
            stack.enter_context(
                mock.patch.object(launch, name, lambda a, name=name: chosen.update({name: a}))
            )
        launch.launch_command(args)
    ((name, launched_args),) = chosen.items()
    return name, launched_args


def launch_env(yaml_text: str, tmp_path: Path, *flags: str) -> dict[str, str]:
    """The environment `accelerate launch` gives each process of a FSDP, DDP or DeepSpeed run."""
    from accelerate.utils import prepare_multi_gpu_env
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    name, args = launched(yaml_text, tmp_path, *flags)
    if name == "deepspeed_launcher":
        return prepare_deepspeed_cmd_env(args)[1]
    assert name == "multi_gpu_launcher", name
    return prepare_multi_gpu_env(args)
