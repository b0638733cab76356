"""Benchmark scripts/check_optional_backends.py against the env reporters of the stack.

Run: .venv/bin/python tests/benchmark_check.py [--runs 7]
Not collected by pytest. Each command runs once to warm caches (the bytecode cache included:
PYTHONDONTWRITEBYTECODE is dropped for every command, as a user's second run has its .pyc
files), then N times; medians shown. Checks the target, ours (text) <= TARGET_RATIO x `trl env`,
and that our JSON holds every fact `trl env` prints, with equal values; exits 1 if either fails.
Then breaks --imports down: each probe's seconds, their sum and max, and the parallel wall time.
`--script PATH` measures another copy of the checker (e.g. an older one) the same way.
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


TARGET_RATIO = 0.05  # issue 8: the default run costs at most 5% of `trl env`


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
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


def agrees(key: str, ours, theirs: str, report: dict) -> bool:
    if key == "accelerator(s)":  # trl env prints "cpu" or the GPU names
        names = {d.get("name") for d in report["accelerators"]["devices"]}
        return theirs == ours or set(theirs.split(", ")) <= names
    if key == "Accelerate config":
        return (ours is None and theirs == "not found") or (
            ours is not None and theirs != "not found"
        )
    return str("not installed" if ours is None else ours) == theirs


def coverage(script: str) -> bool:
    """Every fact `trl env` prints is in our JSON with the same value (a superset)."""
    trl = parse_trl_env(timed(COMMANDS["trl env"])[1].stdout)
    ours = json.loads(timed([PYTHON, script, "--json"])[1].stdout)
    print("\n`trl env` fact -> our JSON path: ours | trl env")
    superset = bool(trl)
    for key, value in trl.items():
        path = TRL_ENV_COVERAGE.get(key)
        mine = dig(ours, path) if path else "<no mapping>"
        same = path is not None and mine != "<missing>" and agrees(key, mine, value, ours)
        superset &= same
        print(
            f"  {key:<22} {'.'.join(path or ()):<34} {'=' if same else '!'} {mine!s:<24} | {value}"
        )
    extra = sorted(set(ours) - {path[0] for path in TRL_ENV_COVERAGE.values()})
    print(f"  plus top-level facts trl env lacks: {', '.join(extra)}")
    return superset


def imports_breakdown(script: str, runs: int) -> None:
    """Per-probe seconds, their sum and max, and the probe wall time (medians of `runs`)."""
    per_probe, sums, maxes, walls, commands = {}, [], [], [], []
    timed([PYTHON, script, "--imports", "--json"])  # warm-up
    for _ in range(runs):
        wall, proc = timed([PYTHON, script, "--imports", "--json"])
        report = json.loads(proc.stdout)
        probes = {
            n: p["import"]["seconds"] for n, p in report["packages"].items() if p.get("import")
        }
        for name, seconds in probes.items():
            per_probe.setdefault(name, []).append(seconds)
        sums.append(sum(probes.values()))
        maxes.append(max(probes.values()))
        walls.append(report["timings"]["imports_wall"])
        commands.append(wall)
        workers = report["timings"]["imports_workers"]
    med = statistics.median
    print(f"\n--imports of {Path(script).name}, medians of {runs} runs (seconds per probe):")
    for name, seconds in sorted(per_probe.items(), key=lambda kv: -med(kv[1])):
        print(f"  {name:<20} {med(seconds):6.2f}")
    cores = os.cpu_count() or 1
    print(
        f"  sum {med(sums):.2f} s, max {med(maxes):.2f} s, ideal max(max, sum/{cores} cores) "
        f"{max(med(maxes), med(sums) / cores):.2f} s; probe wall {med(walls):.2f} s with "
        f"{workers} workers; whole command {med(commands):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command (>= 5)")
    parser.add_argument("--script", default=str(SCRIPT), help="the checker to measure")
    parser.add_argument("--skip-imports", action="store_true", help="no --imports breakdown")
    args = parser.parse_args()
    args.runs = max(args.runs, 5)
    COMMANDS["ours (text)"][1] = COMMANDS["ours --json"][1] = args.script
    print(f"{platform.platform()}, {os.cpu_count()} cores, {args.runs} runs after 1 warm-up")
    results = bench(args.runs)
    medians = {k: statistics.median(v) for k, v in results.items()}
    ratio = medians["ours (text)"] / medians["trl env"]
    print(f"\nours (text) / trl env = {ratio:.3f} (target <= {TARGET_RATIO})")
    print(f"ours --json / trl env = {medians['ours --json'] / medians['trl env']:.3f}")
    superset = coverage(args.script)
    print(f"\nsuperset of `trl env` (every fact, same value): {superset}")
    if not args.skip_imports:
        imports_breakdown(args.script, args.runs)
    sys.exit(0 if ratio <= TARGET_RATIO and superset else 1)


if __name__ == "__main__":
    main()
