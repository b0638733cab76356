"""Rules for an accelerate launch configuration: the values of an accelerate config file after
command-line flags are applied, judged against the machine and the TRL settings it runs.

One table, `CONFIG_RULES`; each row cites the release and source line it rests on. The check
script judges the config file alone (with TRL's defaults); the preflight judges the launch it
resolved from a command line. Version and hardware gates are not repeated here: a config names
the backends it uses (`backends_used`), and their verdicts come from backend_rules.RULES."""

from __future__ import annotations

from typing import Callable, NamedTuple

DISTRIBUTED_TYPES = (
    "NO", "MULTI_GPU", "MULTI_CPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA",
    "MULTI_MUSA", "MULTI_HPU", "MULTI_NEURON", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM",
)  # fmt: skip  # accelerate 1.15.0 utils/dataclasses.py DistributedType
GPU_LAUNCHES = ("MULTI_GPU", "FSDP", "DEEPSPEED")
# accelerate 1.15.0 utils/dataclasses.py DeepSpeedPlugin._deepspeed_config_checks: with
# deepspeed_config_file, these accelerate keys raise instead of being merged.
DEEPSPEED_FILE_CONFLICTS = (
    "gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
    "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
    "zero3_save_16bit_model",
)  # fmt: skip
# TRL 1.16.0 defaults the rules read when no TRL argument says otherwise (trl/trainer/*_config.py).
TRL_DEFAULTS = {"gradient_checkpointing": True}
TRUTH_VALUES = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")


class Launch(NamedTuple):
    """What a config rule reads: the accelerate values, the TRL values and the machine."""

    values: dict  # accelerate config keys after command-line flags (fsdp_config, ... nested)
    trl: dict  # effective TRL arguments that matter (gradient_checkpointing, ...)
    gpus: int  # GPUs each node's processes can use
    min_cc: tuple | None  # lowest compute capability of those GPUs (CUDA only)
    # The preflight's view of a whole launch: the `accelerate launch` flags given on the command
    # line (None: a config file judged alone, whose launch flags are unknown) and the file.
    flags: dict | None = None
    config_path: str | None = None

    @property
    def distributed_type(self) -> str:
        return str(self.values.get("distributed_type") or "NO").upper()

    @property
    def fsdp(self) -> dict:
        fsdp = self.values.get("fsdp_config")
        return fsdp if isinstance(fsdp, dict) else {}

    @property
    def fsdp_version(self) -> int:
        return 2 if str(self.fsdp.get("fsdp_version", 1)) == "2" else 1

    @property
    def deepspeed(self) -> dict:
        ds = self.values.get("deepspeed_config")
        return ds if isinstance(ds, dict) else {}

    @property
    def parallelism(self) -> dict:
        block = self.values.get("parallelism_config")
        return block if isinstance(block, dict) else {}


class ConfigRule(NamedTuple):
    id: str
    severity: str  # error: the launch fails; warning: it runs, but not as written
    stage: str  # when it shows: launch, config, model load, trainer init, first step
    check: Callable[[Launch], str | None]  # the problem, or None
    fix: str
    source: str


# --------------------------------------------------------------------------------------
# Checks (each returns the problem as a sentence, or None)
# --------------------------------------------------------------------------------------


def _shape(launch: Launch) -> str | None:
    v = launch.values
    wrong = [
        f"{key}: {v[key]!r} is not {kind}"
        for key, kind, ok in (
            ("num_processes", "a whole number", _is_int),
            ("num_machines", "a whole number", _is_int),
            ("machine_rank", "a whole number", _is_int),
            ("distributed_type", "a string", lambda x: isinstance(x, str)),
            ("mixed_precision", "a string", lambda x: isinstance(x, str)),
            ("fsdp_config", "a mapping", lambda x: isinstance(x, dict)),
            ("deepspeed_config", "a mapping", lambda x: isinstance(x, dict)),
        )
        if v.get(key) is not None and not ok(v[key])
    ]
    return "; ".join(wrong) or None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unknown_distributed_type(launch: Launch) -> str | None:
    value = launch.values.get("distributed_type")
    if isinstance(value, str) and value.upper() not in DISTRIBUTED_TYPES:
        return f"distributed_type: {value} is not one of accelerate's types"
    return None


