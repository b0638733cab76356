"""Executed proofs of what the docs say the stack *does*: each test runs the installed TRL,
transformers, accelerate or peft on CPU (tiny random models from configs, in-memory datasets, no
downloads) and shows one behaviour a sentence in SKILL.md or a reference states.

tests/semantic_registry.py maps each such sentence to the test here that proves it. Where a GPU,
NCCL, vLLM or DeepSpeed would be needed, the smallest piece that decides the behaviour is
simulated and the test says which (several GPUs seen by one process, a vLLM client or engine).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.resources
import json
import logging
import warnings
from types import SimpleNamespace
from unittest import mock

import pytest
import tiny_stack as ts
import torch
from accelerate import ParallelismConfig
from accelerate.utils import FullyShardedDataParallelPlugin
from docs_oracle import SITE_PACKAGES

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

BF16_CPU_ERROR = "Your setup doesn't support bf16/gpu"
BASE_FSDP = "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\n"
BASE_DS = "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\n"
# Keeps FSDP plugins buildable on CPU: sync_module_states asks for an accelerator device.
NO_SYNC = "  fsdp_cpu_ram_efficient_loading: false\n  fsdp_sync_module_states: false\n"


class Stop(Exception):
    """Raised by spies to end a constructor once the call under test has been recorded."""


@pytest.fixture
def out(tmp_path):
    return str(tmp_path / "out")


@contextlib.contextmanager
def logged(name: str):
    """Messages logged on logger `name` (and its children) inside the block."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger(name)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def future_warnings(fn) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def sft(out, model=None, peft_config=None, dataset=None, **config):
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=out, report_to="none", **{"use_cpu": True, **config})
    return SFTTrainer(
        model=model if model is not None else ts.llama(),
        args=args,
        train_dataset=dataset if dataset is not None else ts.text_dataset(),
        processing_class=ts.tokenizer(),
        peft_config=peft_config,
    )


def grpo(out, model=None, peft_config=None, **config):
    from trl import GRPOConfig, GRPOTrainer

    config = {"use_cpu": True, "per_device_train_batch_size": 2, "num_generations": 2, **config}
    return GRPOTrainer(
        model=model if model is not None else ts.llama(),
        reward_funcs=ts.zero_reward,
        args=GRPOConfig(output_dir=out, report_to="none", **config),
        train_dataset=ts.prompt_dataset(),
        processing_class=ts.tokenizer(),
        peft_config=peft_config,
    )


# ---------------------------------------------------------------------------------------------
# Precision defaults
# ---------------------------------------------------------------------------------------------


def test_trl_configs_default_to_bf16_and_fail_on_cpu(out):
    from trl import DPOConfig, GRPOConfig, SFTConfig

    for config in (SFTConfig, DPOConfig, GRPOConfig):
        with pytest.raises(ValueError, match=BF16_CPU_ERROR):
            config(output_dir=out)
        assert config(output_dir=out, use_cpu=True).bf16 is True


def test_fp16_and_bf16_together_raise(out):
    from trl import GRPOConfig

    with pytest.raises(ValueError, match="At most one of fp16 and bf16 can be True"):
        GRPOConfig(output_dir=out, use_cpu=True, fp16=True, bf16=True)
    assert GRPOConfig(output_dir=out, fp16=True).bf16 is False  # fp16 alone turns bf16 off


def test_gradient_checkpointing_default_warns_unless_activation_checkpointing_is_set(out):
    from trl import GRPOConfig, SFTConfig

    for config in (SFTConfig, GRPOConfig):
        warned = future_warnings(lambda c=config: c(output_dir=out, use_cpu=True))
        assert any("`gradient_checkpointing` is deprecated" in w for w in warned), warned
        quiet = future_warnings(
            lambda c=config: c(output_dir=out, use_cpu=True, activation_checkpointing=False)
        )
        assert not any("gradient_checkpointing" in w for w in quiet), quiet


# ---------------------------------------------------------------------------------------------
# One process, several GPUs: DataParallel vs device_map="auto"
# ---------------------------------------------------------------------------------------------

SPREAD_MAP = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 1, "lm_head": 1}


