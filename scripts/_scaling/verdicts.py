"""Verdicts: each backend's status and reasons as a pure function of the facts dict, by the tables
in backend_rules.py. `judge(facts)` is the whole judgement of the check script."""

from __future__ import annotations

from typing import NamedTuple

from .accelerators import VISIBILITY_VARIABLES
from .backend_rules import (
    BACKENDS,
    DEGRADED,
    GPU_KINDS,
    NEEDS_GPU_TORCH,
    NOT_INSTALLED,
    READY,
    RULES,
    SEQUENCE_SPLITTING,
    STATUSES,
    UNAVAILABLE,
    Backend,
    Rule,
    install_command,
    vllm_window,
)
from .config_rules import TRL_DEFAULTS, Launch, backends_used, config_findings
from .metadata import DISTS
from .versions import comparable_version, release_line, release_tuple, tightest, version_key
from .versions import version_satisfies as satisfies

SUPPORTED_TRL = "1.16.0"


class Finding(NamedTuple):
    status: str
    reason: str
    next_step: str | None = None
    background: bool = False  # a met rule or a generic caveat: dropped next to a real problem


class Context(NamedTuple):
    """What the judge reads, derived once from the facts."""

    facts: dict
    versions: dict  # installed distribution -> version (None if broken)
    kind: str  # accelerator platform: cuda, rocm, xpu, npu, mps, cpu, unknown
    devices: list  # the devices this process sees
    min_cc: tuple | None  # lowest compute capability among visible CUDA GPUs
    lines: dict  # dist -> release line whose rules apply ("1.16")
    line_notes: list
    rules: tuple  # RULES, plus a vLLM window read from an unknown TRL's own metadata


def installed_versions(facts: dict) -> dict:
    packages = facts.get("packages") or {}
    return {n: p.get("version") for n, p in packages.items() if p.get("installed")}


def cc_tuple(text: object) -> tuple | None:
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def select_release_lines(versions: dict, rules: tuple = RULES) -> tuple:
    """For each dist that rules are keyed on, the release line to apply, plus notes."""
    lines, notes = {}, []
    keyed: dict = {}
    for rule in rules:
        if rule.when:
            keyed.setdefault(rule.when[0], set()).add(rule.when[1])
    for dist, known in keyed.items():
        newest = max(known, key=release_tuple)
        installed = versions.get(dist)
        line = release_line(installed) if installed else None
        if line in known:
            lines[dist] = line
            continue
        lines[dist] = newest
        if installed:
            notes.append(f"{dist} {installed} has no recorded rules here; using {dist} {newest}'s")
    return lines, notes


def make_context(facts: dict) -> Context:
    versions = installed_versions(facts)
    acc = facts.get("accelerators") or {}
    devices = [d for d in acc.get("devices") or [] if isinstance(d, dict)]
    kind = acc.get("kind") or "cpu"
    ccs = [c for c in (cc_tuple(d.get("compute_capability")) for d in devices) if c]
    min_cc = min(ccs) if ccs and kind == "cuda" else None
    lines, notes = select_release_lines(versions)
    rules = RULES
    metadata_rule = _window_from_trl_metadata(facts, versions)
    if metadata_rule and lines.get("trl") != release_line(versions.get("trl")):
        # A TRL release this table does not know: its own extra pin beats a guess.
        lines["trl"] = metadata_rule.when[1]
        notes = [n for n in notes if not n.startswith("trl ")]
        notes.append(
            f"trl {versions['trl']}: vLLM window {metadata_rule.spec} read from its METADATA"
        )
        rules = RULES + (metadata_rule,)
    return Context(facts, versions, kind, devices, min_cc, lines, notes, rules)


def _window_from_trl_metadata(facts: dict, versions: dict) -> Rule | None:
    trl = (facts.get("packages") or {}).get("trl") or {}
    line = release_line(versions.get("trl"))
    for req in trl.get("requires") or []:
        if not isinstance(req, dict) or not line:
            continue
        if req.get("name") == "vllm" and req.get("extra") == "vllm" and req.get("specifier"):
            source = f"installed TRL {versions.get('trl')} METADATA extra 'vllm'"
            return vllm_window(line, req["specifier"], source)
    return None


# --------------------------------------------------------------------------------------
# Rules from the table
# --------------------------------------------------------------------------------------