def _processes_exceed_gpus(launch: Launch) -> str | None:
    nproc, machines = launch.values.get("num_processes"), launch.values.get("num_machines") or 1
    if not (_is_int(nproc) and _is_int(machines) and machines >= 1):
        return None
    per_node = nproc // machines
    if launch.distributed_type in GPU_LAUNCHES and per_node > launch.gpus:
        per = f" ({per_node} per node)" if machines > 1 else ""
        return f"num_processes: {nproc}{per} but {launch.gpus} GPU(s) visible"
    return None


def _one_process_many_gpus(launch: Launch) -> str | None:
    if launch.distributed_type == "NO" and launch.gpus > 1 and not launch.values.get("use_cpu"):
        return (
            f"distributed_type NO with {launch.gpus} GPUs visible: one process sees them all; "
            "a model TRL loads by name is spread over them (device_map='auto') and they take "
            "turns, and a model object on one GPU makes the trainer refuse nn.DataParallel"
        )
    return None


def _fp8_needs_ada(launch: Launch) -> str | None:
    precision = str(launch.values.get("mixed_precision") or "no").lower()
    if precision == "fp8" and launch.min_cc is not None and launch.min_cc < (8, 9):
        return "mixed_precision: fp8 needs compute capability 8.9+ (Ada or Hopper)"
    return None


def _checkpointing_twice(launch: Launch) -> str | None:
    fsdp_ckpt = launch.fsdp.get("fsdp_activation_checkpointing") in (True, "true", "True")
    trl_ckpt = launch.trl.get("gradient_checkpointing", TRL_DEFAULTS["gradient_checkpointing"])
    if launch.distributed_type == "FSDP" and fsdp_ckpt and trl_ckpt:
        return (
            "fsdp_activation_checkpointing: true next to gradient_checkpointing=True "
            "(TRL's default): transformers raises that both can't be set"
        )
    return None


def _fsdp2_forward_prefetch(launch: Launch) -> str | None:
    if launch.fsdp_version == 2 and launch.fsdp.get("fsdp_forward_prefetch") in (True, "true"):
        return "fsdp_forward_prefetch: true is ignored with FSDP2 (FSDP2 has no forward prefetch)"
    return None


def _fsdp2_reshard_not_bool(launch: Launch) -> str | None:
    value = launch.fsdp.get("fsdp_reshard_after_forward")
    if launch.fsdp_version != 2 or value is None or isinstance(value, bool):
        return None
    if str(value).lower() in TRUTH_VALUES:
        return None
    return (
        f"fsdp_reshard_after_forward: {value} is not a bool; FSDP2 raises "
        f"'invalid truth value {str(value).lower()}'"
    )


def _deepspeed_file_and_keys(launch: Launch) -> str | None:
    ds = launch.deepspeed
    if launch.distributed_type != "DEEPSPEED" or not ds.get("deepspeed_config_file"):
        return None
    clashing = [k for k in DEEPSPEED_FILE_CONFLICTS if ds.get(k) is not None]
    # A --mixed_precision flag is not a config key (commands/launch.py mp_from_config_flag), but
    # any mixed_precision in the file is, 'no' included (commands/launch.py:1396).
    from_flag = "mixed_precision" in (launch.flags or {})
    if launch.values.get("mixed_precision") is not None and not from_flag:
        clashing.append("mixed_precision")
    if not clashing:
        return None
    ignored = [*DEEPSPEED_FILE_CONFLICTS, "mixed_precision"]  # accelerate's list, in its order
    return (
        "When using `deepspeed_config_file`, the following accelerate config variables will be "
        f"ignored: {ignored}. (The config sets {', '.join(clashing)} next to "
        "deepspeed_config_file.)"
    )


def _is_false(value: object) -> bool:
    return value is False or str(value).lower() in ("false", "no", "0", "off")


def _fsdp_sync_off_with_efficient_loading(launch: Launch) -> str | None:
    # The launcher compares the YAML's values as loaded: a bool False fails the truth test, a
    # "false" string from the command line does not (accelerate's flags are type=str).
    fsdp = launch.fsdp
    efficient = fsdp.get("fsdp_cpu_ram_efficient_loading", True)
    if launch.distributed_type != "FSDP" or fsdp.get("fsdp_sync_module_states") is not False:
        return None
    if efficient is False or efficient is None:
        return None
    return (
        "fsdp_sync_module_states: false with fsdp_cpu_ram_efficient_loading on (its default): "
        "accelerate raises 'When using `--fsdp_cpu_ram_efficient_loading` set "
        "`--fsdp_sync_module_states` to `True`'"
    )


