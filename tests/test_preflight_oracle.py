"""The preflight's predictions against the real libraries, on the same plans (CPU, no downloads):

- `trl <cmd>` runs for real (trl.cli.main) with only accelerate's process launchers replaced by a
  recorder, on the planned machine's GPU count: its argument split, `--accelerate_config`, the
  config built in the `trl` process and accelerate's launch resolution are the libraries' own;
- `accelerate launch` arguments go through accelerate's parser and _validate_launch_command;
- each launched process's config is built by TRL's parser with the planned world size;
- trainer init on a tiny random Llama (tests/tiny_stack.py) where the failure happens there;
- and the preflight, judged with the embedded table only (--trl no), must predict the same outcome
  and the same message. The child that parses with the installed TRL is checked the same way.

Rules that need GPUs are tested on recorded facts (test_preflight_plans.py); their cited source
lines are re-read in the installed packages at the end of this file."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import types
from pathlib import Path

import pytest
import tiny_stack as ts
from preflight_support import finding, judge, machine
from test_preflight_plans import PLANS_SUITE

pytestmark = pytest.mark.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
SITE = Path(importlib.util.find_spec("trl").origin).parents[1]
SUITE = {c[0]: c[1:] for c in PLANS_SUITE}
LAUNCHERS = {
    "multi_gpu_launcher": None,  # FSDP or MULTI_GPU: told apart by use_fsdp
    "deepspeed_launcher": "DEEPSPEED",
    "simple_launcher": "NO",
}


# --------------------------------------------------------------------------------------
# The real libraries, on the planned machine
# --------------------------------------------------------------------------------------


@pytest.fixture
def on_target(monkeypatch, tmp_path):
    """Answer the device questions for a recorded machine: the GPU count accelerate reads when
    no config file sets num_processes, and the bf16/tf32 support TRL's config checks."""
    import accelerate.commands.launch as accelerate_launch
    import transformers.training_args as training_args
    from _scaling import plan

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(accelerate_launch, "default_config_file", str(tmp_path / "none.yaml"))

    def apply(facts: dict):
        answers = plan.target_answers(facts)
        count = len((facts.get("accelerators") or {}).get("devices") or [])
        cuda = types.SimpleNamespace(is_available=lambda: count > 0, device_count=lambda: count)
        monkeypatch.setattr(accelerate_launch, "torch", types.SimpleNamespace(cuda=cuda))
        monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: answers["bf16"])
        monkeypatch.setattr(training_args, "is_torch_tf32_available", lambda: answers["tf32"])
        return answers

    return apply


@contextlib.contextmanager
def recorded_launch(monkeypatch):
    """accelerate's launchers replaced by a recorder: what would start, never started."""
    import accelerate.commands.launch as accelerate_launch

    record: dict = {}
    for name in LAUNCHERS:
        monkeypatch.setattr(
            accelerate_launch, name, lambda args, name=name: record.update(name=name, args=args)
        )
    yield record


def run_trl(argv: list, monkeypatch) -> dict:
    """`trl <argv>` for real: {error} or {launcher, args}."""
    from trl.cli.main import main

    stderr = io.StringIO()
    with recorded_launch(monkeypatch) as record, contextlib.redirect_stderr(stderr):
        try:
            main(list(argv))
        except SystemExit:
            return {"error": stderr.getvalue().strip().splitlines()[-1]}
        except Exception as exc:  # the library's own refusal, to compare with the prediction
            return {"error": str(exc)}
    return dict(record)


def run_accelerate(argv: list, monkeypatch) -> dict:
    """`accelerate launch <argv>`: parser, _validate_launch_command and the launcher choice."""
    from accelerate.commands.launch import launch_command, launch_command_parser

    stderr = io.StringIO()
    with recorded_launch(monkeypatch) as record, contextlib.redirect_stderr(stderr):
        try:
            launch_command(launch_command_parser().parse_args(list(argv)))
        except SystemExit:
            return {"error": stderr.getvalue().strip().splitlines()[-1]}
        except Exception as exc:
            return {"error": str(exc)}
    return dict(record)