def rule_applies(rule: Rule, ctx: Context) -> bool:
    if rule.when and ctx.lines.get(rule.when[0]) != rule.when[1]:
        return False
    if rule.only_if:
        version = ctx.versions.get(rule.only_if[0])
        return bool(version) and satisfies(version, rule.only_if[1]) is not False
    return True


def rule_findings(backend: Backend, ctx: Context) -> list:
    """One finding per subject of the backend's rules: the worst miss, else the met rules."""
    by_subject: dict = {}
    for rule in ctx.rules:
        if rule.backend == backend.name and rule_applies(rule, ctx):
            by_subject.setdefault(rule.subject, []).append(rule)
    findings = []
    for subject, rules in by_subject.items():
        value, label = _subject_value(subject, ctx)
        if value is None:
            continue
        verdicts = [(r, satisfies(comparable_version(value, r.compare), r.spec)) for r in rules]
        failed = [r for r, ok in verdicts if ok is False]
        unknown = [r for r, ok in verdicts if ok is None]
        if failed:
            worst = max(failed, key=lambda r: STATUSES.index(r.severity))
            fix = worst.fix or f'pip install -U "{subject}{tightest(r.spec for r in failed)}"'
            findings.append(Finding(worst.severity, f"{label}: {worst.why} [{worst.source}]", fix))
        elif unknown:
            reason = f"cannot compare {label} with {unknown[0].spec} ({unknown[0].source})"
            findings.append(Finding(DEGRADED, reason))
        else:
            findings += [
                Finding(READY, f"{label} meets {r.spec} ({r.source})", background=True)
                for r in rules
            ]
    return findings


def _subject_value(subject: str, ctx: Context) -> tuple:
    if subject == "compute_capability":
        if ctx.min_cc is None:
            return None, None
        value = "{}.{}".format(*ctx.min_cc)
        return value, f"lowest visible compute capability {value}"
    value = ctx.versions.get(subject)
    return value, f"{subject} {value}"


# --------------------------------------------------------------------------------------
# Packages and hardware
# --------------------------------------------------------------------------------------


def _package_findings(backend: Backend, ctx: Context) -> list:
    """Missing distributions, broken metadata and (with --imports) failed imports."""
    findings = []
    missing = [group[0] for group in backend.needs if not any(d in ctx.versions for d in group)]
    if missing:
        verb = "are" if len(missing) > 1 else "is"
        reason = f"{' and '.join(missing)} {verb} not installed"
        findings.append(Finding(NOT_INSTALLED, reason, install_command(missing)))
    for dist in (d for group in backend.needs for d in group if d in ctx.versions):
        pkg = ctx.facts["packages"][dist]
        if pkg.get("broken"):
            reason = f"{dist}: broken metadata (no Version)"
            findings.append(Finding(UNAVAILABLE, reason, f"pip install --force-reinstall {dist}"))
        outcome = pkg.get("import") if isinstance(pkg.get("import"), dict) else {}
        findings += _import_findings(dist, outcome)
    return findings


def _import_findings(dist: str, outcome: dict) -> list:
    status = outcome.get("status")
    if status == "timeout":
        # A slow import is not a broken one: only a longer limit tells them apart.
        limit = outcome.get("timeout_s")
        within = f"within {limit:g} s" if isinstance(limit, (int, float)) else "in time"
        reason = f"import {dist} did not finish {within}"
        fix = "rerun with --imports --timeout 120 to tell a slow import from a hang"
        return [Finding(UNAVAILABLE, reason, fix)]
    if status in ("error", "crashed"):
        detail = str(outcome.get("detail") or status)
        reason = f"import {dist} {status}: {detail}"
        return [Finding(UNAVAILABLE, reason, _import_fix(dist, detail))]
    return []


def _import_fix(dist: str, detail: str) -> str:
    if "libcudart" in detail or "libcuda" in detail or "undefined symbol" in detail:
        return f"pip install --force-reinstall --no-cache-dir {dist} (its binary does not match torch/CUDA)"
    module = next((d.module for d in DISTS if d.name == dist and d.module), dist)
    return f'python -c "import {module}" shows the full error; then pip install --force-reinstall {dist}'


