"""check_optional_backends.py run as a user would, in the pinned .venv and in bare interpreters."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from fakeenv import PYTHON, REPO, SCRIPT, run_check, run_json

SCHEMA_KEYS = {
    "schema_version",
    "python",
    "platform",
    "packages",
    "torch_build",
    "accelerators",
    "environment",
    "config",
    "backends",
    "warnings",
}
BACKENDS = {
    "vllm",
    "deepspeed",
    "fsdp2",
    "context_parallel",
    "ulysses",
    "peft",
    "qlora",
    "liger",
    "unsloth",
    "kernels",
    "flash_attn",
    "bf16",
    "nccl",
}
STATUSES = {"ready", "degraded", "unavailable", "not_installed"}


@pytest.fixture(scope="module")
def venv_report():
    return run_json()


def test_json_schema_on_the_pinned_stack(venv_report):
    report = venv_report
    assert set(report) >= SCHEMA_KEYS
    assert report["schema_version"] == 1
    assert set(report["backends"]) == BACKENDS
    for verdict in report["backends"].values():
        assert set(verdict) == {"status", "reasons", "next_step"}
        assert verdict["status"] in STATUSES and verdict["reasons"]
    packages = report["packages"]
    assert packages["trl"]["version"] == "1.16.0"
    assert packages["accelerate"]["version"] == "1.15.0"
    assert packages["vllm"] == {"installed": False, "version": None, "location": None}
    assert packages["torch"]["location"].endswith("site-packages")
    assert report["torch_build"]["version"] == "2.13.0+cpu"
    assert report["torch_build"]["cuda"] is None and report["torch_build"]["variant"] == "cpu"


def test_cpu_box_facts_and_verdicts(venv_report):
    acc = venv_report["accelerators"]
    assert acc["kind"] == "cpu" and acc["devices"] == []
    assert acc["error"] == "NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    backends = venv_report["backends"]
    assert backends["peft"]["status"] == "ready"  # pure Python: LoRA trains on CPU
    assert backends["vllm"]["status"] == "unavailable"
    assert backends["deepspeed"]["status"] == "unavailable"
    assert backends["qlora"]["status"] == "not_installed"
    assert backends["bf16"]["status"] == "degraded"
    assert backends["nccl"]["status"] == "unavailable"


def test_text_report_fits_terminal_and_has_no_colour_when_piped():
    proc = run_check()
    assert proc.returncode == 0, proc.stderr
    assert "\033[" not in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100
    assert proc.stderr == ""
    rows = {}  # backend -> status, from rows that start in column 3
    for line in proc.stdout.splitlines():
        words = line.split()
        if line.startswith("  ") and line[2] != " " and words[0] in BACKENDS:
            rows[words[0]] = words[1]
    assert rows == {
        "peft": "ready",
        "qlora": "not_installed",
        "kernels": "not_installed",
        "bf16": "degraded",
    }
    # The backends that only lack a GPU share one line instead of nine blocks.
    grouped = proc.stdout.split("Need a GPU (this machine: cpu), so unavailable:")[1].split("\n\n")[
        0
    ]
    assert {n.strip(" ,\n") for n in grouped.split(",")} == BACKENDS - set(rows)
    # Plumbing (aiohttp, ninja, nvidia-nccl-*) is counted, not listed; --json keeps it.
    assert "Missing for backends usable here: bitsandbytes, kernels\n" in proc.stdout
    assert "aiohttp" not in proc.stdout and "ninja" not in proc.stdout


@pytest.mark.parametrize(
    "interpreter",
    [PYTHON, shutil.which("python3"), "/root/.pyenv/versions/3.9.18/bin/python3"],
)
def test_bare_interpreter_prints_one_json_object(interpreter):
    if not interpreter or not Path(interpreter).exists():
        pytest.skip(f"{interpreter} not available")
    proc = subprocess.run(
        [interpreter, "-S", str(SCRIPT), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["schema_version"] == 1
    assert not any(p["installed"] for p in report["packages"].values())
    assert report["backends"]["peft"]["status"] == "not_installed"


def test_imports_on_the_pinned_stack():
    report = run_json("--imports", "--timeout", "60", timeout=120)
    packages = report["packages"]
    probed = {n for n, p in packages.items() if "import" in p}
    assert probed == {n for n, p in packages.items() if p["installed"]} - {"pyyaml", "packaging"}
    assert all(packages[n]["import"]["status"] == "ok" for n in probed), packages
    assert packages["trl"]["import"]["module_version"] == "1.16.0"
    runtime = report["torch_runtime"]  # from the torch probe itself: torch is imported once
    assert runtime["version"] == "2.13.0+cpu" and runtime["cuda_available"] is False
    assert runtime["fsdp2_fully_shard"] is True
    assert report["timings"]["imports_workers"] >= 1


def test_unknown_flag_is_one_line_and_exit_2():
    proc = run_check("--frobnicate")
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "--frobnicate" in line and "expected:" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--accelerate-config", "/nonexistent/config.yaml"], "readable accelerate config"),
        (["--vllm-url", "notaurl"], "http(s)://host[:port]"),
        (["--vllm-url", "ftp://host:1"], "http(s)://host[:port]"),
        (["--timeout", "soon"], "seconds as a number"),
        (["--timeout", "0"], "0 < seconds <= 600"),
        (["--require", "warp_drive"], "expected some of vllm,"),
    ],
)
def test_bad_usage_exit_2(args, expected):
    proc = run_check(*args)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert expected in line
    assert "Traceback" not in proc.stderr


def test_require_exit_codes():
    missing = run_check("--require", "vllm")
    assert missing.returncode == 1
    assert "vllm is unavailable" in missing.stderr
    ok = run_check("--require", "peft", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["backends"]["peft"]["status"] == "ready"
    mixed = run_check("--require", "peft,deepspeed")
    assert mixed.returncode == 1 and "peft" not in mixed.stderr.split(":", 2)[2]


def test_help_documents_schema_and_exit_codes():
    proc = run_check("--help")
    assert proc.returncode == 0
    for word in (
        "schema_version 1",
        "exit status",
        "backends.<name>",
        "not_installed",
        "3  internal",
    ):
        assert word in proc.stdout


def test_internal_error_is_one_line_exit_3(tmp_path):
    # A sitecustomize that breaks os.listdir makes collection fail inside the script.
    (tmp_path / "sitecustomize.py").write_text(
        "import os\ndef boom(*a, **k):\n    raise RuntimeError('disk on fire')\nos.listdir = boom\n"
    )
    proc = run_check("--json", site=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr.strip() == (
        "check_optional_backends.py: internal error: RuntimeError: disk on fire"
    )


def test_environment_is_reported_with_secrets_redacted():
    env = {
        "NCCL_DEBUG": "INFO",
        "VLLM_SERVER_DEV_MODE": "1",
        "HF_TOKEN": "hf_abcdef",
        "WANDB_API_KEY": "x",
        "MY_SECRET_PASSWORD": "y",
        "MASTER_PORT": "29500",
        "UNRELATED": "z",
    }
    report = run_json(env=env)
    environment = report["environment"]
    assert environment["NCCL_DEBUG"] == "INFO" and environment["MASTER_PORT"] == "29500"
    assert environment["VLLM_SERVER_DEV_MODE"] == "1"
    assert environment["HF_TOKEN"] == "<redacted>"
    assert "UNRELATED" not in environment and "WANDB_API_KEY" not in environment
    assert "hf_abcdef" not in json.dumps(report)


FSDP2_BAD = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_version: 2
  fsdp_activation_checkpointing: true
  fsdp_forward_prefetch: true
  fsdp_reshard_after_forward: FULL_SHARD
mixed_precision: bf16
num_machines: 1
num_processes: 8  # TRL's shipped configs hard-code 8
"""