def build_config(trainer: str, args: list, world: int, monkeypatch, env: dict | None = None):
    """What each launched process does first: TRL's script parser at the planned world size
    (argparse names it after the script file: sft.py), in the environment the launcher gives
    it (`env`: accelerate's ACCELERATE_*/FSDP_* variables, which the config's checks read)."""
    from transformers import TrainingArguments

    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: world))
    parser = importlib.import_module(f"trl.scripts.{trainer}").make_parser(prog=f"{trainer}.py")
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), ts.environment(env or {}):
            return parser.parse_args_and_config(list(args), fail_with_unknown_args=False), None
    except SystemExit:
        return None, stderr.getvalue().strip().splitlines()[-1]
    except ImportError as exc:
        if "deepspeed" in str(exc).lower():  # past accelerate's checks; DeepSpeed is not here
            return None, None
        return None, str(exc)
    except Exception as exc:
        return None, str(exc)


def launched_env(record: dict) -> dict | str:
    """The environment accelerate's chosen launcher gives each process, or its error."""
    from accelerate.utils import prepare_multi_gpu_env
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_simple_launcher_cmd_env

    name, args = record["name"], record["args"]
    try:
        if name == "deepspeed_launcher":
            return prepare_deepspeed_cmd_env(args)[1]
        if name == "multi_gpu_launcher":
            return prepare_multi_gpu_env(args)
        return prepare_simple_launcher_cmd_env(args)[1]
    except Exception as exc:
        return str(exc)


def distributed_type(record: dict) -> str:
    kind = LAUNCHERS[record["name"]]
    if kind is None:
        return "FSDP" if record["args"].use_fsdp else "MULTI_GPU"
    return kind


def predicted_errors(report: dict) -> dict:
    return {f["message"]: f["id"] for f in report["findings"] if f["severity"] == "error"}


def predicted(error: str, errors: dict) -> bool:
    """The library's message is one the preflight predicted: the same text, or, for a message
    of several lines, its first line word for word inside the prediction."""
    first = error.strip().splitlines()[0]
    return error in errors or any(first in message for message in errors)


def assert_same_launch(record: dict, report: dict) -> None:
    plan, args = report["plan"], record["args"]
    assert distributed_type(record) == plan["distributed_type"]
    if plan["distributed_type"] != "NO":
        assert args.num_processes == plan["world_size"]
        assert args.num_machines == plan["num_machines"]
    accelerate = plan["accelerate"]
    # accelerate 1.15.0 commands/launch.py:1287: an unset mixed_precision launches as "no"
    assert args.mixed_precision == (accelerate.get("mixed_precision") or "no")
    for key, value in (accelerate.get("fsdp_config") or {}).items():
        assert getattr(args, key) == value, key
    for key, value in (accelerate.get("deepspeed_config") or {}).items():
        assert getattr(args, key) == value, key


# --------------------------------------------------------------------------------------
# `trl <cmd>`: the command as a whole
# --------------------------------------------------------------------------------------

TRL_PLANS = [
    "single-gpu-sft", "2x24gb-ddp", "2x24gb-default-launch-lora", "4xa100-zero3",
    "4xa100-fsdp2", "4xa100-fsdp2-own-checkpointing", "4xa100-zero1-no-accumulation",
    "4xa100-recipe-num-processes", "8xh100-grpo-colocate", "8xh100-grpo-colocate-tp2",
    "two-nodes", "shipped-8-on-2", "visible-devices-hide-gpus", "single-gpu-config-on-4",
    "typo-to-accelerate", "recipe-typo-to-accelerate", "bad-int", "bool-none-needs-value",
    "config-name", "fsdp-checkpointing-twice", "fsdp1-values-on-fsdp2", "zero1-accumulation",
    "grpo-groups-in-trl-process", "grpo-global-batch", "grpo-both-set", "grpo-eval-groups",
    "rloo-one-generation", "grpo-auto-batch", "grpo-recipe-parallelism", "colocate-tp-3-of-8",
    "vllm-mode-typo", "lora-on-lm-head", "4bit-and-8bit", "fp16-and-bf16", "bf16-on-cpu",
    "tf32-on-ampere", "fp8-on-ampere", "liger", "no-dataset", "cpu-with-use-cpu",
    "json-argument", "json-argument-sound",
]  # fmt: skip
# Findings that only show after the launch (model load, trainer init, first step) or on a GPU:
# the `trl` process and the configs build without them.
LATER_STAGES = ("model load", "trainer init", "first step", "weight sync")