def test_dataparallel_refused_for_a_model_object_on_several_gpus(out):
    """Simulated: two GPUs visible to this one process (torch.cuda.device_count patched), so
    TrainingArguments computes n_gpu=2 exactly as it would on such a box."""
    gpus = mock.patch("torch.cuda.device_count", return_value=2)
    with gpus, pytest.raises(ValueError, match="does not support `nn.DataParallel`"):
        sft(out, use_cpu=False, bf16=False)


def test_model_split_by_device_map_is_model_parallel_and_not_refused(out):
    """Same simulated two GPUs; the model carries the hf_device_map that device_map="auto"
    records when it spreads a model. Trainer counts it as model parallel, n_gpu becomes 1."""
    model = ts.llama()
    model.hf_device_map = SPREAD_MAP
    with mock.patch("torch.cuda.device_count", return_value=2):
        trainer = sft(out, model=model, use_cpu=False, bf16=False)
    assert trainer.is_model_parallel and trainer.args.n_gpu == 1


def test_device_map_auto_spreads_a_model_over_the_visible_gpus():
    """transformers' own device-map resolution for "auto" with two GPUs' worth of memory."""
    from transformers import LlamaForCausalLM
    from transformers.integrations.accelerate import _get_device_map

    with torch.device("meta"):
        model = LlamaForCausalLM(ts.llama_config(layers=4))
    device_map = _get_device_map(model, "auto", {0: 10**9, 1: 10**9}, None)
    assert set(device_map.values()) == {0, 1}, device_map


def test_trl_defaults_device_map_auto_for_a_model_id_on_a_gpu(tmp_path):
    """Simulated: the process's device is cuda:0 (PartialState patched). TRL's loader then asks
    for device_map="auto"; on CPU it asks for None."""
    import trl.trainer.utils as trl_utils

    seen = {}

    class Recorder:
        @staticmethod
        def from_pretrained(model_id, **kwargs):
            seen.update(kwargs)
            raise Stop

    gpu_state = SimpleNamespace(device=torch.device("cuda", 0))
    with mock.patch.object(trl_utils, "PartialState", return_value=gpu_state), pytest.raises(Stop):
        trl_utils.create_model_from_path("some/model", architecture=Recorder)
    assert seen["device_map"] == "auto"
    with pytest.raises(Stop):
        trl_utils.create_model_from_path("some/model", architecture=Recorder)
    assert seen["device_map"] is None


@pytest.mark.parametrize(
    ("distributed_type", "init_kwargs", "expected"),
    [
        ("NO", None, "unset"),
        ("FSDP", None, "unset"),
        ("MULTI_GPU", None, None),
        ("DEEPSPEED", None, None),
        ("FSDP", {"device_map": None}, None),  # the way out the docs give for FSDP
    ],
)
def test_trainers_force_device_map_none_only_under_multi_gpu_and_deepspeed(
    out, distributed_type, init_kwargs, expected
):
    """The trainer is given a model id; the loader call is recorded and construction stopped.
    The launch mode is simulated by the distributed state the trainer reads. "unset" leaves
    TRL's loader to pick "auto" on a GPU (previous test)."""
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=out, use_cpu=True, report_to="none", model_init_kwargs=init_kwargs)
    args.distributed_state = SimpleNamespace(distributed_type=distributed_type)
    seen = {}

    def record(model_id, **kwargs):
        seen.update(kwargs)
        raise Stop

    with mock.patch("trl.trainer.sft_trainer.create_model_from_path", record), pytest.raises(Stop):
        SFTTrainer(model="some/model", args=args, train_dataset=ts.text_dataset())
    assert seen.get("device_map", "unset") == expected


