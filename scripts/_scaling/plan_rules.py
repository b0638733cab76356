"""Rules for a planned TRL run that are not accelerate-config rules: the TRL arguments at the
planned world size, vLLM's layout next to the trainer, PEFT, Liger, precision on the target GPUs,
and the machines of a multi-node plan. One table, `PLAN_RULES`; each row cites the release and
source line it rests on. Where the library prints a message, a rule's message is that text.

A check reads a `PlanView` and returns None, the message, or (message, fix)."""

from __future__ import annotations

import json
import re
from typing import Callable, NamedTuple

from . import arg_parsers, trl_batch
from .environment import redact_url_credentials
from .trl_args import suggest
from .versions import release_line

ONLINE = ("grpo", "rloo", "distillation")  # trainers that generate and validate a generation batch
GROUPED = trl_batch.GROUPED_TRAINERS  # generation batches hold groups of num_generations
LM_HEAD_TRAINERS = ("sft", "dpo", "grpo", "rloo", "kto", "distillation")
LIGER_TRAINERS = ("sft", "dpo", "grpo", "rloo", "kto")
LOCAL_HOSTS = ("0.0.0.0", "localhost", "127.0.0.1", "::1", "")
DEFAULT_MAIN_PORT = 29500  # accelerate 1.15.0 utils/launch.py prepare_multi_gpu_env
SKEW_PACKAGES = (
    "torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "trl", "transformers", "accelerate",
    "deepspeed", "vllm", "peft",
)  # fmt: skip


class Node(NamedTuple):
    label: str  # "this machine", or the facts file
    kind: str  # accelerator platform of the facts (cuda, rocm, mps, cpu, ...)
    visible: list  # devices the launch's environment leaves visible
    used: list  # devices the trainer's processes on this node use
    facts: dict
    ctx: object  # verdicts.Context of the facts


class PlanView(NamedTuple):
    trainer: str | None
    launcher: str  # trl, accelerate, torchrun, python
    script_kind: str  # trl, trl-script, user
    trl: dict  # effective TRL values (effective_trl); {} when the trainer is unknown
    given: frozenset  # TRL destinations the command line or recipe set
    world_size: int
    config_world_sizes: tuple  # world sizes TRL builds the config with (1 first for `trl`)
    processes_per_node: int
    num_machines: int
    distributed_type: str
    accelerate: dict  # the launch's accelerate values
    failures: tuple  # (id, message) refusals met while resolving the launch
    unknown_args: tuple  # strings TRL's script parser does not know (TRL's script or user's)
    nodes: tuple  # Node, one per machine of the plan
    server: object  # launch.Server or None
    server_visible: tuple  # devices of node 0 the vLLM server's environment leaves visible
    server_devices: tuple  # those it uses (tensor_parallel x data_parallel)
    env: dict
    memory: dict  # plan.memory_view: the estimate for the plan's strategy, or {"unknown": why}


class PlanRule(NamedTuple):
    id: str
    severity: str  # error: fails or cannot fit; warning: runs, but wrongly or slowly; info
    stage: str  # launch, config, model load, trainer init, first step, weight sync
    check: Callable[[PlanView], object]
    fix: str
    why: str
    source: str


# --------------------------------------------------------------------------------------
# Effective TRL values (what the config holds after TRL's own defaulting)
# --------------------------------------------------------------------------------------


def json_kwargs(value: object) -> dict:
    """A dict-valued argument as TRL reads it: a dict, or a JSON text starting with '{'."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            loaded = json.loads(value)
        except ValueError:
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return {}


def effective_trl(values: dict, script_kind: str) -> dict:
    """The values rules read, with TRL 1.16.0's defaulting applied:
    trl/trainer/base_config.py (bf16 = not fp16), transformers 5.24.0 training_args.py:1537
    (activation_checkpointing wins over its deprecated alias gradient_checkpointing), and, for
    TRL's scripts, trl/scripts/<cmd>.py building model_init_kwargs from ModelConfig."""
    if not values:
        return {}
    trl = dict(values)
    trl["bf16"] = (not trl.get("fp16")) if trl.get("bf16") is None else bool(trl.get("bf16"))
    act = trl.get("activation_checkpointing")
    trl["gradient_checkpointing"] = bool(trl.get("gradient_checkpointing") if act is None else act)
    init = {}
    if script_kind in ("trl", "trl-script"):
        init = {
            "attn_implementation": trl.get("attn_implementation"),
            "dtype": trl.get("dtype"),
        }
    init.update(json_kwargs(trl.get("model_init_kwargs")))
    trl["model_init"] = init
    trl["attn_implementation"] = init.get("attn_implementation")
    trl["use_kernels"] = bool(init.get("use_kernels"))
    targets = trl.get("lora_target_modules")
    trl["lora_target_modules"] = [targets] if isinstance(targets, str) else list(targets or [])
    if trl.get("eval_packing") is None:
        trl["eval_packing"] = trl.get("packing")
    return trl


def _trl(view: PlanView, name: str, default: object = None) -> object:
    """The plan's value of a TRL argument, else TRL's default for the trainer, else `default`."""
    value = view.trl.get(name)
    if value is None:
        value = arg_parsers.trl_default(view.trainer, name)
    return default if value is None else value


# --------------------------------------------------------------------------------------
# Parsing and launching
# --------------------------------------------------------------------------------------


def _failure(kind: str):
    def check(view: PlanView) -> str | None:
        return "; ".join(m for i, m in view.failures if i == kind) or None

    return check


