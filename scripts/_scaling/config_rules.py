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
    if launch.values.get("mixed_precision") not in (None, "no"):
        clashing.append("mixed_precision")
    if not clashing:
        return None
    return (
        f"deepspeed_config_file together with {', '.join(clashing)}: accelerate raises "
        "'When using `deepspeed_config_file`, the following accelerate config variables will "
        "be ignored'"
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
    ConfigRule("deepspeed-file-and-keys", "error", "trainer init", _deepspeed_file_and_keys,
               "keep deepspeed_config_file and move those settings into the DeepSpeed JSON",
               "accelerate 1.15.0 utils/dataclasses.py:1527 _deepspeed_config_checks"),
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
    if str(launch.values.get("mixed_precision") or "no").lower() == "bf16":
        used.append(("mixed_precision: bf16", "bf16"))
    return used