@pytest.mark.parametrize("name", TRL_PLANS)
def test_trl_command_as_trl_runs_it(name, monkeypatch, on_target):
    machines, command, _ = SUITE[name]
    env = {
        k: v for c in command if "=" in c and not c.startswith("-") for k, v in [c.split("=", 1)]
    }
    argv = [c for c in command if c not in (f"{k}={v}" for k, v in env.items())]
    report = judge(command, machines)
    facts = machine(machines[0])[1]
    if env.get("CUDA_VISIBLE_DEVICES"):
        facts = dict(facts, accelerators=dict(facts["accelerators"], devices=[
            d for d in facts["accelerators"]["devices"]
            if str(d["index"]) in env["CUDA_VISIBLE_DEVICES"].split(",")
        ]))  # fmt: skip
    on_target(facts)
    outcome = run_trl(argv[1:], monkeypatch)
    errors = predicted_errors(report)
    if "error" in outcome:
        assert predicted(outcome["error"], errors), (outcome["error"], errors)
        return
    assert_same_launch(outcome, report)
    # Then each launched process builds the config at the planned world size.
    trainer = argv[1]
    script_args = outcome["args"].training_script_args
    world = report["plan"]["world_size"]
    config, error = build_config(trainer, script_args, world, monkeypatch)
    if error:
        assert predicted(error, errors), (error, errors)
        return
    if name == "no-dataset":
        return  # its error comes from the script's main(), tested below
    early = {m for m, i in errors.items() if _finding_stage(report, i) not in LATER_STAGES}
    assert early == set(), early
    assert (
        config[1].per_device_train_batch_size
        == report["plan"]["trl"]["per_device_train_batch_size"]
    )


def _finding_stage(report: dict, rule_id: str) -> str:
    return next(f["stage"] for f in report["findings"] if f["id"] == rule_id)


def test_trl_process_world_size_is_one(monkeypatch, on_target):
    """The heart of the world-size rule, shown with the real CLI: 2 x 4 processes would make 8
    completions, but `trl grpo` builds GRPOConfig before launching, in one process."""
    machines, command, _ = SUITE["grpo-groups-in-trl-process"]
    on_target(machine(machines[0])[1])
    outcome = run_trl(command[1:], monkeypatch)
    assert outcome == {
        "error": "generation_batch_size (2) must be divisible by num_generations (8)."
    }
    # The same arguments launched by accelerate: each process has world size 4, and it builds.
    script_args = [a for a in command[2:] if a not in ("--num_processes", "4")]
    _, error = build_config("grpo", script_args, 4, monkeypatch)
    assert error is None


# --------------------------------------------------------------------------------------
# `accelerate launch`, torchrun and python: launch, then TRL's script in each process
# --------------------------------------------------------------------------------------

ACCELERATE_PLANS = [
    "4xa100-accelerate-trl-script", "4xa100-accelerate-grpo-world-4", "4xa100-deepspeed-json",
    "trl-script-bad-int",
    "2x24gb-sft-context-parallel", "trl-script-typo", "config-unknown-key", "flags-conflict",
    "multi-gpu-one-process", "parallelism-flag", "num-processes-unset", "one-gpu-id",
    "deepspeed-json-and-keys", "grpo-groups-at-world-4", "grpo-context-parallel",
    "sft-packing-context-parallel", "parallelism-keys-unprefixed", "parallelism-size-mismatch",
]  # fmt: skip


