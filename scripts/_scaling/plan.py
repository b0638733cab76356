"""The preflight's judgement of a planned launch: the COMMAND resolved (launch.py), its TRL
arguments (trl_args.py, and TRL itself in a child when it is installed), each node's facts, the
memory estimate (memory.py), then every rule of config_rules.CONFIG_RULES (with the backend
verdicts of verdicts.py) and plan_rules.PLAN_RULES. `build_plan` collects, `judge_plan` is a pure
function of what was collected."""

from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple

from . import launch, memory, model_shape, plan_rules, trl_args, verdicts
from .accelerators import VISIBILITY_VARIABLES, parse_visible_devices
from .cli import UsageError
from .config_rules import BACKEND_STAGES, TRL_DEFAULTS, Launch
from .environment import redact, redact_url_credentials
from .facts import host_ram_bytes
from .model_source import find_model_config, read_model_config

SCHEMA_VERSION = 1
SEVERITIES = ("error", "warning", "info")
STAGES = ("launch", "config", "model load", "trainer init", "first step", "weight sync")
GPU_KINDS = ("cuda", "rocm", "xpu", "npu")
# Rules whose check TRL's config classes run in __post_init__: the child confirms them.
CONFIG_CLASS_RULES = (
    "generation-batch-groups", "generation-batch-global", "generation-batch-both-set",
    "eval-batch-generations", "num-generations-minimum", "auto-find-batch-size-online",
    "quantization-4bit-and-8bit", "bf16-without-bf16-device", "fp16-and-bf16", "tf32-needs-ampere",
    "trl-rejects-argument", "script-unknown-arguments", "script-rejects-argument",
    "recipe-value-type",
)  # fmt: skip


class Collected(NamedTuple):
    """Everything the judgement reads."""

    command: list
    resolved: launch.Resolved
    server: launch.Server | None
    nodes: list  # [(label, facts)]
    probe: dict | None  # trl_probe's report, or {"unavailable": reason}, or None (not asked)
    model: dict  # {"config": dict or None, "source": str, "name": str or None}
    options: dict  # headroom, ...


# --------------------------------------------------------------------------------------
# Collect
# --------------------------------------------------------------------------------------


def default_config(facts: dict) -> dict | None:
    """The target's default accelerate config (facts['config'] when it is the default one)."""
    config = facts.get("config") or {}
    values = config.get("values")
    if config.get("source") in ("default", "recorded") and isinstance(values, dict) and values:
        return values
    return None


def visible_devices(facts: dict, env: dict) -> list:
    """The devices a process started with `env` sees on the machine of `facts`."""
    acc = facts.get("accelerators") or {}
    kind = acc.get("kind") or "cpu"
    devices = [d for d in acc.get("devices") or [] if isinstance(d, dict)]
    if kind not in VISIBILITY_VARIABLES:
        return devices
    for name in VISIBILITY_VARIABLES[kind]:
        if name in env:
            devices, _ = parse_visible_devices(name, env[name], devices)
    return devices


def target_answers(facts: dict) -> dict:
    """What TRL's config asks about the device, answered for the target machine."""
    acc = facts.get("accelerators") or {}
    kind = acc.get("kind") or "cpu"
    ctx = verdicts.make_context(facts)
    has_devices = bool(ctx.devices)
    bf16 = (kind in GPU_KINDS and has_devices) or kind == "mps"
    if kind == "mps":
        mac = (facts.get("platform") or {}).get("mac_version") or ""
        bf16 = bool(mac) and mac.split(".")[0].isdigit() and int(mac.split(".")[0]) >= 14
    tf32 = kind == "cuda" and ctx.min_cc is not None and ctx.min_cc >= (8, 0)
    return {"bf16": bf16, "tf32": tf32, "cuda": kind == "cuda" and has_devices}


def config_world_sizes(resolved: launch.Resolved) -> tuple:
    """The world sizes TRL builds the config with: `trl` builds it once in its own process
    (world size 1) before launching, then each launched process builds it again."""
    world = resolved.world_size
    if resolved.launcher == "trl":
        return (1, world) if world > 1 else (1,)
    return (world,)