def _unrecognized(view: PlanView) -> object:
    """accelerate refuses what TRL passed on; a misspelt TRL option gets its right spelling."""
    message = _failure("accelerate-rejects-argument")(view)
    if not message:
        return None
    names = re.findall(r"--?[\w-]+", message.rpartition("unrecognized arguments:")[2])
    return _with_spelling(view, message, names)


def _with_spelling(view: PlanView, message: str, names: list) -> object:
    """(message, fix naming the closest TRL option of each misspelt name), or the message."""
    if not view.trainer:
        return message
    fixes = [
        f"{right} (not {name})"
        for name in names
        for right in [suggest(name, view.trainer)]
        if right
    ]
    return (message, f"did you mean {', '.join(fixes)}") if fixes else message


def _script_unknown_args(view: PlanView) -> object:
    if view.script_kind != "trl-script" or not view.unknown_args:
        return None
    message = (
        f"Some specified arguments are not used by the HfArgumentParser: {list(view.unknown_args)}"
    )
    return _with_spelling(view, message, [a for a in view.unknown_args if a.startswith("-")])


def _user_script_unknown_args(view: PlanView) -> object:
    if view.script_kind != "user" or not view.unknown_args or not view.trainer:
        return None
    names = [a for a in view.unknown_args if a.startswith("-")]
    if not names:
        return None
    message = (
        f"{', '.join(names)} not an argument of ScriptArguments, {_config_class(view)}, "
        "ModelConfig or DatasetMixtureConfig"
    )
    return _with_spelling(view, message, names)


def _config_class(view: PlanView) -> str:
    from .launch_tables import TRL_CONFIG_CLASSES

    return TRL_CONFIG_CLASSES.get(view.trainer or "", "the TRL config")


def _no_dataset(view: PlanView) -> str | None:
    if view.script_kind not in ("trl", "trl-script") or not view.trl:
        return None
    if view.trl.get("datasets") or view.trl.get("dataset_name"):
        return None
    return "Either `datasets` or `dataset_name` must be provided."


def _json_argument_invalid(view: PlanView) -> str | None:
    from .launch_tables import TRL_JSON_FIELDS

    for name in TRL_JSON_FIELDS.get(view.trainer or "", ()):
        value = view.trl.get(name)
        if isinstance(value, str) and value.startswith("{"):
            try:
                json.loads(value)
            except ValueError as exc:
                return str(exc)
    return None


def _unknown_trainer(view: PlanView) -> str | None:
    if view.trainer:
        return None
    return (
        "the TRL config the script's arguments feed is unknown, so only the launch was judged "
        "(not the TRL arguments, vLLM, PEFT or memory)"
    )


def _idle_gpus(view: PlanView) -> str | None:
    if view.distributed_type == "NO":
        return None
    idle = [
        (n.label, len(n.visible) - len(n.used)) for n in view.nodes if len(n.visible) > len(n.used)
    ]
    if not idle or view.server is not None:
        return None
    label, count = idle[0]
    return (
        f"{view.processes_per_node} process(es) per node on {len(view.nodes[0].visible)} visible "
        f"GPU(s): {count} GPU(s) idle on {label}"
    )


# --------------------------------------------------------------------------------------
# Generation batch (GRPO, RLOO) at each world size the config is built with
# --------------------------------------------------------------------------------------


def generation_batches(view: PlanView, world: int) -> list:
    """[(check name, message)] GRPOConfig/RLOOConfig.__post_init__ would raise at `world`."""
    per_device = int(_trl(view, "per_device_train_batch_size"))
    found = trl_batch.batch_problems(
        per_device,
        world,
        view.trl.get("num_generations"),
        int(_trl(view, "gradient_accumulation_steps")),
        view.trl.get("generation_batch_size"),
        view.trl.get("steps_per_generation"),
    )
    if _trl(view, "eval_strategy") != "no" and not any(k == "both" for k, _ in found):
        eval_generations = view.trl.get("num_generations_eval") or view.trl.get("num_generations")
        eval_batch = int(_trl(view, "per_device_eval_batch_size"))
        problem = trl_batch.eval_problem(eval_batch, world, eval_generations)
        found += [("eval", problem)] if problem else []
    return found


def _generation(kind: str):
    def check(view: PlanView) -> object:
        if view.trainer not in GROUPED:
            return None
        for world in view.config_world_sizes:
            for name, message in generation_batches(view, world):
                if name == kind:
                    return message, _generation_fix(view, world)
        return None

    return check


def _generation_fix(view: PlanView, world: int) -> str:
    generations = int(_trl(view, "num_generations") or 2)
    per_device = int(_trl(view, "per_device_train_batch_size"))
    steps = int(_trl(view, "steps_per_generation", 0) or _trl(view, "gradient_accumulation_steps"))
    where = (
        "TRL builds the config in the `trl` process with world size 1 before launching, so "
        "the batch of one process must hold whole groups: "
        if view.launcher == "trl" and world == 1 and view.world_size > 1
        else ""
    )
    needed = next(
        (
            p
            for p in range(per_device, per_device * generations + 1)
            if (p * world * steps) % generations == 0
        ),
        generations,
    )
    return (
        f"{where}--per_device_train_batch_size {needed} (or a num_generations that divides "
        f"{per_device * world * steps})"
    )


def _num_generations_minimum(view: PlanView) -> str | None:
    generations = view.trl.get("num_generations")
    if view.trainer not in GROUPED or generations is None:
        return None
    return trl_batch.minimum_problem(view.trainer, generations)


