"""The check script's report: the facts with the verdicts merged in, rendered as JSON for programs
(every fact) or as text for people (a selection that fits the terminal)."""

from __future__ import annotations

import json
import re

from .backend_rules import BACKENDS, READY
from .cli import wrap
from .verdicts import judge

COLOURS = {"ready": "32", "degraded": "33", "not_installed": "2", "unavailable": "31"}
NAME_COL, STATUS_COL = 18, 14
REASON_INDENT = " " * (2 + NAME_COL + STATUS_COL)


def build_report(facts: dict) -> dict:
    verdict = judge(facts)
    report = dict(facts)
    report["config"] = dict(facts.get("config") or {}, problems=verdict["config_problems"])
    report["backends"] = verdict["backends"]
    warnings = list(facts.get("warnings") or []) + verdict["warnings"]
    report["warnings"] = list(dict.fromkeys(warnings))
    return report


def render_json(report: dict) -> str:
    return json.dumps(report, indent=2, default=str)


def render_text(report: dict, colour: bool = False, width: int = 88) -> str:
    report = printable(report)
    lines = _header_lines(report, width) + [""]
    lines += _accelerator_lines(report, width)
    lines += _package_lines(report, width)
    lines += _env_and_config_lines(report, width)
    lines += ["", "Backends:"] + _backend_lines(report, colour, width)
    if report.get("warnings"):
        lines += ["", "Warnings:"] + [wrap(w, "  ! ", width) for w in report["warnings"]]
    total = (report.get("timings") or {}).get("total")
    done = f"Collected in {total:.2f} s; " if isinstance(total, (int, float)) else ""
    lines += ["", f"{done}--json has every fact and every reason."]
    return "\n".join(lines)