@pytest.mark.parametrize("script", ["sft", "dpo", "grpo", "rloo", "kto", "reward"])
def test_trl_cli_hands_the_trainer_a_model_id(script):
    """The `trl <cmd>` scripts pass `model_args.model_name_or_path`, a string, as the model."""
    source = (SITE_PACKAGES / "trl" / "scripts" / f"{script}.py").read_text(encoding="utf-8")
    models = [
        ast.unparse(kw.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Trainer")
        for kw in node.keywords
        if kw.arg == "model"
    ]
    assert models == ["model_args.model_name_or_path"], models


def test_single_gpu_config_starts_one_process_whatever_num_processes(tmp_path):
    shipped = importlib.resources.files("trl.accelerate_configs")
    yaml_text = shipped.joinpath("single_gpu.yaml").read_text(encoding="utf-8")
    assert "num_processes: 8" in yaml_text
    from accelerate.utils import prepare_simple_launcher_cmd_env

    name, args = ts.launched(yaml_text, tmp_path)
    assert name == "simple_launcher"
    cmd, _ = prepare_simple_launcher_cmd_env(args)
    assert cmd[1:] == ["train.py"]  # one plain python process


# ---------------------------------------------------------------------------------------------
# FSDP from a YAML vs in code (accelerate's launcher -> environment -> plugin, on CPU)
# ---------------------------------------------------------------------------------------------


def fsdp_plugin_from_yaml(fsdp_config: str, tmp_path, *flags):
    env = ts.launch_env(BASE_FSDP + "fsdp_config:\n" + fsdp_config, tmp_path, *flags)
    with ts.environment(env), logged("accelerate") as log:
        plugin = FullyShardedDataParallelPlugin()
    return plugin, log


def test_fsdp1_yaml_strategy_comes_from_fsdp_sharding_strategy_only(tmp_path):
    from torch.distributed.fsdp import ShardingStrategy

    v1 = "  fsdp_version: 1\n" + NO_SYNC
    plugin, _ = fsdp_plugin_from_yaml(
        v1 + "  fsdp_reshard_after_forward: SHARD_GRAD_OP\n", tmp_path
    )
    assert plugin.sharding_strategy == ShardingStrategy.FULL_SHARD
    plugin, _ = fsdp_plugin_from_yaml(v1 + "  fsdp_reshard_after_forward: true\n", tmp_path)
    assert plugin.sharding_strategy == ShardingStrategy.FULL_SHARD  # a bool does not raise here
    plugin, _ = fsdp_plugin_from_yaml(v1 + "  fsdp_sharding_strategy: SHARD_GRAD_OP\n", tmp_path)
    assert plugin.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP
    with pytest.raises(ValueError, match="not supported with FSDP1"):
        FullyShardedDataParallelPlugin(
            fsdp_version=1, reshard_after_forward=True, cpu_ram_efficient_loading=False
        )


def test_fsdp2_reshard_after_forward_must_be_a_bool(tmp_path):
    v2 = "  fsdp_version: 2\n  fsdp_cpu_ram_efficient_loading: false\n"
    with pytest.raises(ValueError, match="invalid truth value full_shard"):
        fsdp_plugin_from_yaml(v2 + "  fsdp_reshard_after_forward: FULL_SHARD\n", tmp_path)
    plugin, _ = fsdp_plugin_from_yaml(v2 + "  fsdp_reshard_after_forward: false\n", tmp_path)
    assert plugin.reshard_after_forward is False


def test_fsdp2_forward_prefetch_silently_ignored_from_yaml_raises_in_code(tmp_path):
    v2 = "  fsdp_version: 2\n  fsdp_cpu_ram_efficient_loading: false\n"
    plugin, log = fsdp_plugin_from_yaml(v2 + "  fsdp_forward_prefetch: true\n", tmp_path)
    assert plugin.forward_prefetch is None and not log
    with pytest.raises(ValueError, match="forward_prefetch is not yet implemented in FSDP2"):
        FullyShardedDataParallelPlugin(fsdp_version=2, forward_prefetch=True)


def test_fsdp2_fsdp1_only_keys_silent_from_yaml_warn_in_code(tmp_path):
    v2 = "  fsdp_version: 2\n  fsdp_cpu_ram_efficient_loading: false\n"
    keys = "  fsdp_use_orig_params: true\n  fsdp_sync_module_states: true\n"
    plugin, log = fsdp_plugin_from_yaml(v2 + keys, tmp_path)
    assert plugin.use_orig_params is None and plugin.sync_module_states is None
    assert not log, log
    plugin, log = fsdp_plugin_from_yaml(v2 + "  fsdp_backward_prefetch: BACKWARD_PRE\n", tmp_path)
    assert plugin.backward_prefetch is None
    assert any("backward_prefetch is not supported in FSDP2" in m for m in log), log
    with logged("accelerate") as log:
        FullyShardedDataParallelPlugin(
            fsdp_version=2, use_orig_params=True, cpu_ram_efficient_loading=False
        )
    assert any("use_orig_params is obsolete in FSDP2" in m for m in log), log


def test_launcher_refuses_sync_module_states_false_with_cpu_ram_efficient_loading(tmp_path):
    yaml_text = BASE_FSDP + "fsdp_config:\n  fsdp_version: 2\n  fsdp_sync_module_states: false\n"
    with pytest.raises(ValueError, match="set `--fsdp_sync_module_states` to `True`"):
        ts.launch_env(yaml_text, tmp_path)  # fsdp_cpu_ram_efficient_loading defaults to true


def test_fsdp2_rejects_local_state_dict(tmp_path):
    v2 = "  fsdp_version: 2\n  fsdp_cpu_ram_efficient_loading: false\n"
    with pytest.raises(ValueError, match="FSDP2 does not support LOCAL_STATE_DICT"):
        fsdp_plugin_from_yaml(v2 + "  fsdp_state_dict_type: LOCAL_STATE_DICT\n", tmp_path)


# ---------------------------------------------------------------------------------------------
# DeepSpeed config file, launcher flags, TRL's config names
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top", "sub", "flags", "raises"),
    [
        ("mixed_precision: 'no'\n", "  zero_stage: 2\n", (), True),
        ("mixed_precision: bf16\n", "", (), True),
        ("mixed_precision: 'no'\n", "", (), True),
        ("", "  gradient_accumulation_steps: 1\n", (), True),
        ("", "  offload_optimizer_device: cpu\n", (), True),
        ("", "  deepspeed_multinode_launcher: standard\n  zero3_init_flag: false\n", (), False),
        ("mixed_precision: bf16\n", "", ("--mixed_precision", "bf16"), False),
    ],
)
def test_deepspeed_config_file_with_accelerate_keys_raises_when_the_config_is_built(
    tmp_path, out, top, sub, flags, raises
):
    """The shipped zero*.yaml pattern (zero_stage, mixed_precision) plus a JSON path fails in
    every launched process as soon as the TRL config is built."""
    from trl import SFTConfig

    ds_json = tmp_path / "ds.json"
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 2}}), encoding="utf-8")
    yaml_text = BASE_DS + top + f"deepspeed_config:\n  deepspeed_config_file: {ds_json}\n" + sub
    env = ts.launch_env(yaml_text, tmp_path, *flags)
    with ts.environment(env):
        if raises:
            with pytest.raises(ValueError, match="following accelerate config variables will be"):
                SFTConfig(output_dir=out, use_cpu=True)
        else:  # past the check, the plugin goes on to need deepspeed itself, not installed here
            with pytest.raises(ImportError, match="deepspeed"):
                SFTConfig(output_dir=out, use_cpu=True)