@pytest.mark.parametrize("name", ACCELERATE_PLANS)
def test_accelerate_launch_as_accelerate_runs_it(name, monkeypatch, on_target):
    machines, command, _ = SUITE[name]
    report = judge(command, machines)
    on_target(machine(machines[0])[1])
    outcome = run_accelerate(command[2:], monkeypatch)
    errors = predicted_errors(report)
    if "error" in outcome:
        assert predicted(outcome["error"], errors), (outcome["error"], errors)
        return
    assert_same_launch(outcome, report)
    # The plans name a DeepSpeed JSON next to the command, as on the target (cwd: tmp_path).
    Path("ds.json").write_text('{"zero_optimization": {"stage": 3}}', encoding="utf-8")
    env = launched_env(outcome)
    if isinstance(env, str):  # the launcher itself refuses (prepare_*_env)
        assert predicted(env, errors), (env, errors)
        return
    trainer = Path(outcome["args"].training_script).stem
    world = report["plan"]["world_size"]
    args = outcome["args"].training_script_args
    _, error = build_config(trainer, args, world, monkeypatch, env)
    if error:
        assert predicted(error, errors), (error, errors)
        return
    early = {m for m, i in errors.items() if _finding_stage(report, i) not in LATER_STAGES}
    assert early == set(), early


def test_torchrun_world_size(monkeypatch):
    from torch.distributed.run import config_from_args, get_args_parser

    machines, command, _ = SUITE["4xa100-torchrun"]
    report = judge(command, machines)
    config, *_ = config_from_args(get_args_parser().parse_args(command[1:]))
    assert config.nproc_per_node * config.max_nodes == report["plan"]["world_size"] == 4


def test_parallelism_total_size_as_accelerate_checks_it():
    from accelerate.parallelism_config import ParallelismConfig

    report = judge(*reversed(SUITE["parallelism-size-mismatch"][:2]))
    accelerator = types.SimpleNamespace(multi_device=True, num_processes=8, is_fsdp2=True)
    with pytest.raises(ValueError) as raised:
        ParallelismConfig(cp_size=2)._validate_accelerator(accelerator)
    assert finding(report, "parallelism-size-mismatch")["message"] == str(raised.value)


def test_fsdp2_reshard_text_as_accelerate_converts_it():
    from accelerate.utils import str_to_bool

    report = judge(*reversed(SUITE["fsdp1-values-on-fsdp2"][:2]))
    with pytest.raises(ValueError) as raised:
        str_to_bool("FULL_SHARD".lower())
    assert str(raised.value) in finding(report, "fsdp2-reshard-not-bool")["message"]


# --------------------------------------------------------------------------------------
# Trainer init and the training script's main(), on a tiny random model
# --------------------------------------------------------------------------------------


def test_lora_on_lm_head_as_the_trainer_refuses_it(monkeypatch, on_target):
    import tiny_stack
    from trl import SFTTrainer, get_peft_config

    machines, command, _ = SUITE["lora-on-lm-head"]
    report = judge(command, machines)
    on_target({"accelerators": {"kind": "cpu", "devices": []}})
    (_, args, model_args, _), error = build_config(
        "sft", [*command[2:], "--use_cpu", "--bf16", "false", "--output_dir", "out"], 1,
        monkeypatch,
    )  # fmt: skip
    assert error is None
    with pytest.raises(ValueError) as raised:
        SFTTrainer(
            model=tiny_stack.llama(), args=args, train_dataset=tiny_stack.text_dataset(),
            processing_class=tiny_stack.tokenizer(), peft_config=get_peft_config(model_args),
        )  # fmt: skip
    assert finding(report, "lora-on-lm-head")["message"] == str(raised.value)
    sound = judge(*reversed(SUITE["lora-without-lm-head"][:2]))
    assert "lora-on-lm-head" not in {f["id"] for f in sound["findings"]}


def test_missing_dataset_as_the_script_refuses_it(monkeypatch, on_target):
    from trl.scripts import sft

    machines, command, _ = SUITE["no-dataset"]
    report = judge(command, machines)
    on_target(machine(machines[0])[1])
    parsed, error = build_config("sft", command[2:], 1, monkeypatch)
    assert error is None
    with pytest.raises(ValueError) as raised:
        sft.main(*parsed)
    assert finding(report, "dataset-missing")["message"] == str(raised.value)