def printable(value: object) -> object:
    """The report with control characters in its strings escaped: a config value, a variable
    or a server's answer cannot move the cursor or recolour the terminal."""
    if isinstance(value, str):
        return _CONTROL.sub(lambda m: repr(m.group())[1:-1], value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _header_lines(report: dict, width: int) -> list:
    py, plat = report["python"], report["platform"]
    text = f"Python {py.get('version')} ({py.get('executable')}) on {plat.get('platform')}"
    origin = (report.get("origin") or {}).get("facts_file")
    lines = [wrap(f"Facts recorded in {origin}, judged here", "", width)] if origin else []
    return lines + [wrap(text, "", width)]


def _accelerator_lines(report: dict, width: int) -> list:
    acc, build = report["accelerators"], report["torch_build"]
    head = f"Accelerator: {acc['kind']}"
    if acc["kind"] == "unknown":
        head += " (the GPU probe did not finish)"
    if acc.get("driver_version"):
        head += f", driver {acc['driver_version']}"
        if acc.get("cuda_driver_version"):
            head += f" (CUDA {acc['cuda_driver_version']})"
    lines = [head]
    if acc.get("error") and acc["kind"] in ("cpu", "cuda", "unknown"):
        lines.append(wrap(f"GPU probe: {acc['error']}", "  ", width))
    lines += [wrap(text, "  ", width) for text in _device_groups(acc.get("devices") or [])]
    if acc["kind"] not in ("cpu", "mps", "unknown") and not acc.get("devices"):
        physical = acc.get("physical_device_count")
        lines.append(
            f"  no {acc['kind']} device visible" + (f" ({physical} hidden)" if physical else "")
        )
    nvlinked = [t for t in acc.get("topology") or [] if isinstance(t, dict) and t.get("nvlink")]
    if nvlinked:
        lines.append(f"  NVLink between {len(nvlinked)} GPU pair(s)")
    if build.get("version"):
        text = f"torch {build['version']}: {build.get('variant')} build"
        text += f", CUDA {build['cuda']}" if build.get("cuda") else ""
        text += f", HIP {build['hip']}" if build.get("hip") else ""
        lines.append(text)
    runtime = report.get("torch_runtime")
    if isinstance(runtime, dict):
        skip = ("version", "cuda_build", "hip_build")  # already on the torch line
        shown = ", ".join(f"{k}={v}" for k, v in runtime.items() if k not in skip)
        lines.append(wrap(f"torch runtime: {shown}", "  ", width))
    return lines


def _device_groups(devices: list):
    """One line per model: '8x NVIDIA H100 80GB HBM3 [GPU 0-7], CC 9.0, 79.6 GiB, min free'."""
    groups: dict = {}
    for dev in (d for d in devices if isinstance(d, dict)):
        key = (dev.get("name"), dev.get("compute_capability"), dev.get("memory_total_mib"))
        groups.setdefault(key, []).append(dev)
    for (name, cc, total), devs in groups.items():
        indices = ",".join(str(d.get("index")) for d in devs)
        text = f"{len(devs)}x {name} [GPU {indices}]"
        if cc:
            text += f", CC {cc}"
        if isinstance(total, (int, float)):
            text += f", {total / 1024:.1f} GiB"
        free = [d["memory_free_mib"] for d in devs if isinstance(d.get("memory_free_mib"), int)]
        if free:
            text += f", {'min ' if len(devs) > 1 else ''}free {min(free) / 1024:.1f} GiB"
        if any(d.get("mig_enabled") for d in devs):
            text += ", MIG on"
        yield text


def relevant_dists(kind: str) -> set:
    """Distributions a backend usable on this accelerator kind needs (first of alternatives)."""
    usable = [b for b in BACKENDS if kind in b.ready_on + b.degraded_on]
    return {group[0] for b in usable for group in b.needs}


def _package_lines(report: dict, width: int) -> list:
    installed, missing, hidden = [], [], 0
    relevant = relevant_dists(report["accelerators"]["kind"])
    for name, pkg in report["packages"].items():
        if pkg.get("installed"):
            text = f"{name}\xa0{pkg.get('version')}" + (
                " (editable)" if pkg.get("editable") else ""
            )
            outcome = pkg.get("import")
            if isinstance(outcome, dict) and isinstance(outcome.get("seconds"), (int, float)):
                done = "" if outcome.get("status") == "ok" else f"import {outcome.get('status')}, "
                text += f"\xa0({done}{outcome['seconds']:.1f}\xa0s)".replace(" ", "\xa0")
            installed.append(text)
        elif name in relevant:
            missing.append(name)
        else:
            hidden += 1
    probed = any(isinstance(p.get("import"), dict) for p in report["packages"].values())
    title = "Installed (import time): " if probed else "Installed: "
    lines = ["", wrap(title + (", ".join(installed) or "none of the packages checked"), "", width)]
    if missing:
        lines.append(wrap("Missing for backends usable here: " + ", ".join(missing), "", width))
    if hidden:
        lines.append(f"({hidden} other optional packages not installed; see --json)")
    return lines


def _backend_lines(report: dict, colour: bool, width: int) -> list:
    kind = report["accelerators"]["kind"]
    need_gpu = (
        []
        if kind == "unknown"
        else [b.name for b in BACKENDS if kind not in b.ready_on + b.degraded_on]
    )
    if report.get("vllm_server"):
        need_gpu = [n for n in need_gpu if n != "vllm"]  # keep the server's findings in view
    lines = []
    for name, verdict in report["backends"].items():
        if name not in need_gpu:
            lines += _verdict_lines(name, verdict, colour, width)
    if need_gpu:
        text = f"Need a GPU (this machine: {kind}), so unavailable: {', '.join(need_gpu)}"
        lines.append(wrap(text, "  ", width))
    return lines


def _verdict_lines(name: str, verdict: dict, colour: bool, width: int) -> list:
    status, reasons = verdict["status"], verdict["reasons"] or [""]
    label = f"{status:<{STATUS_COL}}"
    if colour:
        label = f"\033[{COLOURS[status]}m{label}\033[0m"
    # Ready: the installed versions say enough. Otherwise the worst reasons, without the
    # [source] citations (--json keeps them).
    shown = [re.sub(r" \[[^\]]*\]$", "", r) for r in reasons[: 1 if status == READY else 3]]
    first = wrap(shown[0], REASON_INDENT, width)[len(REASON_INDENT) :]
    lines = [f"  {name:<{NAME_COL}}{label}{first}"]
    lines += [wrap(reason, REASON_INDENT, width) for reason in shown[1:]]
    if verdict["next_step"]:
        lines.append(wrap(f"-> {verdict['next_step']}", REASON_INDENT, width))
    return lines


def _env_and_config_lines(report: dict, width: int) -> list:
    env = report["environment"]
    shown = ", ".join(f"{k}={v}" for k, v in env.items() if k != "LD_LIBRARY_PATH")
    texts = [f"Environment: {shown or '(no backend-related variables set)'}"]
    config = report["config"]
    if config.get("exists"):
        text = f"Accelerate config ({config.get('source')}): {config.get('path')}: "
        texts.append(text + (config.get("error") or _config_summary(config.get("values") or {})))
    elif config.get("path"):
        texts.append(f"Accelerate config: none at {config['path']} (accelerate defaults apply)")
    lines = [""] + [wrap(text, "", width) for text in texts]
    lines += [wrap(p, "  ! ", width) for p in config.get("problems") or []]
    server = report.get("vllm_server")
    if isinstance(server, dict):
        text = (
            f"vLLM server {server.get('url')}: health={server.get('health')}, "
            f"dev_mode={server.get('dev_mode')}, models={server.get('models')}"
        )
        notes = [server.get(k) for k in ("error", "models_error", "server_info_error")]
        lines.append(wrap(", ".join([text] + [n for n in notes if n]), "", width))
    return lines


def _config_summary(values: dict) -> str:
    keys = ("distributed_type", "num_processes", "mixed_precision")
    summary = ", ".join(f"{k}={values[k]}" for k in keys if k in values)
    if summary or not values:
        return summary or "(no keys set)"
    names = [str(k) for k in values]
    return "keys " + ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