def test_fp8_launch_needs_an_fp8_backend(tmp_path):
    yaml_text = "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp8\n"
    with pytest.raises(RuntimeError, match="FP8 is not available on this machine"):
        ts.launch_env("compute_environment: LOCAL_MACHINE\n" + yaml_text, tmp_path)


def test_launcher_flag_combinations_that_raise():
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    def validate(*flags):
        _validate_launch_command(launch_command_parser().parse_args([*flags, "train.py"]))

    with pytest.raises(ValueError, match="at least 2 processes to use `--multi_gpu`"):
        validate("--multi_gpu", "--num_processes", "1")
    with pytest.raises(ValueError, match="You can only use one of"):
        validate("--multi_gpu", "--use_fsdp")
    with pytest.raises(ValueError, match="You cannot use `--use_parallelism_config` without"):
        validate("--use_parallelism_config", "--use_deepspeed")


def test_trl_accelerate_config_must_name_a_shipped_config_or_a_file():
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    with pytest.raises(ValueError, match="is neither a file nor a valid config"):
        resolve_accelerate_config_argument(["--accelerate_config", "zero4"])
    resolved = resolve_accelerate_config_argument(["--accelerate_config", "zero3"])
    assert resolved[0] == "--config_file" and resolved[1].endswith("zero3.yaml")