def start_trl_probe(resolved: launch.Resolved, facts: dict, timeout: float) -> object:
    """The child that parses with TRL itself, or None (no trainer, or no TRL here)."""
    if not resolved.trainer or not trl_args.trl_importable():
        return None
    kind = "trl" if resolved.launcher == "trl" else resolved.script_kind
    args = resolved.command_args
    return trl_args.start_probe(
        resolved.trainer, kind, args, list(config_world_sizes(resolved)), target_answers(facts),
        timeout,
    )  # fmt: skip


def model_of(resolved: launch.Resolved, model_config: str | None, env: dict) -> dict:
    name = (resolved.parse.values.get("model_name_or_path") if resolved.parse else None) or None
    if model_config:
        config = read_model_config(model_config)
        if config is None:
            raise UsageError(f"--model-config {model_config}: not a readable config.json")
        return {"config": config, "source": model_config, "name": name}
    revision = resolved.parse.values.get("model_revision") if resolved.parse else None
    path, looked = find_model_config(name, revision, env)
    config = read_model_config(path) if path else None
    return {"config": config, "source": path if config else f"not found: {looked}", "name": name}


# --------------------------------------------------------------------------------------
# Judge
# --------------------------------------------------------------------------------------


def nodes_of(collected: Collected) -> list:
    r = collected.resolved
    nodes = []
    for label, facts in collected.nodes:
        ctx = verdicts.make_context(facts)
        visible = visible_devices(facts, r.env)
        children = visible
        if r.gpu_ids not in (None, "all") and ctx.kind == "cuda":
            # accelerate sets CUDA_VISIBLE_DEVICES=gpu_ids for the processes it starts
            children, _ = parse_visible_devices("CUDA_VISIBLE_DEVICES", str(r.gpu_ids), ctx.devices)
        used = children if r.distributed_type == "NO" else children[: r.processes_per_node]
        nodes.append(plan_rules.Node(label, ctx.kind, children, used, facts, ctx))
    return nodes


def server_devices(collected: Collected, node: plan_rules.Node | None) -> tuple:
    server = collected.server
    if server is None or node is None:
        return (), ()
    visible = visible_devices(node.facts, server.env)
    return tuple(visible), tuple(visible[: server.tensor_parallel * server.data_parallel])


def raw_values(collected: Collected) -> dict:
    """TRL's own parse when the child answered, else the embedded table's."""
    passes = (collected.probe or {}).get("passes") or []
    if passes and passes[0].get("raw"):
        return dict(passes[0]["raw"])
    return dict(collected.resolved.parse.values) if collected.resolved.parse else {}


def unknown_args(collected: Collected) -> tuple:
    r = collected.resolved
    if r.launcher == "trl" or r.parse is None:
        return ()
    rest = list(r.parse.cli_remaining)
    if r.trainer_source == "the script's --trainer argument" and "--trainer" in rest:
        index = rest.index("--trainer")
        del rest[index : index + 2]
    return tuple(rest)


def make_view(collected: Collected, nodes: list) -> plan_rules.PlanView:
    r = collected.resolved
    # After a refused argument the values are argparse's defaults: no TRL rule may read them.
    refused = any(i in PARSE_REFUSALS for i, _ in r.failures)
    trl = (
        {}
        if refused or not r.trainer
        else plan_rules.effective_trl(raw_values(collected), r.script_kind)
    )
    server_visible, server_used = server_devices(collected, nodes[0] if nodes else None)
    view = plan_rules.PlanView(
        r.trainer, r.launcher, r.script_kind, trl, r.parse.given if r.parse else frozenset(),
        r.world_size, config_world_sizes(r), r.processes_per_node, r.num_machines,
        r.distributed_type, r.values, tuple(r.failures), unknown_args(collected), tuple(nodes),
        collected.server, server_visible, server_used, r.env, {},
    )  # fmt: skip
    return view._replace(memory=memory_view(collected, view))


def launch_rule_findings(view: plan_rules.PlanView, collected: Collected) -> list:
    """CONFIG_RULES and backend verdicts, once per node (a multi-node message names the node)."""
    r = collected.resolved
    findings = []
    for node in view.nodes:
        trl = view.trl or dict(TRL_DEFAULTS)
        launch_view = Launch(
            r.values, trl, len(node.visible), node.ctx.min_cc, r.flags, config_path(r)
        )
        backends = verdicts.judge_backends(node.ctx)
        for finding in verdicts.launch_findings(launch_view, backends):
            backend = (
                finding["id"][len("backend-") :] if finding["id"].startswith("backend-") else ""
            )
            finding["stage"] = BACKEND_STAGES.get(backend, finding["stage"])
            if len(view.nodes) > 1:
                finding["message"] = f"{node.label}: {finding['message']}"
            finding.setdefault("why", "")
            findings.append(finding)
    return findings


