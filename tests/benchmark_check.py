"""Benchmark scripts/check_optional_backends.py against the env reporters of the stack.

Run: .venv/bin/python tests/benchmark_check.py [--runs 7]
Not collected by pytest. Each command runs once to warm caches, then N times; medians shown.
Also checks that our JSON covers every fact `trl env` prints (with equal values), and that
--imports costs about the slowest probe rather than the sum of all probes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "check_optional_backends.py"
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable

COMMANDS = {
    "ours (text)": [PYTHON, str(SCRIPT)],
    "ours --json": [PYTHON, str(SCRIPT), "--json"],
    "ours --imports": [PYTHON, str(SCRIPT), "--imports", "--json"],
    "trl env": [str(VENV_BIN / "trl"), "env"],
    "accelerate env": [str(VENV_BIN / "accelerate"), "env"],
    "torch collect_env": [PYTHON, "-m", "torch.utils.collect_env"],
}

# `trl env` line label -> where the same fact lives in our JSON.
TRL_ENV_COVERAGE = {
    "Platform": ("platform", "platform"),
    "Python version": ("python", "version"),
    "TRL version": ("packages", "trl", "version"),
    "PyTorch version": ("packages", "torch", "version"),
    "accelerator(s)": ("accelerators", "kind"),
    "Transformers version": ("packages", "transformers", "version"),
    "Accelerate version": ("packages", "accelerate", "version"),
    "Accelerate config": ("config", "values"),
    "Datasets version": ("packages", "datasets", "version"),
    "HF Hub version": ("packages", "huggingface-hub", "version"),
    "bitsandbytes version": ("packages", "bitsandbytes", "version"),
    "DeepSpeed version": ("packages", "deepspeed", "version"),
    "Liger-Kernel version": ("packages", "liger-kernel", "version"),
    "PEFT version": ("packages", "peft", "version"),
    "vLLM version": ("packages", "vllm", "version"),
}


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO))
    return time.perf_counter() - start, proc


def bench(runs: int) -> dict[str, list[float]]:
    results = {}
    for label, cmd in COMMANDS.items():
        timed(cmd)  # warm-up
        results[label] = [timed(cmd)[0] for _ in range(runs)]
        print(f"  {label:<20} median {statistics.median(results[label]):7.3f} s", flush=True)
    return results


def dig(data, path):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return "<missing>"
        data = data[key]
    return data


def parse_trl_env(text: str) -> dict[str, str]:
    facts = {}
    for line in text.splitlines():
        if line.startswith("- ") and ":" in line:
            key, _, value = line[2:].partition(":")
            facts[key.strip()] = value.strip()
    return facts


def coverage() -> bool:
    trl = parse_trl_env(timed(COMMANDS["trl env"])[1].stdout)
    ours = json.loads(timed(COMMANDS["ours --json"])[1].stdout)
    print("\n`trl env` fact -> our JSON path: ours | trl env")
    complete = True
    for key, value in trl.items():
        path = TRL_ENV_COVERAGE.get(key)
        mine = dig(ours, path) if path else "<no mapping>"
        shown = "not installed" if mine is None and path and path[-1] == "version" else mine
        if key == "Accelerate config" and mine is None:
            shown = "not found"
        agree = str(shown) == value or (key == "accelerator(s)" and value == "cpu" == mine)
        complete &= path is not None and mine != "<missing>"
        mark = "=" if agree else "~"
        print(f"  {key:<22} {'.'.join(path or ()):<34} {mark} {shown!s:<24} | {value}")
    extra = ["torch_build", "accelerators.devices", "environment", "backends", "config.problems"]
    print(f"  ... plus facts trl env lacks: {', '.join(extra)}")
    return complete


def imports_breakdown() -> None:
    wall, proc = timed(COMMANDS["ours --imports"])
    report = json.loads(proc.stdout)
    probes = {n: p["import"]["seconds"] for n, p in report["packages"].items() if p.get("import")}
    print("\n--imports probes (seconds each, run in parallel subprocesses):")
    for name, seconds in sorted(probes.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<20} {seconds:6.2f}")
    timings = report["timings"]
    print(
        f"  sum {sum(probes.values()):.2f} s, max {max(probes.values()):.2f} s, "
        f"probe wall {timings['imports_wall']:.2f} s with {timings['imports_workers']} workers "
        f"on {os.cpu_count()} cores, whole command {wall:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"{platform.platform()}, {os.cpu_count()} cores, {args.runs} runs after 1 warm-up")
    results = bench(args.runs)
    medians = {k: statistics.median(v) for k, v in results.items()}
    ratio = medians["ours (text)"] / medians["trl env"]
    print(f"\nours (text) / trl env = {ratio:.3f} (target <= 0.1)")
    print(f"ours --json / trl env = {medians['ours --json'] / medians['trl env']:.3f}")
    complete = coverage()
    print(f"\nevery `trl env` fact covered: {complete}")
    imports_breakdown()


if __name__ == "__main__":
    main()