# ---------------------------------------------------------------------------------------------
# Context and sequence parallelism
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["GRPOConfig", "RLOOConfig", "DistillationConfig"])
def test_online_configs_reject_parallelism_config_but_not_a_yaml_block(tmp_path, out, name):
    import trl

    config = getattr(trl, name)
    trainer = name.replace("Config", "Trainer")
    for parallelism in (
        ParallelismConfig(cp_size=2),
        ParallelismConfig(sp_size=2, sp_backend="deepspeed"),
    ):
        with pytest.raises(ValueError, match=f"{trainer} does not support sequence-dim"):
            config(output_dir=out, use_cpu=True, parallelism_config=parallelism)
    yaml_text = (
        BASE_FSDP.replace("num_processes: 2", "num_processes: 4")
        + "fsdp_config:\n  fsdp_version: 2\n"
        + "parallelism_config:\n  parallelism_config_dp_shard_size: 2\n"
        + "  parallelism_config_cp_size: 2\n"
    )
    env = ts.launch_env(yaml_text, tmp_path)
    assert env.get("PARALLELISM_CONFIG_CP_SIZE") == "2", env
    with ts.environment(env):
        assert config(output_dir=out, use_cpu=True).parallelism_config is None


def test_cp_and_sp_are_mutually_exclusive():
    with pytest.raises(ValueError, match="mutually exclusive"):
        ParallelismConfig(cp_size=2, sp_size=2)


# ---------------------------------------------------------------------------------------------
# PEFT, quantization, kernels, Liger
# ---------------------------------------------------------------------------------------------


def lora_on_lm_head():
    from peft import LoraConfig

    return LoraConfig(r=2, target_modules=["lm_head"])


@pytest.mark.parametrize("trainer", ["SFT", "DPO", "KTO", "GRPO", "RLOO"])
def test_lora_on_lm_head_is_rejected(out, trainer):
    import trl

    config = getattr(trl, f"{trainer}Config")
    cls = getattr(trl, f"{trainer}Trainer")
    kwargs = {"use_cpu": True, "report_to": "none"}
    extra = {"processing_class": ts.tokenizer(), "peft_config": lora_on_lm_head()}
    if trainer in ("GRPO", "RLOO"):
        kwargs.update(per_device_train_batch_size=2, num_generations=2)
        extra.update(reward_funcs=ts.zero_reward, train_dataset=ts.prompt_dataset())
    elif trainer in ("DPO", "KTO"):
        extra.update(train_dataset=ts.preference_dataset())
    else:
        extra.update(train_dataset=ts.text_dataset())
    with pytest.raises(ValueError, match="Applying a PEFT adapter to `lm_head` is not supported"):
        cls(model=ts.llama(), args=config(output_dir=out, **kwargs), **extra)


def test_peft_with_sync_ref_model_raises(out):
    from peft import LoraConfig
    from trl import DPOConfig, DPOTrainer

    args = DPOConfig(output_dir=out, use_cpu=True, report_to="none", sync_ref_model=True)
    with pytest.raises(NotImplementedError, match="sync_ref_model=True` while using a PEFT model"):
        DPOTrainer(
            model=ts.llama(),
            args=args,
            train_dataset=ts.preference_dataset(),
            processing_class=ts.tokenizer(),
            peft_config=LoraConfig(r=2, target_modules=["q_proj"]),
        )


def test_modelconfig_4bit_and_8bit_together_raise():
    from trl import ModelConfig

    with pytest.raises(ValueError, match="You can't use 8 bit and 4 bit precision"):
        ModelConfig(load_in_4bit=True, load_in_8bit=True)


def test_quantization_config_given_twice_raises(out):
    args = {"model_init_kwargs": {"quantization_config": {}}}
    with pytest.raises(ValueError, match="both as a trainer argument and in `args.model_init"):
        from trl import SFTConfig, SFTTrainer

        SFTTrainer(
            model="some/model",
            args=SFTConfig(output_dir=out, use_cpu=True, report_to="none", **args),
            train_dataset=ts.text_dataset(),
            quantization_config=object(),
        )


def test_model_init_kwargs_ignored_with_a_warning_for_a_model_object(out):
    with logged("trl") as log:
        sft(out, model_init_kwargs={"dtype": "bfloat16"})
    assert any("`model_init_kwargs` will be ignored" in m for m in log), log


def test_bitsandbytes_missing_names_the_minimum_transformers_wants(tmp_path):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    model_dir = ts.saved_llama(tmp_path / "model")
    with pytest.raises(ImportError, match=r"bitsandbytes>=0\.46\.1"):
        AutoModelForCausalLM.from_pretrained(
            model_dir, quantization_config=BitsAndBytesConfig(load_in_4bit=True)
        )


