"""The preflight's embedded knowledge against the installed libraries: the argument tables of
TRL 1.16.0, accelerate 1.15.0 and torchrun (field names, types, defaults, choices), TRL's shipped
accelerate configs, and the parsers rebuilt from those tables, which must accept, convert and
refuse exactly what the real parsers do, with the same error line."""

from __future__ import annotations

import contextlib
import importlib
import io

import launch_tables_source
import pytest
import script_modules
from _scaling import arg_parsers, launch, launch_tables

TRL_CASES = [
    [],
    ["--per_device_train_batch_size", "4", "--learning_rate", "1e-5", "--bf16", "true"],
    ["--no_gradient_checkpointing", "--num_processes", "4", "--accelerate_config", "zero2"],
    ["--gradient-checkpointing", "false", "--lora_target_modules", "q_proj", "lm_head"],
    ["--learning_r", "3e-4"],  # argparse's abbreviation: TRL's parser keeps it
    ["--learnig_rate", "3e-4"],  # unknown: left for accelerate launch
    ["--per_device_train_batch_size", "two"],
    ["--bf16"],  # a bool | None field needs a value
    ["--lr_scheduler_type", "bogus"],
    ["--gradient_checkpointing", "maybe"],
    ["--torch_empty_cache_steps", "none", "--max_length", "null"],
    ["--liger_kernel_config", '{"fused_linear_cross_entropy": true}'],
    ["--parallelism_config", '{"cp_size": 2}'],
    ["--use_peft", "--load_in_4bit", "--dtype", "bfloat16", "--fsdp"],
]
ONLINE_CASES = [
    ["--use_vllm", "--vllm_mode", "server", "--num_generations", "4", "--vllm_server_port", "8001"],
    ["--num_generations", "four"],
    ["--steps_per_generation", "2", "--generation_batch_size", "16"],
]
ACCELERATE_CASES = [
    ["--num_processes", "4", "--multi_gpu", "train.py", "--lr", "1"],
    ["--num-processes", "4", "--use_fsdp", "--fsdp_version", "2", "t.py"],
    ["--config_file", "c.yaml", "--mixed_precision", "fp16", "t.py"],
    ["--mixed_precision", "fp4", "t.py"],
    ["--num_proc", "4", "t.py"],  # accelerate turns abbreviations off
    ["--num_processes", "x", "t.py"],
    ["--learnig_rate", "3", "t.py", "--a"],
    ["--zero_stage", "3", "--use_deepspeed", "--gradient_accumulation_steps", "4", "t.py"],
    ["--parallelism_config_cp_size", "2", "--use_parallelism_config", "t.py"],
]


def test_tables_match_the_installed_packages():
    """Regenerate the module from the installed TRL/accelerate/torch and compare every byte:
    a renamed field, a new default, a changed choice or type fails here."""
    committed = (script_modules.PACKAGE / "launch_tables.py").read_text(encoding="utf-8")
    assert committed == launch_tables_source.render_module()


def test_tables_describe_the_pinned_releases():
    assert launch_tables.TRL_RELEASE == "1.16.0"
    assert launch_tables.ACCELERATE_RELEASE == "1.15.0"
    assert set(launch_tables.SHIPPED_CONFIGS) == {
        "single_gpu", "multi_gpu", "zero1", "zero2", "zero3", "fsdp1", "fsdp2",
    }  # fmt: skip
    assert all(c["num_processes"] == 8 for c in launch_tables.SHIPPED_CONFIGS.values())


def test_table_comparison_fails_on_a_changed_default(monkeypatch):
    """The byte comparison is not vacuous: one default changed in a spec changes the module."""
    common = list(launch_tables_source.trl_parser_specs()[0])
    index = next(i for i, s in enumerate(common) if s[0] == "per_device_train_batch_size")
    common[index] = (*common[index][:2], 4, *common[index][3:])
    original = launch_tables_source.trl_parser_specs
    monkeypatch.setattr(
        launch_tables_source, "trl_parser_specs", lambda: (tuple(common), original()[1])
    )
    committed = (script_modules.PACKAGE / "launch_tables.py").read_text(encoding="utf-8")
    assert committed != launch_tables_source.render_module()


def _outcome(parser, args: list, known: bool = True) -> tuple:
    """(values, remaining) or the error line argparse prints, for a real or rebuilt parser."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            if known:
                namespace, rest = parser.parse_known_args(args)
            else:
                namespace, rest = parser.parse_args(args), []
    except SystemExit:
        return ("error", stderr.getvalue().strip().splitlines()[-1])
    except arg_parsers.ArgumentFailure as exc:
        return ("error", str(exc))
    values = {k: v for k, v in vars(namespace).items() if k not in ("_given", "nondefault")}
    return (sorted((k, repr(v)) for k, v in values.items()), rest)


@pytest.fixture(scope="module")
def real_trl_parsers():
    return {
        name: importlib.import_module(f"trl.scripts.{name}").make_parser(prog=f"trl {name}")
        for name in launch_tables.TRAINERS
    }


@pytest.mark.parametrize("trainer", launch_tables.TRAINERS)
def test_rebuilt_trl_parser_parses_like_trl(real_trl_parsers, trainer):
    cases = TRL_CASES + (ONLINE_CASES if trainer in ("grpo", "rloo", "distillation") else [])
    mine = arg_parsers.trl_parser(trainer, f"trl {trainer}")
    for args in cases:
        assert _outcome(mine, args) == _outcome(real_trl_parsers[trainer], args), args


def test_rebuilt_accelerate_parser_parses_like_accelerate():
    from accelerate.commands.launch import launch_command_parser

    real = launch_command_parser()
    for args in ACCELERATE_CASES:
        mine = arg_parsers.accelerate_launch_parser()
        assert _outcome(mine, args, known=False) == _outcome(real, args, known=False), args


def test_rebuilt_accelerate_parser_records_what_the_command_line_set():
    """accelerate merges a config file key only where the flag was not given (`nondefault`)."""
    from accelerate.commands.launch import launch_command_parser

    args = ["--num_processes", "4", "--fsdp_version", "2", "--use_fsdp", "t.py"]
    real = launch_command_parser().parse_args(args)
    _, given, _, _, _ = launch.parse_launch_args(args)
    assert given == real.nondefault - {"training_script", "training_script_args"}
    assert "fsdp_version" in given


def test_rebuilt_torchrun_parser_parses_like_torchrun():
    from torch.distributed.run import get_args_parser

    for args in (
        ["--nproc-per-node", "4", "--nnodes", "2", "--node_rank", "1", "train.py", "--x"],
        ["--standalone", "--nproc_per_node=gpu", "t.py"],
    ):
        real = get_args_parser().parse_args(args)
        mine = arg_parsers.build_parser(launch_tables.TORCHRUN, "torchrun").parse_args(args)
        for key in ("nproc_per_node", "nnodes", "node_rank", "training_script", "standalone"):
            assert getattr(mine, key) == getattr(real, key), (args, key)


def test_shipped_config_falls_back_to_the_embedded_copy(monkeypatch):
    """Without TRL installed the embedded copy is used, and it equals the installed files."""
    installed = launch.shipped_config("zero1")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert launch.shipped_config("zero1") == installed
    assert launch.shipped_config("nope") is None