def _auto_find_batch_size(view: PlanView) -> str | None:
    if view.trainer not in GROUPED or not view.trl.get("auto_find_batch_size"):
        return None
    name = "GRPO" if view.trainer == "grpo" else "RLOO"
    return (
        f"auto_find_batch_size is not supported by {name}, because the generation batch must "
        "contain full prompt groups of num_generations completions, and reducing the batch size "
        "on out-of-memory breaks this invariant. Set auto_find_batch_size=False and lower "
        "per_device_train_batch_size instead."
    )


# --------------------------------------------------------------------------------------
# Sequence parallelism
# --------------------------------------------------------------------------------------


def _parallel(view: PlanView, name: str) -> int:
    block = view.accelerate.get("parallelism_config")
    value = block.get(f"parallelism_config_{name}_size", 1) if isinstance(block, dict) else 1
    return value if isinstance(value, int) and value > 0 else 1


def _online_sequence_parallel(view: PlanView) -> str | None:
    cp, sp = _parallel(view, "cp"), _parallel(view, "sp")
    if view.trainer not in ONLINE or (cp == 1 and sp == 1):
        return None
    return (
        f"{view.trainer.upper()} with parallelism_config cp_size {cp}, sp_size {sp} from the "
        "accelerate config: TRL's check reads only the TRL config's parallelism_config, so it "
        "does not stop this, and the trainer builds its inputs after generation, where "
        "sequence sharding is not applied"
    )


def _recipe_parallelism_config(view: PlanView) -> str | None:
    if view.trainer not in ONLINE or not isinstance(view.trl.get("parallelism_config"), dict):
        return None
    return "'dict' object has no attribute 'cp_enabled'"


def _packing_with_context_parallel(view: PlanView) -> str | None:
    if view.trainer != "sft" or _parallel(view, "cp") == 1:
        return None
    if not (view.trl.get("packing") or view.trl.get("eval_packing")):
        return None
    return (
        "Packing is not compatible with context parallelism (`cp_size > 1`). Packing relies on a "
        "padding-free collator that concatenates sequences into a single row and resets "
        "`position_ids` at each boundary, which context parallelism cannot shard correctly. Set "
        "`packing=False` and `eval_packing=False`, or disable context parallelism."
    )


# --------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------


def _vllm(view: PlanView) -> bool:
    return view.trainer in ONLINE and bool(view.trl.get("use_vllm"))


def _colocate(view: PlanView) -> bool:
    return _vllm(view) and view.trl.get("vllm_mode") == "colocate"


def _server_mode(view: PlanView) -> bool:
    return _vllm(view) and view.trl.get("vllm_mode") == "server"


def _vllm_mode_invalid(view: PlanView) -> str | None:
    mode = view.trl.get("vllm_mode")
    if not _vllm(view) or mode in ("server", "colocate"):
        return None
    return f"vllm_mode must be either 'server' or 'colocate', got '{mode}'."


def _tp_divides_world(view: PlanView) -> str | None:
    if not _colocate(view):
        return None
    tp = int(_trl(view, "vllm_tensor_parallel_size"))
    if tp == 0:
        return "integer modulo by zero"  # ZeroDivisionError from the same check
    if view.world_size % tp == 0:
        return None
    return f"tensor_parallel_size ({tp}) must divide world size ({view.world_size}) evenly."


def _colocate_8bit(view: PlanView) -> str | None:
    if _colocate(view) and view.trl.get("load_in_8bit"):
        return "vLLM does not support in-flight 8-bit quantization."
    return None


def _server_url(view: PlanView) -> tuple:
    """(base URL, host, port) the trainer's VLLMClient connects to."""
    base = view.trl.get("vllm_server_base_url")
    if base:
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(base)
            return (
                base,
                parts.hostname or "",
                parts.port or (443 if parts.scheme == "https" else 80),
            )
        except ValueError:
            return base, "", None
    host = str(_trl(view, "vllm_server_host"))
    port = int(_trl(view, "vllm_server_port"))
    return f"http://{host}:{port}", host, port


def _server_unreachable(view: PlanView) -> object:
    if not _server_mode(view) or view.server is None:
        return None
    base, host, port = _server_url(view)
    if port == view.server.port and (host in LOCAL_HOSTS or host == view.server.host):
        return None
    timeout = float(_trl(view, "vllm_server_timeout"))
    message = (
        f"The vLLM server can't be reached at {redact_url_credentials(base)} after {timeout} "
        "seconds. Make sure the "
        "server is running by running `vllm serve`."
    )
    return message, f"--vllm_server_port {view.server.port} (the port the server listens on)"


def _server_gpu_overlap(view: PlanView) -> object:
    if not _server_mode(view) or view.server is None or not view.nodes:
        return None
    used = {_device_id(d) for d in view.nodes[0].used}
    shared = [d for d in view.server_devices if _device_id(d) in used]
    if not shared:
        return None
    names = ", ".join(str(d.get("index")) for d in shared)
    free = [d for d in view.nodes[0].visible if _device_id(d) not in used]
    return (
        f"the vLLM server and the trainer share GPU(s) {names}: the server reserves "
        f"{view.server.gpu_memory_utilization:g} of each GPU's memory for itself, so the trainer "
        "runs out of memory loading the model (or the server refuses to start)",
        _separate_fix(view, free),
    )


def _device_id(device: dict) -> object:
    return device.get("uuid") or device.get("index")