def test_use_kernels_needs_the_kernels_package_and_transformers_5_4(tmp_path):
    import transformers
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM

    model_dir = ts.saved_llama(tmp_path / "model")
    with pytest.raises(ValueError, match=r"Kernels are not available.*0\.18\.2 <= version < 0\.19"):
        AutoModelForCausalLM.from_pretrained(model_dir, use_kernels=True)
    # Simulated: an older transformers version string, read by TRL's own loader check.
    old_transformers = mock.patch.object(transformers, "__version__", "5.3.0")
    with old_transformers, pytest.raises(ValueError, match="5.2.0 and 5.3.0 fail to load the Hub"):
        trl_utils.create_model_from_path(model_dir, use_kernels=True)


def test_liger_is_deprecated_and_its_fused_cross_entropy_forced_off(out):
    warned = future_warnings(lambda: sft(out, use_liger_kernel=True))
    assert any("`use_liger_kernel=True` is deprecated" in w for w in warned), warned
    trainer = sft(out, use_liger_kernel=True, liger_kernel_config={"rope": True})
    assert trainer.args.liger_kernel_config == {"rope": True, "fused_linear_cross_entropy": False}
    with pytest.raises(ValueError, match="fused_linear_cross_entropy.*is not supported"):
        sft(out, use_liger_kernel=True, liger_kernel_config={"fused_linear_cross_entropy": True})


# ---------------------------------------------------------------------------------------------
# Sequence length: packing and padding-free
# ---------------------------------------------------------------------------------------------


def test_sft_packing_turns_padding_free_on_and_padding_free_needs_no_max_length(out):
    assert sft(out, packing=True).padding_free is True  # default strategy "bfd"
    assert sft(out, packing=True, packing_strategy="wrapped").padding_free is False
    with pytest.raises(ValueError, match="When `padding_free=True` without packing, `max_length`"):
        sft(out, padding_free=True)
    assert sft(out, padding_free=True, max_length=None).padding_free is True


def test_dpo_padding_free_falls_back_to_padding_with_a_warning(tmp_path, out):
    from trl import DPOConfig, DPOTrainer

    model_id = ts.saved_llama(tmp_path / "model")
    args = DPOConfig(output_dir=out, use_cpu=True, report_to="none", padding_free=True)
    with warnings.catch_warnings(record=True) as caught, logged("trl") as log:
        warnings.simplefilter("always")
        trainer = DPOTrainer(model=model_id, args=args, train_dataset=ts.preference_dataset())
    said = [str(w.message) for w in caught] + log
    assert any("padding_free=True` is temporarily unavailable" in m for m in said), said
    assert trainer.padding_free is False
    assert not getattr(trainer.data_collator, "padding_free", False)


# ---------------------------------------------------------------------------------------------
# Online trainers: batch checks, vLLM without vLLM, the server handshake
# ---------------------------------------------------------------------------------------------


def test_grpo_and_rloo_batch_checks(out):
    from trl import GRPOConfig, RLOOConfig

    with pytest.raises(ValueError, match="GRPO requires at least 2 generations per prompt"):
        GRPOConfig(output_dir=out, use_cpu=True, num_generations=1)
    with pytest.raises(ValueError, match="can not be both configured at the same time"):
        GRPOConfig(output_dir=out, use_cpu=True, generation_batch_size=16, steps_per_generation=2)
    for config in (GRPOConfig, RLOOConfig):
        with pytest.raises(ValueError, match="auto_find_batch_size is not supported"):
            config(output_dir=out, use_cpu=True, auto_find_batch_size=True)


def test_use_vllm_without_vllm_raises_when_the_trainer_is_built(out):
    from trl import GRPOConfig

    GRPOConfig(output_dir=out, use_cpu=True, use_vllm=True)  # the config does not check
    with pytest.raises(ImportError, match="vLLM is not available and `use_vllm` is set to True"):
        grpo(out, use_vllm=True)


@contextlib.contextmanager
def vllm_importable():
    """Simulated: vLLM counts as installed for TRL's generation module (it is not here)."""
    import trl.generation.vllm_generation as vg

    with mock.patch.object(vg, "is_vllm_available", return_value=True):
        yield vg


def test_vllm_mode_is_checked_by_the_trainer_not_the_config(out):
    from trl import GRPOConfig

    assert GRPOConfig(output_dir=out, use_cpu=True, vllm_mode="remote").vllm_mode == "remote"
    with vllm_importable(), pytest.raises(ValueError, match="must be either 'server' or 'colo"):
        grpo(out, use_vllm=True, vllm_mode="remote")