def _hardware_findings(backend: Backend, ctx: Context) -> list:
    kind, count = ctx.kind, len(ctx.devices)
    if kind == "unknown":
        error = (ctx.facts.get("accelerators") or {}).get("error") or "the GPU probe failed"
        reason = f"cannot tell which GPUs this machine has: {error}"
        return [Finding(DEGRADED, reason, "rerun with a longer --timeout; check nvidia-smi")]
    if kind not in backend.ready_on + backend.degraded_on:
        reason = f"needs a {'/'.join(backend.ready_on)} GPU; this machine: {kind}"
        return [Finding(UNAVAILABLE, reason, _no_gpu_step(backend))]
    findings = []
    if kind in backend.degraded_on:
        reason = f"runs on {kind} with limits (fully supported on {'/'.join(backend.ready_on)})"
        findings.append(Finding(DEGRADED, reason, background=True))
    if kind != "cpu" and backend.min_devices and count == 0:
        return findings + [_no_device_finding(kind, ctx)]
    if kind != "cpu" and 0 < count < backend.min_devices:
        # One device cannot split a sequence; it can still run FSDP/DeepSpeed (offload).
        severity = UNAVAILABLE if backend.name in SEQUENCE_SPLITTING else DEGRADED
        reason = f"{count} GPU visible; {backend.name} needs {backend.min_devices}+ to pay off"
        findings.append(Finding(severity, reason, "run on a machine with more GPUs"))
    if backend.name in NEEDS_GPU_TORCH:
        findings += _torch_build_findings(ctx)
    return findings


def _no_device_finding(kind: str, ctx: Context) -> Finding:
    acc = ctx.facts.get("accelerators") or {}
    physical = acc.get("physical_device_count")
    visibility = acc.get("visibility") or {}
    problems = visibility.get("problems") or []
    names = [v for v in VISIBILITY_VARIABLES.get(kind, ()) if visibility.get(v) is not None]
    fix = f"unset or fix {' / '.join(names) or 'the *_VISIBLE_DEVICES variable'}"
    if physical and problems:
        return Finding(UNAVAILABLE, f"no {kind} device visible: {problems[0]}", fix)
    if physical:
        reason = (
            f"no {kind} device visible ({' / '.join(names) or 'a variable'} hides all {physical})"
        )
        return Finding(UNAVAILABLE, reason, fix)
    reason = (
        f"no {kind} device visible: the {kind} software is installed, but this process sees none"
    )
    return Finding(UNAVAILABLE, reason, f"run on a machine (or container) with a {kind} device")


def _no_gpu_step(backend: Backend) -> str:
    if backend.name == "flash_attn":
        return 'keep attn_implementation="sdpa"'
    return f"run on a machine with a {'/'.join(backend.ready_on)} GPU"


def _torch_build_findings(ctx: Context) -> list:
    build = ctx.facts.get("torch_build") or {}
    acc = ctx.facts.get("accelerators") or {}
    if "torch" not in ctx.versions or ctx.kind not in GPU_KINDS:
        return []
    variant, version = build.get("variant"), build.get("version")
    if ctx.kind == "cuda" and variant != "cuda":
        reason = f"torch {version} is a {variant} build: it cannot use the NVIDIA GPUs"
        cuda = "".join(map(str, release_tuple(acc.get("cuda_driver_version"))[:2])) or "128"
        fix = f"pip install torch --index-url https://download.pytorch.org/whl/cu{cuda} (or a lower cuXYZ)"
        return [Finding(UNAVAILABLE, reason, fix)]
    if ctx.kind == "rocm" and variant not in ("rocm", None):
        reason = f"torch {version} is a {variant} build: it cannot use the AMD GPUs"
        return [Finding(UNAVAILABLE, reason, "install a ROCm build of torch")]
    torch_cuda = release_tuple(build.get("cuda"))
    driver_cuda = release_tuple(acc.get("cuda_driver_version"))
    if ctx.kind == "cuda" and torch_cuda and driver_cuda and torch_cuda[:1] > driver_cuda[:1]:
        reason = (
            f"torch is built for CUDA {build.get('cuda')} but the driver supports "
            f"CUDA {acc.get('cuda_driver_version')}"
        )
        fix = "upgrade the NVIDIA driver or install a torch built for an older CUDA"
        return [Finding(UNAVAILABLE, reason, fix)]
    return []