def config_path(resolved: launch.Resolved) -> str | None:
    source = resolved.config_source
    if source and source.startswith("shipped:"):
        return f"trl/accelerate_configs/{source[len('shipped:') :]}.yaml"
    return source


def memory_view(collected: Collected, view: plan_rules.PlanView) -> dict:
    """The estimator's verdict for the plan's strategy on the smallest GPU it uses."""
    model = collected.model
    if not view.trainer:
        return {"unknown": "the trainer is unknown"}
    if view.trainer not in memory.TRAINERS:
        return {"unknown": f"the estimator has no model of the {view.trainer} trainer"}
    if model.get("config") is None:
        return {"unknown": f"model config {model.get('source')}; pass --model-config PATH"}
    memories = [d.get("memory_total_mib") for n in view.nodes for d in n.used]
    if not memories or not all(isinstance(m, int) for m in memories):
        return {"unknown": "the GPUs' memory is not known from the facts"}
    try:
        shape = model_shape.count_params(model["config"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError, UsageError) as exc:
        return {"unknown": f"cannot count the model's parameters ({exc})"}
    # The card size as estimate_memory.py reads a detected GPU (memory.card_gib), in GB.
    card = memory.card_gib(min(memories) / 1024)
    settings = memory_settings(view, card * memory.GIB / memory.GB, collected)
    strategy = strategy_of(view)
    try:
        memory.check_settings(shape, settings)
        estimate = memory.estimate_strategy(shape, settings, strategy)
        advice = memory.recommend(shape, settings)
        need = memory.vllm_need(shape, settings)
    except UsageError as exc:
        return {"unknown": str(exc)}

    def gb(value: float) -> float:
        return round(value / memory.GB, 2)

    return {
        "strategy": strategy,
        "params": shape.params,
        "total_gb": gb(estimate.total),
        "gpu_gb": round(settings.gpu_memory_gb, 2),
        "gpu_gib": round(card, 2),
        "usable_gb": gb(memory.usable_bytes(settings)),
        "vllm_fits": estimate.vllm_fits,
        "vllm_needed_gb": gb(need.needed) if need else None,
        "vllm_share_gb": gb(need.share) if need else None,
        "host_fits": memory.host_fits(estimate, settings),
        "host_needed_gb": gb(memory.host_bytes_per_node(estimate, settings)),
        "host_ram_gb": settings.cpu_memory_gb,
        "recommendation": advice,
        "settings": {k: v for k, v in dataclasses.asdict(settings).items() if v is not None},
    }


OPTIMIZERS = {
    "adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_8bit": "adamw_8bit",
    "adamw_bnb_8bit": "adamw_8bit", "paged_adamw_32bit": "paged_adamw",
    "paged_adamw_8bit": "paged_adamw_8bit", "adafactor": "adafactor", "sgd": "sgd",
}  # fmt: skip


def _host_ram_gb(view: plan_rules.PlanView) -> float | None:
    """The smallest host RAM among the plan's nodes, in GB, when every node recorded it."""
    rams = [host_ram_bytes(node.facts) for node in view.nodes]
    if not rams or None in rams:
        return None
    return round(min(rams) / memory.GB, 2)


def memory_settings(view: plan_rules.PlanView, gpu_gb: float, collected: Collected) -> object:
    trl = view.trl
    tuning = "full"
    if trl.get("use_peft"):
        tuning = "qlora" if trl.get("load_in_4bit") else "lora"
    dtype = trl.get("model_init", {}).get("dtype") or "float32"  # trl/trainer/utils.py:1332
    if dtype == "auto":
        config = collected.model.get("config") or {}
        dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    attention = str(trl.get("attn_implementation") or "sdpa")
    fields = {
        "trainer": view.trainer,
        "tuning": tuning,
        "lora_r": int(trl.get("lora_r") or 16),
        "lora_targets": ",".join(trl.get("lora_target_modules") or []) or "all-linear",
        "dtype": memory.DTYPE_ALIASES.get(dtype, "fp32"),
        "optimizer": OPTIMIZERS.get(str(trl.get("optim")), "adamw"),
        "seq_len": sequence_length(view),
        "batch_size": int(trl.get("per_device_train_batch_size") or 8),
        "gradient_checkpointing": bool(trl.get("gradient_checkpointing")),
        "gpus": max(1, view.world_size if view.distributed_type != "NO" else 1),
        "gpu_memory_gb": gpu_gb,
        "vllm_mode": (trl.get("vllm_mode") if trl.get("use_vllm") else "none") or "none",
        "attention": "flash" if attention.startswith("flash") else (
            "eager" if attention == "eager" else "sdpa"),
        "beta": trl.get("beta"),
        "precompute_ref_log_probs": bool(trl.get("precompute_ref_log_probs")),
        "double_quant": bool(trl.get("use_bnb_nested_quant")),
        "gradient_accumulation_steps": int(trl.get("gradient_accumulation_steps") or 1),
        "steps_per_generation": trl.get("steps_per_generation"),
        "num_generations": trl.get("num_generations"),
        "vllm_tensor_parallel_size": int(trl.get("vllm_tensor_parallel_size") or 1),
        "vllm_max_model_length": trl.get("vllm_max_model_length"),
        "vllm_enable_sleep_mode": bool(trl.get("vllm_enable_sleep_mode")),
        "vllm_gpu_memory_utilization": trl.get("vllm_gpu_memory_utilization")
        if "vllm_gpu_memory_utilization" in view.given else None,
        "compute_dtype": "bf16" if trl.get("bf16") else ("fp16" if trl.get("fp16") else None),
        "headroom": collected.options.get("headroom", 0.1),
        "cpu_memory_gb": _host_ram_gb(view),
    }  # fmt: skip
    if fields["vllm_mode"] not in ("none", "colocate", "server"):
        fields["vllm_mode"] = "none"
    if fields["vllm_gpu_memory_utilization"] is None and fields["vllm_mode"] == "colocate":
        fields["vllm_gpu_memory_utilization"] = trl.get("vllm_gpu_memory_utilization")
    known = {f.name for f in dataclasses.fields(memory.Settings)}
    return memory.Settings(**{k: v for k, v in fields.items() if k in known and v is not None})


def sequence_length(view: plan_rules.PlanView) -> int:
    """Tokens per sequence: max_length, or for online trainers the completion length plus an
    assumed 512-token prompt (GRPOConfig has no prompt limit), or vllm_max_model_length."""
    trl = view.trl
    if view.trainer in plan_rules.ONLINE:
        if trl.get("vllm_max_model_length"):
            return int(trl["vllm_max_model_length"])
        return int(trl.get("max_completion_length") or 512) + 512
    return int(trl.get("max_length") or 1024)


def strategy_of(view: plan_rules.PlanView) -> str:
    """The estimator's name for the plan's sharding (memory.STRATEGIES)."""
    values = view.accelerate
    if view.distributed_type == "DEEPSPEED":
        ds = values.get("deepspeed_config") or {}
        stage = ds.get("zero_stage")
        params = str(ds.get("offload_param_device") or "none") != "none"
        optimizer = str(ds.get("offload_optimizer_device") or "none") != "none"
        name = {0: "ddp", 1: "zero1", 2: "zero2"}.get(stage, "zero3")
        if name == "zero3" and params:
            name = "zero3_offload"
        elif name in ("zero2", "zero3") and optimizer:
            name += "_offload_opt"
    elif view.distributed_type == "FSDP":
        fsdp = values.get("fsdp_config") or {}
        offload = str(fsdp.get("fsdp_offload_params")).lower() == "true"
        name = "fsdp2_offload" if offload else "fsdp2"
    else:
        name = "ddp"
    return name if name in memory.STRATEGIES else name.split("_offload")[0]


def with_trl_verdict(collected: Collected) -> Collected:
    """TRL's own parser decides whether the `trl` command accepts its arguments."""
    passes = (collected.probe or {}).get("passes") or []
    r = collected.resolved
    if passes and passes[0].get("parent") and not passes[0].get("error"):
        failures = [f for f in r.failures if f[0] != "trl-rejects-argument"]
        return collected._replace(resolved=r._replace(failures=failures))
    return collected


def probe_findings(collected: Collected, findings: list) -> list:
    """TRL's own verdict merged in: a rule it confirms says so; an error no rule predicted is
    added with TRL's message; a refusal TRL does not share is dropped."""
    probe = collected.probe or {}
    passes = probe.get("passes") or []
    if not passes:
        return findings
    version = probe.get("trl_version")
    errors = [p for p in passes if p.get("error")]
    parent_ok = passes[0].get("parent") and not passes[0].get("error")
    kept = [f for f in findings if not (f["id"] == "trl-rejects-argument" and parent_ok)]
    for outcome in errors:
        message = outcome["error"]["message"]
        match = next((f for f in kept if message and message.strip() == f["message"].strip()), None)
        if match is None:
            match = next(
                (
                    f
                    for f in kept
                    if f["id"] in CONFIG_CLASS_RULES and message and message in f["message"]
                ),
                None,
            )
        where = _pass_label(outcome, collected)
        if match is not None:
            match["confirmed_by"] = f"TRL {version}, run here ({where})"
            continue
        kept.append({
            "id": "trl-config-error", "severity": "error", "stage": "config",
            "message": message,
            "why": f"TRL {version}'s own parser and config classes raised {outcome['error']['type']} "
            f"({where})",
            "fix": "fix the argument the message names",
            "source": f"TRL {version} (installed here), built in a child process",
            "confirmed_by": f"TRL {version}, run here ({where})",
        })  # fmt: skip
    return kept


def _pass_label(outcome: dict, collected: Collected) -> str:
    if outcome.get("parent"):
        return "the `trl` process, world size 1"
    return f"each launched process, world size {outcome.get('world_size')}"


# Refusals after which the parsed values are argparse's defaults (or of the wrong type).
PARSE_REFUSALS = ("trl-rejects-argument", "script-rejects-argument", "recipe-value-type")
# A plan rule that says more than a backend verdict about the same setting replaces it.
REPLACES = {"bf16-without-bf16-device": "backend-bf16", "vllm-tp-divides-world": None}


def judge_plan(collected: Collected) -> dict:
    """The preflight report: the resolved plan and every finding, worst first."""
    collected = with_trl_verdict(collected)
    nodes = nodes_of(collected)
    view = make_view(collected, nodes)
    findings = launch_rule_findings(view, collected) + plan_rules.plan_findings(view)
    ids = {f["id"] for f in findings}
    dropped = {REPLACES[i] for i in ids if REPLACES.get(i)}
    findings = [f for f in findings if f["id"] not in dropped]
    findings = probe_findings(collected, dedupe(findings))
    findings.sort(key=lambda f: (SEVERITIES.index(f["severity"]), STAGES.index(f["stage"])))
    return {
        "schema_version": SCHEMA_VERSION,
        "plan": describe_plan(collected, view, nodes),
        "findings": findings,
        "summary": {s: sum(f["severity"] == s for f in findings) for s in SEVERITIES},
    }


def dedupe(findings: list) -> list:
    seen, kept = set(), []
    for finding in findings:
        key = (finding["id"], finding["message"])
        if key not in seen:
            seen.add(key)
            kept.append(finding)
    return kept


# --------------------------------------------------------------------------------------
# The plan as the report shows it
# --------------------------------------------------------------------------------------

SHOWN_TRL = (
    "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
    "bf16", "fp16", "max_length", "packing", "num_generations", "generation_batch_size",
    "steps_per_generation", "max_completion_length", "use_vllm", "vllm_mode",
    "vllm_tensor_parallel_size", "vllm_gpu_memory_utilization", "vllm_server_host",
    "vllm_server_port", "vllm_server_base_url", "vllm_group_port", "vllm_server_timeout",
    "ddp_timeout", "use_peft", "lora_r", "lora_target_modules", "load_in_4bit", "load_in_8bit",
    "use_liger_kernel", "attn_implementation", "model_name_or_path", "optim",
)  # fmt: skip


def describe_plan(collected: Collected, view: plan_rules.PlanView, nodes: list) -> dict:
    r = collected.resolved
    trl = view.trl
    probe = collected.probe or {}
    parser = "embedded table of TRL 1.16.0"
    if probe.get("passes"):
        parser = f"TRL {probe.get('trl_version')} (its own parser and config classes, in a child)"
    elif probe.get("unavailable"):
        parser += f" ({probe['unavailable']})"
    return {
        "launcher": r.launcher,
        "trainer": r.trainer,
        "trainer_source": r.trainer_source,
        "script": r.script,
        "env": {k: redact(k, str(v)) for k, v in r.env.items()},
        "world_size": r.world_size,
        "num_machines": r.num_machines,
        "processes_per_node": r.processes_per_node,
        "config_world_sizes": list(view.config_world_sizes),
        "distributed_type": r.distributed_type,
        "accelerate_config": r.config_source,
        "accelerate": {k: v for k, v in r.values.items() if k in _SHOWN_ACCELERATE},
        "nodes": [
            {
                "label": n.label,
                "kind": n.kind,
                "gpus_visible": [d.get("index") for d in n.visible],
                "gpus_used": [d.get("index") for d in n.used],
                "gpu_names": sorted({str(d.get("name")) for d in n.used}),
            }
            for n in nodes
        ],  # fmt: skip
        "precision": {
            "bf16": trl.get("bf16"),
            "fp16": trl.get("fp16"),
            "model_dtype": (trl.get("model_init") or {}).get("dtype"),
            "accelerate_mixed_precision": r.values.get("mixed_precision"),
        },  # fmt: skip
        "vllm": _vllm_plan(collected, view),
        "peft": {
            k: trl.get(k)
            for k in ("use_peft", "lora_r", "lora_target_modules", "load_in_4bit", "load_in_8bit")
        },  # fmt: skip
        "trl": {k: _shown(trl.get(k)) for k in SHOWN_TRL if k in trl},
        "memory": view.memory,
        "model": {"name": collected.model.get("name"), "config": collected.model.get("source")},
        "trl_parser": parser,
        "trl_parser_seconds": {
            k: probe[k] for k in ("import_s", "parse_s", "seconds") if k in probe
        },
    }


_SHOWN_ACCELERATE = (
    "distributed_type", "num_processes", "num_machines", "machine_rank", "mixed_precision",
    "gpu_ids", "main_process_ip", "main_process_port", "fsdp_config", "deepspeed_config",
    "parallelism_config",
)  # fmt: skip


def _vllm_plan(collected: Collected, view: plan_rules.PlanView) -> dict | None:
    trl = view.trl
    if not trl.get("use_vllm"):
        return None
    plan = {"mode": trl.get("vllm_mode"),
            "tensor_parallel_size": trl.get("vllm_tensor_parallel_size")}  # fmt: skip
    server = collected.server
    if server is not None:
        plan["server"] = dict(server._asdict(), gpus=[d.get("index") for d in view.server_devices])
        plan["server"]["env"] = {k: redact(k, str(v)) for k, v in server.env.items()}
    return plan


def _shown(value: object) -> object:
    return redact_url_credentials(value) if isinstance(value, str) else value


def collect_plan(
    command: list,
    nodes: list,
    trainer: str | None = None,
    model_config: str | None = None,
    use_trl: str = "auto",
    timeout: float = trl_args.PROBE_TIMEOUT_S,
    environ: dict | None = None,
    headroom: float = 0.1,
) -> Collected:
    """Resolve `command` on `nodes` ([(label, facts)], machine_rank order) and parse its TRL
    arguments (with TRL itself in a child when `use_trl` is auto and TRL is here, or yes).
    Raises launch.CommandError or UsageError with one line."""
    environ = dict(os.environ if environ is None else environ)
    part, launcher_name, args, server = launch.split_plan(command)
    first = nodes[0][1]
    device_count = len(visible_devices(first, part.env))
    if (first.get("accelerators") or {}).get("kind") in ("cpu", "unknown", "mps"):
        device_count = 0
    resolved = launch.resolve(
        launcher_name, args, part.env, trainer, default_config(first), device_count
    )
    child, skipped = None, None
    if use_trl == "yes" and not trl_args.trl_importable():
        raise UsageError("--trl yes: TRL is not importable by this Python")
    local, target = trl_args.local_trl_version(), verdicts.installed_versions(first).get("trl")
    if use_trl == "auto" and local and target and local != target:
        skipped = {"unavailable": f"the target has TRL {target}, this Python TRL {local}"}
    elif use_trl != "no":
        child = start_trl_probe(resolved, first, timeout)
    model = model_of(resolved, model_config, dict(environ, **resolved.env))
    probe = trl_args.finish_probe(child) if child is not None else skipped
    options = {"headroom": headroom}
    return Collected(command, resolved, server, list(nodes), probe, model, options)