def test_colocate_tensor_parallel_size_must_divide_world_size(out):
    with vllm_importable(), pytest.raises(ValueError, match=r"tensor_parallel_size \(2\) must"):
        grpo(out, use_vllm=True, vllm_tensor_parallel_size=2)


class FakeVLLMClient:
    """Stands in for TRL's VLLMClient (which needs vLLM): records how the trainer drives it."""

    calls: list = []

    def __init__(self, **kwargs):
        FakeVLLMClient.calls.append(("VLLMClient", kwargs))

    def init_communicator(self, device):
        FakeVLLMClient.calls.append(("init_communicator", str(device)))

    def get_server_info(self):
        FakeVLLMClient.calls.append(("get_server_info", None))
        return {"model_config": {"logprobs_mode": "raw_logprobs"}}


class FakeLLM:
    """Stands in for vLLM's LLM engine in colocate mode: records its arguments."""

    made: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.slept = None
        FakeLLM.made.append(self)

    def sleep(self, level):
        self.slept = level


def test_server_handshake_and_rendezvous_run_inside_the_trainer_constructor(out):
    FakeVLLMClient.calls = []
    with (
        vllm_importable() as vg,
        mock.patch.object(vg, "VLLMClient", FakeVLLMClient),
        logged("trl") as log,
    ):
        grpo(out, use_vllm=True, vllm_mode="server", vllm_group_port=51299)
    names = [name for name, _ in FakeVLLMClient.calls]
    assert names == ["VLLMClient", "init_communicator", "get_server_info"], names
    assert FakeVLLMClient.calls[1][1] == "cpu"  # the trainer's device
    assert any("runs with `--logprobs-mode raw_logprobs`" in m for m in log), log


def test_each_vllm_mode_reads_only_its_own_fields(out):
    server = {
        "vllm_server_host": "10.0.0.5",
        "vllm_server_port": 8123,
        "vllm_server_timeout": 17.0,
        "vllm_group_port": 51299,
    }
    engine = {
        "vllm_gpu_memory_utilization": 0.42,
        "vllm_max_model_length": 321,
        "vllm_model_impl": "transformers",
        "vllm_enable_sleep_mode": True,
        "trust_remote_code": True,
    }
    FakeVLLMClient.calls, FakeLLM.made = [], []
    with vllm_importable() as vg, mock.patch.object(vg, "VLLMClient", FakeVLLMClient):
        grpo(
            out, use_vllm=True, vllm_mode="server", vllm_tensor_parallel_size=2, **server, **engine
        )
        grpo(out, use_vllm=True, vllm_mode="server", vllm_server_base_url="http://h:9", **server)
        with mock.patch.object(vg, "LLM", FakeLLM, create=True), ts.environment({}):
            grpo(out, use_vllm=True, vllm_mode="colocate", **server, **engine)
    clients = [kwargs for name, kwargs in FakeVLLMClient.calls if name == "VLLMClient"]
    assert clients == [
        {"base_url": "http://10.0.0.5:8123", "group_port": 51299, "connection_timeout": 17.0},
        {"base_url": "http://h:9", "group_port": 51299, "connection_timeout": 17.0},
    ]
    (llm,) = FakeLLM.made
    assert llm.kwargs["gpu_memory_utilization"] == 0.42
    assert llm.kwargs["max_model_len"] == 321 and llm.kwargs["model_impl"] == "transformers"
    assert llm.kwargs["tensor_parallel_size"] == 1 and llm.slept == 2
    assert llm.kwargs["trust_remote_code"] is True
    assert not {"base_url", "host", "port", "group_port"} & set(llm.kwargs)


class FakeResponse:
    def __init__(self, status, body=None):
        self.status_code, self._body, self.text, self.headers = status, body, "", {}

    def json(self):
        return self._body


def bare_client(session=None):
    """A VLLMClient object without its constructor (which needs vLLM and a server)."""
    from trl.generation.vllm_client import VLLMClient

    client = object.__new__(VLLMClient)
    client.base_url, client.group_port, client.model = "http://10.0.0.5:8000", 51216, "tiny"
    client.session = session
    return client


