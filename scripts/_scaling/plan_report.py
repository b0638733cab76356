"""Render the preflight's report: JSON, or text in the check script's style (worst first, the
library's message, why, and the fix)."""

from __future__ import annotations

import json

from .cli import wrap

COLOURS = {"error": "31", "warning": "33", "info": "36"}
INDENT = "    "


def render_json(report: dict) -> str:
    return json.dumps(report, indent=2, default=str)


def render_text(report: dict, colour: bool = False, width: int = 88) -> str:
    plan = report["plan"]
    lines = _plan_lines(plan, width)
    findings = report["findings"]
    summary = report["summary"]
    counts = ", ".join(f"{summary[s]} {s}{'s' if summary[s] != 1 else ''}" for s in summary)
    lines += ["", f"Findings: {counts}" if findings else "Findings: none, the plan is sound"]
    for finding in findings:
        lines += _finding_lines(finding, colour, width)
    verdict = "will not run as planned" if summary["error"] else "no error found"
    lines += ["", f"Verdict: {verdict} (exit {1 if summary['error'] else 0})"]
    return "\n".join(lines)


def _plan_lines(plan: dict, width: int) -> list:
    trainer = plan["trainer"] or "unknown trainer"
    head = f"Plan: {plan['launcher']} -> {trainer} ({plan['trainer_source']})"
    lines = [wrap(head, "", width)]
    layout = (
        f"{plan['world_size']} process(es) on {plan['num_machines']} node(s), "
        f"{plan['processes_per_node']} per node, {plan['distributed_type']}"
    )
    if plan["accelerate_config"]:
        layout += f", accelerate config {plan['accelerate_config']}"
    lines.append(wrap(layout, "  ", width))
    for node in plan["nodes"]:
        used = ",".join(str(i) for i in node["gpus_used"]) or "none"
        names = ", ".join(node["gpu_names"]) or node["kind"]
        text = f"{node['label']}: GPUs {used} used of {len(node['gpus_visible'])} visible ({names})"
        lines.append(wrap(text, "  ", width))
    sizes = " then ".join(str(s) for s in plan["config_world_sizes"])
    lines.append(wrap(f"TRL config built with world size {sizes}", "  ", width))
    precision = plan["precision"]
    if plan["trainer"]:
        text = (
            f"precision: bf16={precision['bf16']} fp16={precision['fp16']}, model loaded as "
            f"{precision['model_dtype'] or 'the script decides'}"
        )
        lines.append(wrap(text, "  ", width))
    if plan["vllm"]:
        vllm = plan["vllm"]
        text = f"vLLM: {vllm['mode']}, tensor parallel {vllm['tensor_parallel_size']}"
        if vllm.get("server"):
            server = vllm["server"]
            gpus = ",".join(str(g) for g in server["gpus"]) or "none"
            text += f"; server on GPUs {gpus}, port {server['port']}"
        lines.append(wrap(text, "  ", width))
    memory = plan.get("memory") or {}
    if "total_gb" in memory:
        text = (
            f"memory: {memory['strategy']} about {memory['total_gb']:g} GB per GPU of "
            f"{memory['gpu_gb']:g} GB ({memory['usable_gb']:g} usable)"
        )
        lines.append(wrap(text, "  ", width))
    lines.append(wrap(f"parsed with: {plan['trl_parser']}", "  ", width))
    return lines


def _finding_lines(finding: dict, colour: bool, width: int) -> list:
    label = f"{finding['severity']:<8}"
    if colour:
        label = f"\033[{COLOURS[finding['severity']]}m{label}\033[0m"
    lines = ["", f"  {label}{finding['stage']:<13}{finding['id']}"]
    for part in str(finding["message"]).splitlines():
        lines.append(wrap(part, INDENT, width))
    if finding.get("why"):
        lines.append(wrap(f"why: {finding['why']}", INDENT, width))
    if finding.get("confirmed_by"):
        lines.append(wrap(f"confirmed by {finding['confirmed_by']}", INDENT, width))
    if finding.get("fix"):
        lines.append(wrap(f"-> {finding['fix']}", INDENT, width))
    return lines