def _separate_fix(view: PlanView, free: list) -> str:
    need = view.server.tensor_parallel * view.server.data_parallel
    total = len(view.nodes[0].visible) if view.nodes else 0
    trainer = max(1, total - need)
    server_ids = ",".join(str(i) for i in range(trainer, trainer + need))
    trainer_ids = ",".join(str(i) for i in range(trainer))
    return (
        f"CUDA_VISIBLE_DEVICES={server_ids} for the server and CUDA_VISIBLE_DEVICES={trainer_ids} "
        f"with --num_processes {trainer} for the trainer"
    )


def _server_too_few_gpus(view: PlanView) -> str | None:
    if view.server is None or not view.nodes:
        return None
    need = view.server.tensor_parallel * view.server.data_parallel
    have = len(view.server_visible)
    if have >= need:
        return None
    return (
        f"the vLLM server needs tensor_parallel_size x data_parallel_size = {need} GPU(s) and "
        f"sees {have}"
    )


def _server_missing(view: PlanView) -> str | None:
    if not _server_mode(view) or view.server is not None or not view.nodes:
        return None
    _, host, _ = _server_url(view)
    node = view.nodes[0]
    if host not in LOCAL_HOSTS or len(node.used) < len(node.visible):
        return None
    return (
        f"vllm_mode server with the server on this host ({host or 'the base URL'}), but the "
        f"trainer's {len(node.used)} process(es) use every visible GPU: the server needs GPUs "
        "of its own"
    )


def _group_port_clash(view: PlanView) -> str | None:
    if not _server_mode(view):
        return None
    group = int(_trl(view, "vllm_group_port"))
    main = view.accelerate.get("main_process_port") or DEFAULT_MAIN_PORT
    _, _, server_port = _server_url(view)
    if group == main:
        return (
            f"vllm_group_port {group} is also the trainer's main_process_port: the weight-sync "
            "rendezvous cannot bind it"
        )
    if view.server is not None and group == view.server.port and not view.num_machines > 1:
        return f"vllm_group_port {group} is also the vLLM server's HTTP port on this host"
    return None


def _group_port_remote(view: PlanView) -> str | None:
    if not _server_mode(view):
        return None
    _, host, port = _server_url(view)
    if host in LOCAL_HOSTS:
        return None
    group = int(_trl(view, "vllm_group_port"))
    return (
        f"the vLLM server at {host}:{port} must reach TCP port {group} (vllm_group_port) on "
        "this trainer's host for the weight sync; open it in the firewall between them"
    )


def _server_timeout_exceeds_ddp(view: PlanView) -> str | None:
    if not _server_mode(view) or view.world_size < 2:
        return None
    timeout = float(_trl(view, "vllm_server_timeout"))
    ddp = int(_trl(view, "ddp_timeout"))
    if timeout <= ddp:
        return None
    return (
        f"vllm_server_timeout {timeout:g} s is longer than ddp_timeout {ddp} s: while rank 0 "
        "waits for the server, the other ranks wait at a barrier and the NCCL watchdog ends them "
        "first"
    )


SERVER_IGNORED = (
    "vllm_tensor_parallel_size", "vllm_gpu_memory_utilization", "vllm_max_model_length",
    "vllm_enable_sleep_mode", "vllm_model_impl",
)  # fmt: skip


def _server_ignores(view: PlanView) -> str | None:
    if not _server_mode(view):
        return None
    ignored = [name for name in SERVER_IGNORED if name in view.given]
    if not ignored:
        return None
    return f"{', '.join(ignored)} only apply to colocate mode; the server's own flags decide"


# --------------------------------------------------------------------------------------
# PEFT, Liger, precision
# --------------------------------------------------------------------------------------


def _lora_on_lm_head(view: PlanView) -> str | None:
    if view.trainer not in LM_HEAD_TRAINERS or not view.trl.get("use_peft"):
        return None
    if "lm_head" not in view.trl.get("lora_target_modules", []):
        return None
    if view.trainer == "distillation":
        return (
            "Applying a PEFT adapter to `lm_head` is not supported. The distillation loss reads "
            "`lm_head.weight` directly, so the adapter on the head is ignored and never trained. "
            "Remove `'lm_head'` from your `target_modules`."
        )
    return (
        "Applying a PEFT adapter to `lm_head` is not supported: the log-probabilities are "
        "computed from `lm_head.weight` directly, so the adapter would never be trained. Remove "
        "`'lm_head'` from your `target_modules`."
    )


def _four_and_eight_bit(view: PlanView) -> str | None:
    if view.trl.get("load_in_4bit") and view.trl.get("load_in_8bit"):
        return "You can't use 8 bit and 4 bit precision at the same time"
    return None


def _liger_deprecated(view: PlanView) -> str | None:
    if view.trainer not in LIGER_TRAINERS or not view.trl.get("use_liger_kernel"):
        return None
    return (
        "`use_liger_kernel=True` is deprecated and will be removed in v2.0.0. Use the Hub kernels "
        'instead, with `model_init_kwargs={"use_kernels": True}`.'
    )


def _liger_fused_cross_entropy(view: PlanView) -> str | None:
    config = json_kwargs(view.trl.get("liger_kernel_config"))
    if view.trainer not in LIGER_TRAINERS or not view.trl.get("use_liger_kernel"):
        return None
    if not config.get("fused_linear_cross_entropy"):
        return None
    return (
        '`liger_kernel_config={"fused_linear_cross_entropy": True}` is not supported: it '
        "replaces the model's forward, which this trainer patches with a fused LM head."
    )