def _fsdp1_reshard_ignored(launch: Launch) -> str | None:
    value = launch.fsdp.get("fsdp_reshard_after_forward")
    if launch.distributed_type != "FSDP" or launch.fsdp_version != 1 or value is None:
        return None
    strategy = str(launch.fsdp.get("fsdp_sharding_strategy") or "FULL_SHARD").upper()
    if str(value).upper() == strategy:
        return None
    return (
        f"fsdp_reshard_after_forward: {value} is ignored with FSDP1 from a config: the launcher "
        f"passes fsdp_sharding_strategy ({strategy}) and the plugin uses that"
    )


def _fsdp2_v1_keys_ignored(launch: Launch) -> str | None:
    keys = [k for k in ("fsdp_use_orig_params", "fsdp_sync_module_states") if k in launch.fsdp]
    if launch.distributed_type != "FSDP" or launch.fsdp_version != 2 or not keys:
        return None
    return f"{' and '.join(keys)} {'are' if len(keys) > 1 else 'is'} silently ignored by FSDP2"


def _fsdp_model_id_dispatched(launch: Launch) -> str | None:
    efficient = launch.fsdp.get("fsdp_cpu_ram_efficient_loading", True)
    kwargs = launch.trl.get("model_init_kwargs")
    device_map = kwargs.get("device_map", "auto") if isinstance(kwargs, dict) else "auto"
    if launch.distributed_type != "FSDP" or not _is_false(efficient) or device_map is None:
        return None
    return (
        "fsdp_cpu_ram_efficient_loading: false under FSDP with a model TRL loads by name (its "
        "device_map='auto' then spreads it over the GPUs): training stops before step 1 with "
        "'You can't train a model that has been loaded with `device_map='auto'` in any "
        "distributed mode.'"
    )


# Checks of a whole launch (accelerate 1.15.0 commands/launch.py _validate_launch_command and
# the config file loader), used by the check script where they read the file alone.
SAGEMAKER = "AMAZON_SAGEMAKER"
# commands/config/config_args.py ClusterConfig fields (launch_tables), plus the two older keys
# BaseConfig.process_config converts (fp16, dynamo_backend).
LEGACY_CONFIG_KEYS = ("fp16", "dynamo_backend")


def _unknown_config_keys(launch: Launch) -> str | None:
    from .launch_tables import ACCELERATE_CONFIG_KEYS

    if str(launch.values.get("compute_environment") or "LOCAL_MACHINE") == SAGEMAKER:
        return None
    known = set(ACCELERATE_CONFIG_KEYS) | set(LEGACY_CONFIG_KEYS)
    extra = sorted(k for k in launch.values if k not in known)
    if not extra:
        return None
    where = launch.config_path or "<config file>"
    return (
        f"The config file at {where} had unknown keys ({extra}), please try upgrading your "
        "`accelerate` version or fix (and potentially remove) these keys from your config file."
    )


def _launch_flags_conflict(launch: Launch) -> str | None:
    flags = launch.flags or {}
    if (
        sum(bool(flags.get(k)) for k in ("multi_gpu", "cpu", "tpu", "use_deepspeed", "use_fsdp"))
        > 1
    ):
        return (
            "You can only use one of `--cpu`, `--multi_gpu`, `--tpu`, `--use_deepspeed`, "
            "`--use_fsdp` at a time."
        )
    return None


def _multi_gpu_one_process(launch: Launch) -> str | None:
    flags = launch.flags or {}
    nproc = flags.get("num_processes")
    if flags.get("multi_gpu") and _is_int(nproc) and nproc < 2:
        return "You need to use at least 2 processes to use `--multi_gpu`."
    return None


def _parallelism_flag_without_fsdp2(launch: Launch) -> str | None:
    flags = launch.flags or {}
    # commands/launch.py compares fsdp_version with the int 1, and the flag parses as text.
    if flags.get("use_parallelism_config") and (
        not flags.get("use_fsdp") or flags.get("fsdp_version") == 1
    ):
        return (
            "You cannot use `--use_parallelism_config` without `--use_fsdp` and "
            "`--fsdp_version=2`. "
        )
    return None


def _num_processes_unset(launch: Launch) -> str | None:
    if launch.flags is None or launch.values.get("num_processes", -1) != -1:
        return None
    if launch.distributed_type == "NO":  # process_config sets 1 for a config without it
        return None
    return "You need to manually pass in `--num_processes` using this config yaml."