def test_vllm_client_timeout_counts_only_failed_connections():
    import trl.generation.vllm_client as vc

    class Refused(OSError):
        pass

    def refuse(url):
        raise Refused(url)

    fake = SimpleNamespace(get=refuse, exceptions=SimpleNamespace(RequestException=Refused))
    with mock.patch.object(vc, "requests", fake, create=True):
        with pytest.raises(ConnectionError, match="can't be reached at http://10.0.0.5:8000"):
            bare_client().check_server(total_timeout=0.0, retry_interval=0.0)
        answers = iter([FakeResponse(503)] * 5 + [FakeResponse(200)])
        fake.get = lambda url: next(answers)
        bare_client().check_server(total_timeout=0.0, retry_interval=0.0)  # retried past 0 s
    assert next(answers, None) is None


class FakeSession:
    def __init__(self, routes):
        self.routes, self.posted = routes, []

    def get(self, url, **kwargs):
        return self.routes[url.rsplit("/", 1)[1]]

    def post(self, url, json=None, **kwargs):
        self.posted.append((url, json))
        raise Stop


def test_vllm_client_names_missing_dev_mode_engine_and_cuda():
    import trl.generation.vllm_client as vc

    client = bare_client(FakeSession({"server_info": FakeResponse(404)}))
    with pytest.raises(RuntimeError, match="does not expose its development endpoints"):
        client.get_server_info()
    no_engine = FakeResponse(200, {"vllm_config": {"weight_transfer_config": None}})
    with pytest.raises(RuntimeError, match="has no weight-transfer engine"):
        bare_client(FakeSession({"server_info": no_engine})).init_communicator("cpu")
    routes = {
        "server_info": FakeResponse(200, {"vllm_config": {"weight_transfer_config": {}}}),
        "get_world_size": FakeResponse(200, {"world_size": 2}),
    }
    ip = mock.patch.object(vc, "get_ip", lambda: "10.0.0.1", create=True)
    with ip, pytest.raises(NotImplementedError, match="needs a CUDA device, got 'cpu'"):
        bare_client(FakeSession(routes)).init_communicator("cpu")


def test_server_generation_kwargs_override_structured_outputs_silently():
    session = FakeSession({})
    with warnings.catch_warnings(record=True) as caught, logged("trl") as log:
        warnings.simplefilter("always")
        with pytest.raises(Stop):
            bare_client(session).generate(
                [[3, 4]],
                structured_outputs_regex="w[0-9]+",
                generation_kwargs={"structured_outputs": {"choice": ["w1"]}, "temperature": 0.5},
            )
    ((_, payload),) = session.posted
    assert payload["structured_outputs"] == {"choice": ["w1"]}
    assert payload["temperature"] == 0.5  # generation_kwargs win over TRL's own keys
    assert not caught and not log


@pytest.mark.parametrize(
    ("version", "warns"),
    [
        ("0.22.0", False),
        ("0.31.0", False),
        ("0.24.0+cu129", False),
        ("0.31.1", True),
        ("0.32.0", True),
        ("0.21.9", True),
    ],
)
def test_vllm_outside_the_window_only_warns(version, warns):
    """Simulated: vLLM `version` installed (TRL's metadata lookup patched)."""
    import trl.import_utils as iu

    installed = mock.patch.object(iu, "_is_package_available", return_value=(True, version))
    with installed, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert iu.is_vllm_available() is True
    said = [str(w.message) for w in caught]
    assert any("TRL currently supports vLLM versions from 0.22.0 to 0.31.0" in m for m in said) == (
        warns
    )


def test_vllm_availability_is_checked_when_trl_vllm_modules_are_imported():
    """`is_vllm_available()` runs at module level in TRL's vLLM client and generation modules,
    so the window warning appears when they are imported (GRPO and RLOO import them)."""
    for module in ("vllm_client.py", "vllm_generation.py"):
        tree = ast.parse((SITE_PACKAGES / "trl" / "generation" / module).read_text("utf-8"))
        top_level_checks = [
            node
            for stmt in tree.body
            if isinstance(stmt, (ast.If, ast.Assign))
            for node in ast.walk(stmt.test if isinstance(stmt, ast.If) else stmt.value)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "is_vllm_available"
        ]
        assert top_level_checks, module
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    pins = [Requirement(r) for r in requires("trl") if r.startswith("vllm")]
    assert pins and all("0.31.1" not in p.specifier for p in pins)