def test_accelerate_config_argument_is_checked(tmp_path):
    path = tmp_path / "fsdp2.yaml"
    path.write_text(FSDP2_BAD)
    config = run_json("--accelerate-config", str(path))["config"]
    assert config["source"] == "--accelerate-config" and config["parser"] == "pyyaml"
    assert config["values"]["fsdp_config"]["fsdp_version"] == 2
    problems = " | ".join(config["problems"])
    assert "num_processes: 8 but 0 GPU(s) visible" in problems
    assert "gradient_checkpointing=False" in problems
    assert "fsdp_forward_prefetch" in problems
    assert "fsdp_reshard_after_forward: FULL_SHARD" in problems


def test_default_config_location_and_builtin_yaml_fallback(tmp_path):
    home = tmp_path / "hf"
    (home / "accelerate").mkdir(parents=True)
    (home / "accelerate" / "default_config.yaml").write_text(FSDP2_BAD)
    # -S: no pyyaml on the path, so the built-in parser must read the nested file.
    proc = run_check("--json", isolated=True, env={"HF_HOME": str(home)})
    config = json.loads(proc.stdout)["config"]
    assert config["path"] == str(home / "accelerate" / "default_config.yaml")
    assert config["source"] == "default" and config["parser"] == "builtin-yaml"
    assert config["values"]["num_processes"] == 8
    assert config["values"]["fsdp_config"]["fsdp_forward_prefetch"] is True


def test_json_config_and_unparseable_config(tmp_path):
    good = tmp_path / "c.json"
    good.write_text(json.dumps({"distributed_type": "DEEPSPEED", "num_processes": 1}))
    config = run_json("--accelerate-config", str(good))["config"]
    assert any("deepspeed is not installed" in p for p in config["problems"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed_type: [unclosed\n")
    config = run_json("--accelerate-config", str(bad))["config"]
    assert config["error"].startswith("cannot parse")