def _too_few_gpu_ids(launch: Launch) -> str | None:
    ids = launch.values.get("gpu_ids")
    machines = launch.values.get("num_machines") or 1
    if ids is None or str(ids) == "all" or launch.distributed_type not in MULTI_DEVICE_TYPES:
        return None
    if len(str(ids).split(",")) < 2 and _is_int(machines) and machines <= 1:
        return (
            "Less than two GPU ids were configured and tried to run on multiple GPUs. Please "
            "ensure at least two are specified for `--gpu_ids`, or use `--gpu_ids='all'`."
        )
    return None


# accelerate 1.15.0 commands/launch.py:1231: the types launched as multi-device
MULTI_DEVICE_TYPES = ("MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU",
                 "MULTI_HPU", "MULTI_NEURON")  # fmt: skip


def _parallelism_key_ignored(launch: Launch) -> str | None:
    ignored = sorted(k for k in launch.parallelism if not str(k).startswith("parallelism_config_"))
    if not ignored:
        return None
    return (
        f"parallelism_config keys {ignored} are ignored: accelerate copies each key to the launch "
        "argument of the same name, and only parallelism_config_* arguments exist"
    )


PARALLEL_SIZES = ("dp_replicate", "dp_shard", "tp", "cp", "sp")


def parallel_size(launch: Launch, name: str) -> int:
    value = launch.parallelism.get(f"parallelism_config_{name}_size", 1)
    return value if _is_int(value) and value > 0 else 1


def _parallelism_total_mismatch(launch: Launch) -> str | None:
    if not launch.parallelism or not _is_int(launch.values.get("num_processes")):
        return None
    total = 1
    for name in PARALLEL_SIZES:
        total *= parallel_size(launch, name)
    nproc = launch.values["num_processes"]
    backend = launch.parallelism.get("parallelism_config_sp_backend", "deepspeed")
    if total == 1 or (backend == "deepspeed" and parallel_size(launch, "sp") > 1):
        return None
    if total != nproc:
        return (
            f"ParallelismConfig total_size ({total}) does not match num_processes ({nproc}). "
            "Please adjust dp_replicate_size/ dp_shard_size/tp_size/cp_size/sp_size."
        )
    return None


def _deepspeed_accumulation_pinned(launch: Launch) -> str | None:
    ds = launch.deepspeed
    pinned = ds.get("gradient_accumulation_steps")
    if launch.distributed_type != "DEEPSPEED" or ds.get("deepspeed_config_file"):
        return None
    if not _is_int(pinned):
        return None  # "auto" (or unset) follows the training arguments
    wanted = launch.trl.get("gradient_accumulation_steps", 1)
    if wanted == pinned:
        return None
    return (
        "Please correct the following DeepSpeed config values that mismatch TrainingArguments "
        f"values:\n- ds gradient_accumulation_steps={pinned} vs hf gradient_accumulation_steps="
        f"{wanted}\nThe easiest method is to set these DeepSpeed config values to 'auto'."
    )