def test_bf16_and_tf32_on_this_cpu_as_transformers_refuses_them():
    """This test machine has no GPU: TRL's config refuses bf16 here exactly as the preflight
    predicts for the recorded CPU-only machine (no device answer patched)."""
    from trl import SFTConfig

    for flags, rule in (([], "bf16-without-bf16-device"),
                        (["--use_cpu", "true", "--tf32", "true"], "tf32-needs-ampere")):  # fmt: skip
        report = judge(["trl", "sft", "--model_name_or_path", "m", "--dataset_name", "d", *flags],
                       ("cpu_only",))  # fmt: skip
        kwargs = {"use_cpu": True, "tf32": True} if flags else {}
        with pytest.raises(ValueError) as raised:
            SFTConfig(output_dir="out", **kwargs)
        assert finding(report, rule)["message"] == str(raised.value)


# --------------------------------------------------------------------------------------
# The installed TRL in a child: the same verdicts, and no false alarm
# --------------------------------------------------------------------------------------

PROBE_PLANS = [
    "grpo-groups-in-trl-process", "4xa100-accelerate-grpo-world-4", "trl-script-typo",
    "8xh100-grpo-colocate", "user-script-grpo",
]  # fmt: skip


@pytest.mark.parametrize("name", PROBE_PLANS)
def test_trl_in_a_child_agrees_with_the_table(name):
    machines, command, expected = SUITE[name]
    table = judge(command, machines, use_trl="no")
    child = judge(command, machines, use_trl="yes")
    assert child["plan"]["trl_parser"].startswith("TRL 1.16.0")
    assert {f["id"] for f in child["findings"]} == {f["id"] for f in table["findings"]}
    for f in child["findings"]:
        if f["severity"] == "error" and f["stage"] == "config":
            assert f.get("confirmed_by"), f
    assert {f["id"] for f in child["findings"] if f["severity"] != "info"} == expected


def test_trl_in_a_child_catches_what_no_rule_knows():
    command = ["trl", "sft", "--model_name_or_path", "m", "--dataset_name", "d",
               "--lr_scheduler_type", "reduce_lr_on_plateau"]  # fmt: skip
    assert judge(command, ("l4",), use_trl="no")["summary"]["error"] == 0
    report = judge(command, ("l4",), use_trl="yes")
    found = finding(report, "trl-config-error")
    assert found["message"] == "lr_scheduler_type reduce_lr_on_plateau requires an eval strategy"
    assert found["confirmed_by"] == "TRL 1.16.0, run here (the `trl` process, world size 1)"


# --------------------------------------------------------------------------------------
# Cited source lines, re-read in the installed packages
# --------------------------------------------------------------------------------------