def _bf16_without_device(view: PlanView) -> str | None:
    if not view.trl or not view.trl.get("bf16") or view.trl.get("use_cpu"):
        return None
    for node in view.nodes:
        if node.kind == "cpu" or (node.kind not in ("mps",) and not node.visible):
            return (
                "Your setup doesn't support bf16/gpu. You need to assign use_cpu if you want to "
                "train the model on CPU."
            )
        if node.kind == "mps":
            mac = (node.facts.get("platform") or {}).get("mac_version") or ""
            if mac and tuple(int(p) for p in mac.split(".")[:1] if p.isdigit()) < (14,):
                return (
                    "Your setup doesn't support bf16/gpu. You need to assign use_cpu if you want "
                    "to train the model on CPU."
                )
    return None


def _fp16_and_bf16(view: PlanView) -> str | None:
    if view.trl.get("fp16") and view.trl.get("bf16"):
        return "At most one of fp16 and bf16 can be True, but not both"
    return None


def _tf32_needs_ampere(view: PlanView) -> str | None:
    if view.trl.get("tf32") is not True:
        return None
    for node in view.nodes:
        cc = getattr(node.ctx, "min_cc", None)
        if node.kind != "cuda" or not node.visible or cc is None or cc < (8, 0):
            return "--tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7"
    return None


# --------------------------------------------------------------------------------------
# Memory (memory.py's estimate for the plan's strategy on the smallest GPU it uses)
# --------------------------------------------------------------------------------------


def _memory_advice(view: PlanView) -> str:
    advice = view.memory.get("recommendation") or {}
    if not advice.get("fits"):
        return advice.get("reason") or "more GPUs, or GPUs with more memory"
    changes = "; ".join(advice.get("changes") or [])
    return f"{advice.get('strategy')}" + (f" with {changes}" if changes else "")


def _memory_exceeds(view: PlanView) -> object:
    """The plan's strategy does not fit: the GPU, vLLM's share of it, or the host RAM that
    offload needs (memory.fits: the estimator's own verdict)."""
    m = view.memory
    if "total_gb" not in m:
        return None
    if m["total_gb"] > m["gpu_gb"]:
        message = (
            f"{m['strategy']} needs about {m['total_gb']:g} GB per GPU; the smallest GPU used has "
            f"{m['gpu_gb']:g} GB (a {m['gpu_gib']:g} GiB card)"
        )
    elif m.get("vllm_fits") is False:
        message = (
            f"vLLM needs about {m['vllm_needed_gb']:g} GB per GPU (weights, KV cache, runtime) "
            f"but gets {m['vllm_share_gb']:g} GB (vllm_gpu_memory_utilization x GPU): it cannot "
            "start"
        )
    elif m.get("host_fits") is False:
        message = (
            f"{m['strategy']} offloads about {m['host_needed_gb']:g} GB to each node's RAM; the "
            f"smallest node has {m['host_ram_gb']:g} GB"
        )
    else:
        return None
    return message, _memory_advice(view)


def _memory_tight(view: PlanView) -> object:
    m = view.memory
    if "total_gb" not in m or not m["usable_gb"] < m["total_gb"] <= m["gpu_gb"]:
        return None
    message = (
        f"{m['strategy']} needs about {m['total_gb']:g} GB per GPU, more than the "
        f"{m['usable_gb']:g} GB left after headroom on {m['gpu_gib']:g} GiB cards"
    )
    return message, _memory_advice(view)


def _memory_unknown(view: PlanView) -> str | None:
    reason = view.memory.get("unknown")
    if not reason or not view.trainer:
        return None
    return f"memory fit not judged: {reason}"


# --------------------------------------------------------------------------------------
# The machines of a multi-node plan
# --------------------------------------------------------------------------------------


def _node_version_skew(view: PlanView) -> str | None:
    if len(view.nodes) < 2:
        return None
    skewed = []
    for name in SKEW_PACKAGES:
        versions = {n.label: (n.ctx.versions.get(name) if n.ctx else None) for n in view.nodes}
        if len(set(versions.values())) > 1:
            skewed.append(f"{name} " + " / ".join(f"{v or 'absent'}" for v in versions.values()))
    cudas = [str((n.facts.get("torch_build") or {}).get("cuda")) for n in view.nodes]
    if len(set(cudas)) > 1:
        skewed.append("torch CUDA " + " / ".join(cudas))
    drivers = [str((n.facts.get("accelerators") or {}).get("driver_version")) for n in view.nodes]
    if len(set(drivers)) > 1:
        skewed.append("driver " + " / ".join(drivers))
    if not skewed:
        return None
    return f"the nodes differ: {'; '.join(skewed)}"


def _node_gpu_mismatch(view: PlanView) -> str | None:
    if len(view.nodes) < 2:
        return None
    shapes = {n.label: (len(n.visible), _gpu_names(n)) for n in view.nodes}
    if len(set(shapes.values())) == 1:
        return None
    parts = [f"{label}: {count} x {names or 'no GPU'}" for label, (count, names) in shapes.items()]
    return f"the nodes have different GPUs ({'; '.join(parts)})"


def _gpu_names(node: Node) -> str:
    return ", ".join(sorted({str(d.get("name")) for d in node.visible}))


def _node_count(view: PlanView) -> str | None:
    facts_nodes = len(view.nodes)
    if view.num_machines == facts_nodes or facts_nodes == 1:
        return None
    return (
        f"the launch runs on {view.num_machines} machine(s) but facts were given for {facts_nodes}"
    )


def _trl_line_differs(view: PlanView) -> str | None:
    lines = {
        release_line(n.ctx.versions.get("trl"))
        for n in view.nodes
        if n.ctx and n.ctx.versions.get("trl")
    }
    if not lines or lines == {"1.16"}:
        return None
    return (
        f"TRL {' / '.join(sorted(str(x) for x in lines))} on the target: these rules describe "
        "TRL 1.16.0"
    )