CONFIG_RULES = (
    ConfigRule("config-shape", "error", "launch", _shape,
               "fix the value's type (numbers unquoted, fsdp_config/deepspeed_config as mappings)",
               "accelerate 1.15.0 commands/config/config_args.py: values load as typed"),
    ConfigRule("unknown-distributed-type", "error", "launch", _unknown_distributed_type,
               "use one of NO, MULTI_GPU, FSDP, DEEPSPEED",
               "accelerate 1.15.0 utils/dataclasses.py DistributedType"),
    ConfigRule("processes-exceed-gpus", "error", "first step", _processes_exceed_gpus,
               "pass --num_processes equal to the GPUs per node (the flag beats the YAML)",
               "accelerate 1.15.0 commands/launch.py starts num_processes ranks whatever the GPU "
               "count; two ranks on one GPU make NCCL fail ('Duplicate GPU detected')"),
    ConfigRule("one-process-many-gpus", "warning", "model load", _one_process_many_gpus,
               "set CUDA_VISIBLE_DEVICES to one GPU, or use a multi-GPU config",
               "TRL 1.16.0 trl/trainer/utils.py create_model_from_path (device_map='auto'); "
               "trl/trainer/sft_trainer.py nn.DataParallel check"),
    ConfigRule("fp8-needs-ada", "error", "trainer init", _fp8_needs_ada,
               "use mixed_precision: bf16",
               "FP8 tensor cores exist from compute capability 8.9 (Ada, Hopper)"),
    ConfigRule("fsdp-checkpointing-twice", "error", "trainer init", _checkpointing_twice,
               "keep one: gradient_checkpointing=False in the TRL config, or drop "
               "fsdp_activation_checkpointing",
               "transformers 5.24.0 trainer.py: activation_checkpointing and "
               "gradient_checkpointing can't both be set to True"),
    ConfigRule("fsdp2-forward-prefetch", "warning", "launch", _fsdp2_forward_prefetch,
               "remove fsdp_forward_prefetch",
               "accelerate 1.15.0 utils/dataclasses.py:1953 reads FSDP_FORWARD_PREFETCH only "
               "for fsdp_version 1"),
    ConfigRule("fsdp2-reshard-not-bool", "error", "trainer init", _fsdp2_reshard_not_bool,
               "fsdp_reshard_after_forward: true (FULL_SHARD) or false (SHARD_GRAD_OP)",
               "accelerate 1.15.0 utils/dataclasses.py:1862 str_to_bool"),
    ConfigRule("deepspeed-file-and-keys", "error", "config", _deepspeed_file_and_keys,
               "keep deepspeed_config_file and move those settings into the DeepSpeed JSON (pass "
               "--mixed_precision on the command line if needed)",
               "accelerate 1.15.0 utils/dataclasses.py:1527 _deepspeed_config_checks, raised when "
               "the TRL config is built (transformers 5.24.0 training_args.py:1716)"),
    ConfigRule("fsdp-sync-off-with-efficient-loading", "error", "launch",
               _fsdp_sync_off_with_efficient_loading,
               "fsdp_sync_module_states: true, or fsdp_cpu_ram_efficient_loading: false",
               "accelerate 1.15.0 utils/launch.py:306 prepare_multi_gpu_env"),
    ConfigRule("fsdp1-reshard-ignored", "warning", "launch", _fsdp1_reshard_ignored,
               "set fsdp_sharding_strategy (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD) "
               "instead",
               "accelerate 1.15.0 utils/launch.py:313 exports FSDP_SHARDING_STRATEGY; "
               "utils/dataclasses.py:1844 FSDP1 reads it and never the reshard variable"),
    ConfigRule("fsdp2-v1-keys-ignored", "warning", "launch", _fsdp2_v1_keys_ignored,
               "remove them (FSDP2 needs neither)",
               "accelerate 1.15.0 utils/dataclasses.py:1944 and the use_orig_params check read "
               "the environment only for fsdp_version 1; the plugin warns only when set in code"),
    ConfigRule("fsdp-model-id-dispatched", "error", "first step", _fsdp_model_id_dispatched,
               'keep fsdp_cpu_ram_efficient_loading: true, or pass model_init_kwargs '
               '{"device_map": null}',
               "TRL 1.16.0 trl/trainer/utils.py:1351 device_map='auto'; transformers 5.24.0 "
               "integrations/accelerate.py:425; accelerate 1.15.0 accelerator.py:1479"),
    ConfigRule("config-unknown-keys", "error", "launch", _unknown_config_keys,
               "remove the keys accelerate does not know (or move them under the section they "
               "belong to)",
               "accelerate 1.15.0 commands/config/config_args.py:156 from_yaml_file"),
    ConfigRule("launch-flags-conflict", "error", "launch", _launch_flags_conflict,
               "keep one of --multi_gpu, --use_deepspeed, --use_fsdp, --cpu",
               "accelerate 1.15.0 commands/launch.py:1205 _validate_launch_command"),
    ConfigRule("multi-gpu-one-process", "error", "launch", _multi_gpu_one_process,
               "drop --multi_gpu, or pass --num_processes 2 or more",
               "accelerate 1.15.0 commands/launch.py:1209 _validate_launch_command"),
    ConfigRule("parallelism-flag-needs-fsdp2", "error", "launch", _parallelism_flag_without_fsdp2,
               "add --use_fsdp --fsdp_version 2, or put the parallelism_config in the config file",
               "accelerate 1.15.0 commands/launch.py:1212 _validate_launch_command"),
    ConfigRule("num-processes-unset", "error", "launch", _num_processes_unset,
               "add num_processes to the config file or pass --num_processes",
               "accelerate 1.15.0 commands/launch.py:1306 (ClusterConfig.num_processes = -1)"),
    ConfigRule("gpu-ids-too-few", "error", "launch", _too_few_gpu_ids,
               "list two or more gpu_ids, use gpu_ids: all, or a single-GPU config",
               "accelerate 1.15.0 commands/launch.py:1259 _validate_launch_command"),
    ConfigRule("parallelism-key-ignored", "warning", "launch", _parallelism_key_ignored,
               "name the keys parallelism_config_cp_size, parallelism_config_sp_size, ...",
               "accelerate 1.15.0 commands/launch.py:1277 copies section keys to arguments"),
    ConfigRule("parallelism-size-mismatch", "error", "trainer init", _parallelism_total_mismatch,
               "make dp_replicate x dp_shard x tp x cp x sp equal the process count (e.g. set "
               "parallelism_config_dp_shard_size)",
               "accelerate 1.15.0 parallelism_config.py:373 _validate_accelerator"),
    ConfigRule("deepspeed-accumulation-pinned", "error", "trainer init",
               _deepspeed_accumulation_pinned,
               "delete gradient_accumulation_steps from deepspeed_config (it then follows the "
               "TRL argument), or use zero2",
               "transformers 5.24.0 integrations/deepspeed.py:261 trainer_config_finalize; "
               "accelerate 1.15.0 utils/dataclasses.py:1305 puts the config's value in the plugin"),
)  # fmt: skip