# rule id -> (file under site-packages, cited line, text at or next to that line)
CITED = {
    "generation-batch-groups": ("trl/trainer/grpo_config.py", 1133, "must be divisible by num_generations"),
    "generation-batch-global": ("trl/trainer/grpo_config.py", 1105, "must be divisible by the global batch size"),
    "generation-batch-both-set": ("trl/trainer/grpo_config.py", 1115, "can not be both configured"),
    "eval-batch-generations": ("trl/trainer/grpo_config.py", 1125, "The global eval batch size"),
    "num-generations-minimum": ("trl/trainer/grpo_config.py", 1139, "at least 2 generations"),
    "auto-find-batch-size-online": ("trl/trainer/grpo_config.py", 1091, "auto_find_batch_size is not supported"),
    "online-sequence-parallel": ("trl/trainer/grpo_config.py", 1068, "self.parallelism_config is not None"),
    "recipe-parallelism-config": ("trl/trainer/grpo_config.py", 1069, "parallelism_config.cp_enabled"),
    "packing-with-context-parallel": ("trl/trainer/sft_trainer.py", 1157, "Packing is not compatible with context parallelism"),
    "vllm-mode-invalid": ("trl/generation/vllm_generation.py", 370, "vllm_mode must be either"),
    "vllm-tp-divides-world": ("trl/generation/vllm_generation.py", 316, "must divide world size"),
    "vllm-colocate-8bit": ("trl/generation/vllm_generation.py", 344, "in-flight 8-bit quantization"),
    "vllm-server-unreachable": ("trl/generation/vllm_client.py", 289, "can't be reached at"),
    "vllm-server-missing": ("trl/generation/vllm_generation.py", 300, 'self.mode == "server"'),
    "vllm-group-port-clash": ("trl/generation/vllm_client.py", 746, '"master_port": self.group_port'),
    "vllm-server-timeout-over-ddp": ("trl/generation/vllm_generation.py", 375, "wait_for_everyone"),
    "lora-on-lm-head": ("trl/trainer/sft_trainer.py", 1070, "Applying a PEFT adapter to `lm_head`"),
    "quantization-4bit-and-8bit": ("trl/trainer/model_config.py", 175, "8 bit and 4 bit"),
    "liger-deprecated": ("trl/trainer/sft_trainer.py", 1129, "`use_liger_kernel=True` is deprecated"),
    "liger-fused-cross-entropy": ("trl/trainer/sft_trainer.py", 1137, "fused_linear_cross_entropy"),
    "bf16-without-bf16-device": ("transformers/training_args.py", 1779, "doesn't support bf16/gpu"),
    "fp16-and-bf16": ("transformers/training_args.py", 1785, "At most one of fp16 and bf16"),
    "tf32-needs-ampere": ("transformers/training_args.py", 1682, "--tf32 requires Ampere"),
    "dataset-missing": ("trl/scripts/sft.py", 100, "Either `datasets` or `dataset_name`"),
    "json-argument-invalid": ("transformers/training_args.py", 1529, "json.loads(passed_value)"),
    "script-unknown-arguments": ("trl/scripts/_hf_argparser.py", 380, "not used by the HfArgumentParser"),
    "accelerate-config-name": ("trl/cli/accelerate_config.py", 40, "is neither a file nor a valid config"),
    "accelerate-rejects-argument": ("trl/cli/commands/training.py", 64, "config_remaining + cli_remaining"),
    "config-unknown-keys": ("accelerate/commands/config/config_args.py", 156, "had unknown keys"),
    "launch-flags-conflict": ("accelerate/commands/launch.py", 1205, "You can only use one of"),
    "multi-gpu-one-process": ("accelerate/commands/launch.py", 1209, "at least 2 processes"),
    "parallelism-flag-needs-fsdp2": ("accelerate/commands/launch.py", 1212, "--use_parallelism_config"),
    "num-processes-unset": ("accelerate/commands/launch.py", 1306, "manually pass in `--num_processes`"),
    "gpu-ids-too-few": ("accelerate/commands/launch.py", 1259, "Less than two GPU ids"),
    "parallelism-key-ignored": ("accelerate/commands/launch.py", 1277, "setattr(args, key, value)"),
    "parallelism-size-mismatch": ("accelerate/parallelism_config.py", 373, "does not match"),
    "deepspeed-accumulation-pinned": ("transformers/integrations/deepspeed.py", 261, "mismatch TrainingArguments"),
}  # fmt: skip


@pytest.mark.parametrize("rule_id", sorted(CITED))
def test_cited_line_holds_the_text(rule_id):
    from _scaling.config_rules import CONFIG_RULES
    from _scaling.plan_rules import PLAN_RULES

    path, line, text = CITED[rule_id]
    rule = next(r for r in CONFIG_RULES + PLAN_RULES if r.id == rule_id)
    short = re.sub(r"^(trl|transformers|accelerate)/", "", path)
    assert f"{short}:{line}" in rule.source or f"{Path(path).name}:{line}" in rule.source, (
        rule.source
    )
    lines = (SITE / path).read_text(encoding="utf-8").splitlines()
    window = "\n".join(lines[max(0, line - 3) : line + 2])
    assert text in window, (path, line, window)