def _requires_findings(backend: Backend, ctx: Context) -> list:
    """Pins a backend declares on the installed stack (e.g. vLLM's exact torch)."""
    findings = []
    for dist in (d for group in backend.needs for d in group):
        for req in (ctx.facts["packages"].get(dist) or {}).get("requires") or []:
            if not isinstance(req, dict):
                continue
            name, spec = req.get("name"), req.get("specifier")
            have = ctx.versions.get(name)
            if req.get("extra") or not spec or not have:
                continue
            if satisfies(comparable_version(have), spec) is False:
                # An exact pin (vLLM's torch==) means a compiled ABI: a mismatch breaks imports.
                severity = UNAVAILABLE if spec.startswith("==") else DEGRADED
                reason = (
                    f"{dist} {ctx.versions[dist]} requires {name}{spec}, installed {name} {have}"
                )
                fix = f"install {name}{spec} or a matching {dist}"
                findings.append(Finding(severity, reason, fix))
    return findings


# --------------------------------------------------------------------------------------
# Backend-specific findings
# --------------------------------------------------------------------------------------


def _special_findings(backend: Backend, ctx: Context) -> list:
    name = backend.name
    if name == "vllm":
        return _vllm_findings(ctx)
    if name == "bf16":
        return _bf16_findings(ctx)
    if name == "nccl":
        return _nccl_findings(ctx)
    sm80 = ctx.min_cc is None or ctx.min_cc >= (8, 0)
    if name == "flash_attn" and sm80 and "kernels" in ctx.versions:
        return [
            Finding(READY, 'kernels can also serve "kernels-community/flash-attn2" (Hub kernel)')
        ]
    if name in SEQUENCE_SPLITTING:
        return [Finding(READY, "TRL 1.16.0: SFT only (GRPO/RLOO/Distillation reject cp/sp > 1)")]
    return []


def _vllm_findings(ctx: Context) -> list:
    findings = []
    if "vllm" in ctx.versions:
        findings += [Finding(READY, note) for note in ctx.line_notes if note.startswith("trl ")]
    server = ctx.facts.get("vllm_server")
    return findings + (vllm_server_findings(server) if isinstance(server, dict) else [])


# TRL 1.16.0's `trl vllm-serve` runs `vllm serve` with VLLM_SERVER_DEV_MODE=1,
# --weight-transfer-config '{"backend": "nccl"}' and --logprobs-mode processed_logprobs.
TRL_VLLM_SERVE = "trl vllm-serve --model <model>"


def vllm_server_findings(server: dict) -> list:
    url, health = server.get("url"), server.get("health")
    if server.get("timed_out"):
        reason = f"vLLM server {url}: {server.get('error')}"
        fix = "check the server's log; a proxy or another service may hold the port"
        return [Finding(DEGRADED, reason, fix)]
    if health is None:
        reason = f"vLLM server {url} unreachable: {server.get('error')}"
        return [Finding(DEGRADED, reason, f"start it with {TRL_VLLM_SERVE}")]
    if health == 404:
        reason = f"vLLM server {url}: /health answered 404, so this is not a vLLM server's base URL"
        return [Finding(DEGRADED, reason, _base_url_fix(url))]
    if health != 200:
        reason = f"vLLM server {url} /health answered {health}"
        return [Finding(DEGRADED, reason, "wait for the server to finish loading")]
    return _vllm_dev_mode_findings(server)


