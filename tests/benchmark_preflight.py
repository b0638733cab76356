"""Benchmark scripts/preflight.py against `trl <cmd> --help` (which imports TRL): a preflight must
cost less than asking for help, and without TRL stay under a second.

Run: .venv/bin/python tests/benchmark_preflight.py [--runs 5]
Not collected by pytest. Each command runs once to warm caches, then N times; medians shown,
plus the TRL child's own split (import vs parse) from the report.
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
SCRIPT = REPO / "scripts" / "preflight.py"
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
FACTS = REPO / "tests" / "fixtures" / "check_facts" / "h100_8x_nvlink.json"
PLAN = [
    "trl", "grpo", "--model_name_or_path", "Qwen/Qwen3-0.6B", "--dataset_name", "d",
    "--accelerate_config", "zero3", "--use_vllm", "--per_device_train_batch_size", "2",
]  # fmt: skip

COMMANDS = {
    "preflight, no TRL, recorded facts": [PYTHON, str(SCRIPT), "--trl", "no", "--facts",
                                          str(FACTS), "--json", "--", *PLAN],
    "preflight, no TRL, facts of this machine": [PYTHON, str(SCRIPT), "--trl", "no", "--json",
                                                 "--", *PLAN],
    "preflight with TRL's parser (child)": [PYTHON, str(SCRIPT), "--trl", "yes", "--facts",
                                            str(FACTS), "--json", "--", *PLAN],
    "trl grpo --help": [str(VENV_BIN / "trl"), "grpo", "--help"],
    "trl sft --help": [str(VENV_BIN / "trl"), "sft", "--help"],
    "import TRL's grpo parser (make_parser)": [
        PYTHON, "-c", "from trl.scripts.grpo import make_parser; make_parser()"],
}  # fmt: skip


def timed(cmd: list) -> tuple:
    env = dict(os.environ, PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO))
    return time.perf_counter() - start, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"plan: {' '.join(PLAN)} on {FACTS.name}\n")
    medians = {}
    child = None
    for name, cmd in COMMANDS.items():
        timed(cmd)  # warm the page cache
        runs = []
        for _ in range(args.runs):
            seconds, proc = timed(cmd)
            if proc.returncode not in (0, 1):
                print(f"{name}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
                return 1
            runs.append(seconds)
            if "(child)" in name:
                child = json.loads(proc.stdout)
        medians[name] = statistics.median(runs)
        print(f"{name:<44} median {medians[name]:6.2f} s  (min {min(runs):.2f}, n={len(runs)})")
    with_trl = medians["preflight with TRL's parser (child)"]
    help_time = medians["trl grpo --help"]
    print(f"\npreflight with TRL / `trl grpo --help`: {with_trl / help_time:.2f}x "
          f"({with_trl - help_time:+.2f} s)")  # fmt: skip
    if child is not None:
        seconds = child["plan"].get("trl_parser_seconds") or {}
        print(f"TRL child: {child['plan']['trl_parser']}; {seconds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