def config_findings(launch: Launch) -> list:
    """[{id, severity, stage, message, fix, source}] for every rule the launch breaks. A value of
    the wrong type stops the other rules: they would misread it."""
    findings = []
    for rule in CONFIG_RULES:
        message = rule.check(launch)
        if message:
            findings.append(
                {"id": rule.id, "severity": rule.severity, "stage": rule.stage,
                 "message": message, "fix": rule.fix, "source": rule.source}
            )  # fmt: skip
            if rule.id == "config-shape":
                break
    return findings


def backends_used(launch: Launch) -> list:
    """[(the setting, the backend_rules.BACKENDS name it uses)] for this launch."""
    used = []
    kind = launch.distributed_type
    if kind == "DEEPSPEED":
        used.append(("distributed_type: DEEPSPEED", "deepspeed"))
    if kind == "FSDP" and launch.fsdp_version == 2:
        used.append(("fsdp_version: 2", "fsdp2"))
    if kind in GPU_LAUNCHES and launch.values.get("num_processes", 2) != 1:
        used.append((f"distributed_type: {kind}", "nccl"))
    # TRL's fp16/bf16 beat accelerate's mixed_precision (transformers 5.24.0 training_args.py:1614)
    trl_precision = launch.trl.get("fp16") or launch.trl.get("bf16")
    if str(launch.values.get("mixed_precision") or "no").lower() == "bf16" and not trl_precision:
        used.append(("mixed_precision: bf16", "bf16"))
    return used + _trl_backends(launch, {name for _, name in used})


# When a backend the launch uses shows that it is missing or unusable: its package is imported
# when accelerate starts the processes (deepspeed, NCCL), when the model loads (attention
# kernels, bitsandbytes, Hub kernels) or when the trainer is built (vLLM, PEFT, Liger).
BACKEND_STAGES = {
    "deepspeed": "launch", "fsdp2": "trainer init", "nccl": "launch", "bf16": "first step",
    "flash_attn": "model load", "qlora": "model load", "kernels": "model load",
    "vllm": "trainer init", "peft": "trainer init", "liger": "trainer init",
    "context_parallel": "trainer init", "ulysses": "trainer init",
}  # fmt: skip


# The backends a TRL setting needs (their verdicts: backend_rules.BACKENDS). The check script
# passes only TRL's defaults, which use none of these.
FLASH_ATTENTION = ("flash_attention_2", "flash_attention_3", "flash_attention_4")


def _trl_backends(launch: Launch, already: set) -> list:
    trl = launch.trl
    wanted = [
        ("use_vllm=True", "vllm", bool(trl.get("use_vllm"))),
        ("use_peft=True", "peft", bool(trl.get("use_peft"))),
        ("load_in_4bit=True", "qlora", bool(trl.get("load_in_4bit"))),
        ("use_liger_kernel=True", "liger", bool(trl.get("use_liger_kernel"))),
        ("use_kernels=True", "kernels", bool(trl.get("use_kernels"))),
        (f"attn_implementation={trl.get('attn_implementation')}", "flash_attn",
         trl.get("attn_implementation") in FLASH_ATTENTION),
        ("bf16=True", "bf16", trl.get("bf16") is True and not trl.get("use_cpu")),
        (f"parallelism_config_cp_size: {parallel_size(launch, 'cp')}", "context_parallel",
         parallel_size(launch, "cp") > 1),
        (f"parallelism_config_sp_size: {parallel_size(launch, 'sp')}", "ulysses",
         parallel_size(launch, "sp") > 1),
    ]  # fmt: skip
    return [(setting, name) for setting, name, on in wanted if on and name not in already]