def _base_url_fix(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(str(url))
    if parts.path.strip("/"):
        return f"use the base URL without a path: {parts.scheme}://{parts.netloc}"
    return "check host and port: another service answers there (vLLM's default port is 8000)"


def _vllm_dev_mode_findings(server: dict) -> list:
    url, dev_mode = server.get("url"), server.get("dev_mode")
    if dev_mode is None:
        detail = server.get("server_info_error") or (
            f"/server_info answered {server.get('server_info_status')}"
        )
        reason = f"vLLM server {url}: cannot tell whether dev mode is on ({detail})"
        return [Finding(DEGRADED, reason, "rerun the check; read the server's start-up log")]
    if not dev_mode:
        reason = f"vLLM server {url}: /server_info answered 404, so dev mode is off and TRL "
        reason += "cannot sync weights"
        fix = f"restart it with {TRL_VLLM_SERVE} (or VLLM_SERVER_DEV_MODE=1 vllm serve ...)"
        return [Finding(DEGRADED, reason, fix)]
    if server.get("weight_transfer_config") is None:
        reason = f"vLLM server {url} has no weight_transfer_config: TRL cannot sync weights"
        fix = f"""restart it with {TRL_VLLM_SERVE} (or --weight-transfer-config '{{"backend": "nccl"}}')"""
        return [Finding(DEGRADED, reason, fix)]
    findings = [Finding(READY, f"vLLM server {url} is up, dev mode on, weight transfer configured")]
    mode = server.get("logprobs_mode")
    if mode and mode != "processed_logprobs":
        reason = f"server runs --logprobs-mode {mode}; TRL's importance sampling correction "
        reason += "expects processed_logprobs (temperature applied)"
        fix = "restart it with --logprobs-mode processed_logprobs"
        findings.append(Finding(DEGRADED, reason, fix))
    return findings


def _bf16_findings(ctx: Context) -> list:
    if ctx.kind == "mps":
        mac = release_tuple((ctx.facts.get("platform") or {}).get("mac_version"))
        if mac and mac < (14,):
            reason = f"MPS bf16 needs macOS 14+ (this is {'.'.join(map(str, mac))})"
            return [Finding(UNAVAILABLE, reason, "use fp32, or upgrade macOS")]
        return [Finding(READY, "MPS supports bf16 on macOS 14+ (transformers checks the version)")]
    if ctx.kind == "cpu":
        # transformers 5.24.0 training_args.py: "Your setup doesn't support bf16/gpu."
        reason = "no GPU: TRL's default bf16=True raises ValueError unless use_cpu=True"
        return [Finding(DEGRADED, reason, "set use_cpu=True (slow bf16 on CPU), or bf16=False")]
    return []


def _nccl_findings(ctx: Context) -> list:
    packages = ctx.facts.get("packages") or {}
    libs = [
        f"{n} {packages[n]['version']}"
        for n in ("nvidia-nccl-cu12", "nvidia-nccl-cu13")
        if (packages.get(n) or {}).get("installed")
    ]
    findings = [Finding(READY, f"NCCL library: {', '.join(libs)}")] if libs else []
    if (ctx.facts.get("platform") or {}).get("system") == "Windows":
        reason, fix = "torch has no NCCL on Windows", "use Linux (or WSL2) for multi-GPU training"
        findings.append(Finding(UNAVAILABLE, reason, fix))
    if any(d.get("mig_enabled") for d in ctx.devices):
        reason = "MIG slice(s) visible: NCCL cannot communicate between MIG instances"
        fix = "use one process per MIG slice, or whole GPUs for multi-GPU training"
        findings.append(Finding(DEGRADED, reason, fix))
    if len(ctx.devices) > 1 and ctx.kind == "cuda" and nvlink_known(ctx) and not any_nvlink(ctx):
        findings.append(Finding(READY, "no NVLink between the visible GPUs: NCCL uses PCIe/host"))
    runtime = ctx.facts.get("torch_runtime") or {}
    if runtime.get("distributed_available") and runtime.get("nccl_available") is False:
        reason = "torch.distributed reports NCCL unavailable"
        findings.append(Finding(UNAVAILABLE, reason, "install a CUDA build of torch"))
    return findings


def nvlink_known(ctx: Context) -> bool:
    """nvidia-smi's query has no link data: topology None means unknown, not 'no NVLink'."""
    acc = ctx.facts.get("accelerators") or {}
    return acc.get("topology") is not None


def any_nvlink(ctx: Context) -> bool:
    topology = (ctx.facts.get("accelerators") or {}).get("topology") or []
    return any(isinstance(t, dict) and t.get("nvlink") for t in topology) or any(
        d.get("nvlink_active_links") for d in ctx.devices
    )


# --------------------------------------------------------------------------------------
# One backend, every backend
# --------------------------------------------------------------------------------------


def judge_backend(backend: Backend, ctx: Context) -> dict:
    findings = (
        _package_findings(backend, ctx)
        + _hardware_findings(backend, ctx)
        + rule_findings(backend, ctx)
        + _requires_findings(backend, ctx)
        + _special_findings(backend, ctx)
    )
    status = max((f.status for f in findings), key=STATUSES.index, default=READY)
    real_problem = any(f.status != READY and not f.background for f in findings)
    shown = [f for f in findings if not (real_problem and f.background)]
    ordered = sorted(shown, key=lambda f: -STATUSES.index(f.status))  # stable: notes last
    if status == READY:
        installed = [
            f"{d} {ctx.versions[d]}" for g in backend.needs for d in g if d in ctx.versions
        ]
        basis = f"{', '.join(installed)} installed" if installed else "no packages needed"
        ordered.insert(0, Finding(READY, basis))
        next_step = backend.enable
    else:
        steps = (f.next_step for f in ordered if f.status == status and f.next_step)
        next_step = next(steps, f"usable; {backend.enable}" if status == DEGRADED else None)
    reasons = list(dict.fromkeys(f.reason for f in ordered))
    return {"status": status, "reasons": reasons, "next_step": next_step}


def judge_backends(ctx: Context) -> dict:
    return {b.name: judge_backend(b, ctx) for b in BACKENDS}


def stack_warnings(ctx: Context) -> list:
    """The stack as a whole: no TRL, or a TRL this skill does not describe."""
    trl = ctx.versions.get("trl")
    if "trl" not in ctx.versions:
        return [
            f"trl is not installed in this interpreter: the verdicts say what TRL {SUPPORTED_TRL} "
            f"would do here (pip install trl=={SUPPORTED_TRL}, or run the check with the "
            "training environment's python)"
        ]
    if trl and version_key(trl) and release_line(trl) != release_line(SUPPORTED_TRL):
        return [f"trl {trl} is installed; this skill's references describe TRL {SUPPORTED_TRL}"]
    return []


def cross_check_warnings(ctx: Context) -> list:
    """Disagreements between sources: metadata vs module, NVML vs torch."""
    warnings = []
    for name, pkg in (ctx.facts.get("packages") or {}).items():
        outcome = pkg.get("import") if isinstance(pkg.get("import"), dict) else {}
        reported = outcome.get("module_version")
        if reported and pkg.get("version") and version_key(reported) != version_key(pkg["version"]):
            warnings.append(
                f"{name}: metadata says {pkg['version']} but the module says {reported}"
            )
    runtime = ctx.facts.get("torch_runtime") or {}
    if ctx.kind == "cuda" and ctx.devices and runtime.get("cuda_available") is False:
        warnings.append(
            "NVML lists GPUs but torch.cuda.is_available() is False "
            "(CPU build of torch, driver too old for torch's CUDA, or CUDA_VISIBLE_DEVICES)"
        )
    return warnings


# --------------------------------------------------------------------------------------
# The accelerate config, and the whole judgement
# --------------------------------------------------------------------------------------


def launch_from_config(values: dict, ctx: Context, trl: dict | None = None) -> Launch:
    """The check script's view of a config file: run on this machine with TRL's defaults."""
    gpus = len(ctx.devices) if ctx.kind not in ("cpu", "unknown") else 0
    return Launch(values, dict(TRL_DEFAULTS, **(trl or {})), gpus, ctx.min_cc)


def launch_findings(launch: Launch, backends: dict) -> list:
    """Config-rule findings plus the verdicts (`judge_backends`) of the backends the launch
    uses, when not ready."""
    findings = config_findings(launch)
    if any(f["id"] == "config-shape" for f in findings):
        return findings
    for setting, name in backends_used(launch):
        verdict = backends[name]
        if verdict["status"] == READY:
            continue
        severity = "warning" if verdict["status"] == DEGRADED else "error"
        findings.append(
            {"id": f"backend-{name}", "severity": severity, "stage": "launch",
             "message": f"{setting} needs {name}, {verdict['status']} here: "
             + "; ".join(verdict["reasons"][:2]),
             "fix": verdict["next_step"], "source": "backend_rules.RULES"}
        )  # fmt: skip
    return findings


def config_problems(ctx: Context, backends: dict) -> list:
    """The accelerate config's problems as sentences (the check report's config.problems)."""
    values = (ctx.facts.get("config") or {}).get("values")
    if not isinstance(values, dict) or not values:
        return []
    findings = launch_findings(launch_from_config(values, ctx), backends)
    return [f"{f['message']}; {f['fix']}" if f.get("fix") else f["message"] for f in findings]


def judge(facts: dict) -> dict:
    """Verdicts for every backend, config problems and warnings: a pure function of `facts`."""
    ctx = make_context(facts)
    acc = facts.get("accelerators") or {}
    warnings = list(ctx.line_notes) + ((acc.get("visibility") or {}).get("problems") or [])
    backends = judge_backends(ctx)
    return {
        "backends": backends,
        "config_problems": config_problems(ctx, backends),
        "warnings": warnings + stack_warnings(ctx) + cross_check_warnings(ctx),
    }