# --------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------

TRAINING_PY = "TRL 1.16.0 trl/cli/commands/training.py:64"
GRPO_CONFIG = "TRL 1.16.0 trl/trainer/grpo_config.py"
RLOO_CONFIG = "trl/trainer/rloo_config.py"
VLLM_GENERATION = "TRL 1.16.0 trl/generation/vllm_generation.py"

PLAN_RULES = (
    PlanRule("trl-rejects-argument", "error", "launch", _failure("trl-rejects-argument"),
             "fix the value (a `--flag` of a bool | None field such as --bf16 needs a value: "
             "--bf16 true)",
             "the `trl` command parses its arguments with the trainer's dataclasses before "
             "launching, and argparse exits on a value of the wrong type or choice",
             "TRL 1.16.0 trl/scripts/_hf_argparser.py _parse_dataclass_field"),
    PlanRule("script-rejects-argument", "error", "config", _failure("script-rejects-argument"),
             "fix the value (a `--flag` of a bool | None field such as --bf16 needs a value: "
             "--bf16 true)",
             "each launched process parses the script's arguments with TRL's dataclasses, and "
             "argparse exits on a value of the wrong type or choice",
             "TRL 1.16.0 trl/scripts/_hf_argparser.py _parse_dataclass_field"),
    PlanRule("recipe-value-type", "error", "config", _failure("recipe-value-type"),
             "write the value as the field's type (a number, true/false, a list)",
             "argparse converts only text, so a recipe's list, mapping or bool reaches the "
             "config as it is, and its checks or the trainer fail on it",
             "TRL 1.16.0 trl/scripts/utils.py set_defaults_with_config (action.default)"),
    PlanRule("accelerate-rejects-argument", "error", "launch", _unrecognized,
             "fix the spelling; every argument TRL does not know goes to `accelerate launch`",
             "`trl` hands every argument its dataclasses do not know (from the command line or "
             "the recipe) to `accelerate launch`, whose parser refuses unknown names",
             TRAINING_PY + "; accelerate 1.15.0 commands/launch.py launch_command_parser"),
    PlanRule("accelerate-config-name", "error", "launch", _failure("accelerate-config-name"),
             "one of single_gpu, multi_gpu, zero1, zero2, zero3, fsdp1, fsdp2, or a path to a "
             "YAML file (on the machine where `trl` runs)",
             "`--accelerate_config` takes a file path or a config shipped in TRL",
             "TRL 1.16.0 trl/cli/accelerate_config.py:40"),
    PlanRule("script-unknown-arguments", "error", "config", _script_unknown_args,
             "remove or fix those arguments",
             "TRL's scripts parse their command line with fail_with_unknown_args=False, which "
             "still refuses command-line strings no dataclass takes",
             "TRL 1.16.0 trl/scripts/_hf_argparser.py:380 parse_args_into_dataclasses"),
    PlanRule("user-script-unknown-arguments", "info", "config", _user_script_unknown_args,
             "check the names; fine if the script adds a dataclass of its own",
             "a script of your own may parse more than TRL's dataclasses",
             "TRL 1.16.0 trl/scripts/_hf_argparser.py parse_args_into_dataclasses"),
    PlanRule("json-argument-invalid", "error", "config", _json_argument_invalid,
             "quote the JSON for the shell: --model_init_kwargs '{\"dtype\": \"bfloat16\"}'",
             "a dict-valued argument given as text starting with '{' is parsed as JSON when the "
             "config is built",
             "transformers 5.24.0 training_args.py:1529 (json.loads); TRL 1.16.0 "
             "_VALID_DICT_FIELDS of each config"),
    PlanRule("dataset-missing", "error", "config", _no_dataset,
             "--dataset_name NAME (or a datasets: list in the recipe)",
             "TRL's training scripts load the dataset before building the trainer",
             "TRL 1.16.0 trl/scripts/sft.py:100 (and each trl/scripts/<cmd>.py)"),
    PlanRule("trainer-unknown", "info", "config", _unknown_trainer,
             "pass --trainer sft|dpo|grpo|rloo|kto|reward|distillation before --",
             "the preflight judges TRL arguments with the config class they feed",
             "scripts/preflight.py"),
    PlanRule("gpus-idle", "info", "launch", _idle_gpus,
             "--num_processes equal to the visible GPUs, or CUDA_VISIBLE_DEVICES naming the GPUs "
             "to use",
             "each process drives one GPU; the others stay unused",
             "accelerate 1.15.0 utils/launch.py prepare_multi_gpu_env (nproc_per_node)"),
    PlanRule("generation-batch-groups", "error", "config", _generation("groups"),
             "a per_device_train_batch_size (or steps_per_generation) that makes whole groups",
             "the generation batch (per_device_train_batch_size x processes x "
             "steps_per_generation) must hold whole groups of num_generations completions; TRL "
             "checks it with the world size of the process that builds the config",
             f"{GRPO_CONFIG}:1133, {RLOO_CONFIG}:696 (world size: transformers "
             "training_args.py world_size)"),
    PlanRule("generation-batch-global", "error", "config", _generation("global"),
             "a generation_batch_size that is a multiple of per_device_train_batch_size x "
             "processes",
             "an explicit generation_batch_size must split into whole global batches",
             f"{GRPO_CONFIG}:1105, {RLOO_CONFIG}:668"),
    PlanRule("generation-batch-both-set", "error", "config", _generation("both"),
             "set generation_batch_size or steps_per_generation, not both",
             "each is derived from the other",
             f"{GRPO_CONFIG}:1115, {RLOO_CONFIG}:678"),
    PlanRule("eval-batch-generations", "error", "config", _generation("eval"),
             "a per_device_eval_batch_size (or num_generations_eval) that makes whole groups",
             "evaluation generates num_generations_eval completions per prompt",
             f"{GRPO_CONFIG}:1125, {RLOO_CONFIG}:688"),
    PlanRule("num-generations-minimum", "error", "config", _num_generations_minimum,
             "--num_generations 2 or more",
             "group-relative advantages need two completions per prompt",
             f"{GRPO_CONFIG}:1139, {RLOO_CONFIG}:702"),
    PlanRule("auto-find-batch-size-online", "error", "config", _auto_find_batch_size,
             "--auto_find_batch_size false and a smaller per_device_train_batch_size",
             "shrinking the batch on OOM would break whole generation groups",
             f"{GRPO_CONFIG}:1091, {RLOO_CONFIG}:654"),
    PlanRule("online-sequence-parallel", "warning", "first step", _online_sequence_parallel,
             "drop parallelism_config cp_size/sp_size for GRPO/RLOO/distillation (shard with "
             "ZeRO-3/FSDP2 instead)",
             "TRL states these trainers do not support sequence-dim parallelism; its config check "
             "raises only for the TRL config's own parallelism_config",
             "TRL 1.16.0 trl/trainer/grpo_config.py:1068, rloo_config.py:640, "
             "distillation_config.py:411"),
    PlanRule("recipe-parallelism-config", "error", "config", _recipe_parallelism_config,
             "remove parallelism_config from the recipe; put parallelism_config_cp_size / _sp_size "
             "in the accelerate config (GRPO/RLOO/distillation support neither)",
             "a recipe mapping reaches the config as a dict, and the online configs read "
             "parallelism_config.cp_enabled from it",
             "TRL 1.16.0 trl/trainer/grpo_config.py:1069 (rloo_config.py:640, "
             "distillation_config.py:412)"),
    PlanRule("packing-with-context-parallel", "error", "trainer init",
             _packing_with_context_parallel, "--packing false (and --eval_packing false)",
             "SFT reads the accelerator's parallelism_config, so a cp_size from the accelerate "
             "config counts",
             "TRL 1.16.0 trl/trainer/sft_trainer.py:1157"),
    PlanRule("vllm-mode-invalid", "error", "trainer init", _vllm_mode_invalid,
             "--vllm_mode colocate or --vllm_mode server",
             "the config accepts any text; the generation backend checks it when the trainer is "
             "built, after the model is loaded",
             f"{VLLM_GENERATION}:370"),
    PlanRule("vllm-tp-divides-world", "error", "trainer init", _tp_divides_world,
             "a vllm_tensor_parallel_size that divides the process count",
             "colocated vLLM groups consecutive ranks into tensor-parallel groups",
             f"{VLLM_GENERATION}:316"),
    PlanRule("vllm-colocate-8bit", "error", "trainer init", _colocate_8bit,
             "--load_in_4bit instead of --load_in_8bit, or vllm_mode server",
             "colocated vLLM loads the policy's weights and cannot run bitsandbytes 8-bit",
             f"{VLLM_GENERATION}:344"),
    PlanRule("vllm-server-gpu-overlap", "error", "model load", _server_gpu_overlap,
             "give the server and the trainer disjoint GPUs",
             "TRL 1.16.0 no longer checks this itself (the old TRL server did)",
             "references/vllm-reference.md (server layout); TRL 1.16.0 trl/scripts/"
             "vllm_serve.py gpu_memory_utilization default 0.9"),
    PlanRule("vllm-server-too-few-gpus", "error", "launch", _server_too_few_gpus,
             "make tensor_parallel_size x data_parallel_size GPUs visible to the server",
             "vLLM starts one worker per GPU of its parallel layout",
             "vLLM engine: world size = tensor_parallel_size x data_parallel_size"),
    PlanRule("vllm-server-unreachable", "error", "trainer init", _server_unreachable,
             "point the trainer at the server's host and port",
             "only the main process connects, at trainer init, polling /health every 2 s until "
             "vllm_server_timeout",
             "TRL 1.16.0 trl/generation/vllm_client.py:289"),
    PlanRule("vllm-server-missing", "warning", "trainer init", _server_missing,
             "leave GPUs for the server (CUDA_VISIBLE_DEVICES and --num_processes), or point "
             "--vllm_server_base_url at a server elsewhere; include the server command in the "
             "preflight with &",
             "server mode talks to a `vllm serve` process the trainer does not start",
             f"{VLLM_GENERATION}:300"),
    PlanRule("vllm-group-port-clash", "error", "weight sync", _group_port_clash,
             "--vllm_group_port 51217 (any free port the server can reach)",
             "the trainer is rank 0 of the weight-sync group and listens on vllm_group_port",
             "TRL 1.16.0 trl/generation/vllm_client.py:746 init_communicator (master_port)"),
    PlanRule("vllm-group-port-remote", "info", "weight sync", _group_port_remote,
             "allow the server host to connect to vllm_group_port on the trainer host",
             "the trainer's rank 0 is the rendezvous master of the weight-sync group; the "
             "server's workers connect to it",
             "TRL 1.16.0 trl/generation/vllm_client.py:746 init_communicator (master_port)"),
    PlanRule("vllm-server-timeout-over-ddp", "warning", "trainer init",
             _server_timeout_exceeds_ddp, "raise --ddp_timeout above vllm_server_timeout",
             "rank 0 polls the server inside the trainer's constructor while the other ranks "
             "wait at a barrier bounded by ddp_timeout",
             f"{VLLM_GENERATION}:375; transformers 5.24.0 training_args.py:1891"),
    PlanRule("vllm-server-settings-ignored", "info", "trainer init", _server_ignores,
             "set tensor parallelism and memory on the server's command line",
             "in server mode the trainer only sends requests",
             "TRL 1.16.0 trl/trainer/grpo_config.py vllm_* field help (colocate only)"),
    PlanRule("lora-on-lm-head", "error", "trainer init", _lora_on_lm_head,
             "remove lm_head from --lora_target_modules",
             "TRL's fused LM head reads lm_head.weight directly",
             "TRL 1.16.0 trl/trainer/sft_trainer.py:1070 (grpo_trainer.py:840, dpo_trainer.py:"
             "839, rloo_trainer.py:629, kto_trainer.py:852, distillation_trainer.py:588)"),
    PlanRule("quantization-4bit-and-8bit", "error", "config", _four_and_eight_bit,
             "keep one of --load_in_4bit and --load_in_8bit",
             "bitsandbytes loads a model in one precision",
             "TRL 1.16.0 trl/trainer/model_config.py:175"),
    PlanRule("liger-deprecated", "warning", "trainer init", _liger_deprecated,
             '--model_init_kwargs \'{"use_kernels": true}\' (Hub kernels)',
             "TRL applies only Liger's layer kernels: its fused LM head replaces Liger's fused "
             "linear cross-entropy",
             "TRL 1.16.0 trl/trainer/sft_trainer.py:1129 (grpo_trainer.py:1053, dpo_trainer.py:"
             "941, rloo_trainer.py:701, kto_trainer.py:952)"),
    PlanRule("liger-fused-cross-entropy", "error", "trainer init", _liger_fused_cross_entropy,
             "remove fused_linear_cross_entropy from liger_kernel_config",
             "TRL's fused LM head already avoids the full logits",
             "TRL 1.16.0 trl/trainer/sft_trainer.py:1137 (grpo_trainer.py:1061)"),
    PlanRule("bf16-without-bf16-device", "error", "config", _bf16_without_device,
             "--bf16 false (fp32), or --use_cpu true to train on the CPU",
             "TRL's configs default to bf16=True",
             "transformers 5.24.0 training_args.py:1779; TRL 1.16.0 trl/trainer/base_config.py"),
    PlanRule("fp16-and-bf16", "error", "config", _fp16_and_bf16,
             "--bf16 false when you pass --fp16 (TRL turns bf16 on unless fp16 is set)",
             "one mixed precision at a time",
             "transformers 5.24.0 training_args.py:1785"),
    PlanRule("tf32-needs-ampere", "error", "config", _tf32_needs_ampere,
             "drop --tf32 on GPUs older than Ampere",
             "TF32 matmuls exist from compute capability 8.0",
             "transformers 5.24.0 training_args.py:1682"),
    PlanRule("memory-exceeds-gpu", "error", "first step", _memory_exceeds,
             "the estimator's least invasive plan that fits",
             "estimate_memory.py's arithmetic for this strategy, model, batch and sequence length "
             "(its stated assumptions apply)",
             "scripts/_scaling/memory.py estimate_strategy, recommend"),
    PlanRule("memory-tight", "warning", "first step", _memory_tight,
             "the estimator's least invasive plan that fits",
             "fragmentation and CUDA/NCCL context need the headroom",
             "scripts/_scaling/memory.py usable_bytes (headroom)"),
    PlanRule("memory-unknown", "info", "first step", _memory_unknown,
             "--model-config PATH/config.json (or the model in the local Hugging Face cache)",
             "the estimate needs the model's config.json and the GPUs' memory",
             "scripts/_scaling/model_source.py (local files only, never the network)"),
    PlanRule("node-version-skew", "warning", "launch", _node_version_skew,
             "install the same versions on every node (pip freeze on one, install on the others)",
             "collectives between different torch/NCCL builds are not guaranteed to agree; "
             "different TRL/transformers releases run different code on each rank",
             "the facts of each node (check_optional_backends.py --json)"),
    PlanRule("node-gpu-mismatch", "warning", "launch", _node_gpu_mismatch,
             "use nodes with the same GPUs, or plan for the smallest",
             "every rank gets the same share of work; the smallest or slowest GPU sets the pace",
             "the facts of each node"),
    PlanRule("node-count", "info", "launch", _node_count,
             "give --facts once per node, in machine_rank order",
             "each node is judged with its own facts",
             "scripts/preflight.py"),
    PlanRule("trl-release-differs", "warning", "config", _trl_line_differs,
             "pip install trl==1.16.0 on the target, or read the results as TRL 1.16.0's",
             "rules and the embedded argument table are those of TRL 1.16.0",
             "scripts/_scaling/launch_tables.py TRL_RELEASE"),
)  # fmt: skip


def plan_findings(view: PlanView) -> list:
    """[{id, severity, stage, message, why, fix, source}] for every rule the plan breaks."""
    findings = []
    for rule in PLAN_RULES:
        result = rule.check(view)
        if not result:
            continue
        message, fix = result if isinstance(result, tuple) else (result, rule.fix)
        findings.append(
            {"id": rule.id, "severity": rule.severity, "stage": rule.stage, "message": message,
             "why": rule.why, "fix": fix, "source": rule.source}
        )  # fmt: skip
    return findings
