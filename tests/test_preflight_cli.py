"""scripts/preflight.py as a command: exit codes, one line for every bad input, the JSON contract,
a broken or hanging TRL that cannot take the preflight down, and its speed without TRL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from preflight_support import MACHINES, PLANS, PREFLIGHT

L4 = str(MACHINES / "l4.json")
SFT = ["trl", "sft", "--model_name_or_path", "m", "--dataset_name", "d"]


def run(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PREFLIGHT), *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env=dict(os.environ, **(env or {})),
    )  # fmt: skip


def assert_usage_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preflight.py: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def garbage(tmp_path_factory):
    folder = tmp_path_factory.mktemp("garbage")
    (folder / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (folder / "list.yaml").write_text("- a\n- b\n")
    (folder / "bad.yaml").write_text("key: [unclosed\n  other: {\n")
    (folder / "env.yaml").write_text("env: [1, 2]\nmodel_name_or_path: m\n")
    (folder / "facts.json").write_text("{not json")
    (folder / "nofacts.json").write_text('{"some": "object"}')
    return folder


HOSTILE = {
    "no separator": (["trl", "sft"], "put the COMMAND after --"),
    "empty command": (["--"], "no COMMAND after --"),
    "only assignments": (["--", "A=1", "B=2"], "no program to run"),
    "unknown launcher": (["--", "bash", "run.sh"], "bash: not a launcher"),
    "deepspeed launcher": (["--", "deepspeed", "train.py"], "deepspeed launcher is not resolved"),
    "trl env": (["--", "trl", "env"], "not a training command"),
    "trl typo": (["--", "trl", "stf", "--x"], "trl stf: not a training command"),
    "accelerate config": (["--", "accelerate", "config"], "only `accelerate launch"),
    "python alone": (["--", "python"], "python without a script"),
    "unbalanced quote": (["--", "trl sft --model_name_or_path 'm"], "cannot split the COMMAND"),
    "two trainers": (["--", "trl sft & trl dpo"], "2 training launches"),
    "unknown trainer option": (["--trainer", "ppo", "--", "python", "t.py"], "invalid choice"),
    "bad timeout": (["--timeout", "0", "--", *SFT], "--timeout"),
    "missing recipe": (["--", "trl", "sft", "--config", "/nonexistent.yaml"], "not found"),
    "recipe without path": (["--", "trl", "sft", "--config"], "--config needs a recipe"),
    "missing accelerate config": (
        ["--", "accelerate", "launch", "--config_file", "/nonexistent.yaml", "t.py"],
        "/nonexistent.yaml not found",
    ),
    "torchrun bad nproc": (["--", "torchrun", "--nproc-per-node", "many", "t.py"], "many"),
    "accelerate bad flag value": (
        ["--", "accelerate", "launch", "--num_processes", "x", "t.py"],
        "invalid int value",
    ),
    "server bad port": (["--", "vllm serve m --port http & trl sft"], "port"),
    "missing facts": (["--facts", "/nonexistent.json", "--", *SFT], "cannot read facts"),
    "missing model config": (["--model-config", "/nonexistent.json", "--", *SFT], "config.json"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_bad_input_is_one_line_and_exit_2(case):
    args, fragment = HOSTILE[case]
    if "--facts" not in args and case not in ("no separator",):
        args = ["--facts", L4, *args]
    assert_usage_error(run(*args), fragment)


@pytest.mark.parametrize(
    "name, fragment",
    [("binary.yaml", "is not a text file"), ("list.yaml", "must contain a YAML mapping"),
     ("bad.yaml", "cannot parse"), ("env.yaml", "`env` field should be a dict")],
)  # fmt: skip
def test_garbage_recipe_is_one_line(garbage, name, fragment):
    assert_usage_error(
        run("--facts", L4, "--", "trl", "sft", "--config", str(garbage / name)), fragment
    )


@pytest.mark.parametrize("name", ["facts.json", "nofacts.json"])
def test_garbage_facts_are_one_line(garbage, name):
    assert_usage_error(run("--facts", str(garbage / name), "--", *SFT), name)


def test_exit_codes_follow_the_findings():
    sound = run("--trl", "no", "--facts", L4, "--", *SFT)
    assert sound.returncode == 0 and "Verdict: no error found (exit 0)" in sound.stdout
    broken = run("--trl", "no", "--facts", L4, "--", *SFT, "--use_peft", "--lora_target_modules",
                 "lm_head")  # fmt: skip
    assert broken.returncode == 1 and "lora-on-lm-head" in broken.stdout
    assert "Verdict: will not run as planned (exit 1)" in broken.stdout


def test_json_contract():
    proc = run("--trl", "no", "--json", "--facts", str(MACHINES / "h100_8x_nvlink.json"), "--",
               "trl", "grpo", "--config", str(PLANS / "grpo_recipe.yaml"), "--accelerate_config",
               "zero3", "--vllm_tensor_parallel_size", "3")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["schema_version"] == 1
    plan = report["plan"]
    for key in (
        "launcher",
        "trainer",
        "world_size",
        "processes_per_node",
        "nodes",
        "distributed_type",
        "vllm",
        "precision",
        "peft",
        "trl",
        "memory",
        "trl_parser",
    ):
        assert key in plan, key  # fmt: skip
    assert plan["vllm"] == {"mode": "colocate", "tensor_parallel_size": 3}
    assert plan["nodes"][0]["gpus_used"] == list(range(8))
    tp = next(f for f in report["findings"] if f["id"] == "vllm-tp-divides-world")
    assert set(tp) >= {"id", "severity", "stage", "message", "why", "fix", "source"}
    assert tp["message"] == "tensor_parallel_size (3) must divide world size (8) evenly."
    assert report["summary"]["error"] == 1


def test_secrets_in_the_command_are_not_printed():
    command = ["HF_TOKEN=hf_secret123", "trl", "grpo", "--dataset_name", "d", "--use_vllm",
               "--vllm_mode", "server", "--vllm_server_base_url", "http://user:pw0rd@10.0.0.5:8000"]  # fmt: skip
    for extra in ([], ["--json"]):
        proc = run("--trl", "no", *extra, "--facts", L4, "--", *command)
        assert "hf_secret123" not in proc.stdout and "pw0rd" not in proc.stdout, proc.stdout


def test_text_report_fits_the_terminal():
    proc = run("--trl", "no", "--facts", str(MACHINES / "rtx4090_2x.json"), "--", *SFT,
               "--accelerate_config", "multi_gpu", env={"COLUMNS": "80"})  # fmt: skip
    assert proc.returncode == 1
    assert "processes-exceed-gpus" in proc.stdout and "num_processes: 8 but 2 GPU(s)" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80


def test_command_as_one_string_or_many_arguments_is_the_same():
    one = run("--trl", "no", "--json", "--facts", L4, "--", " ".join(SFT))
    many = run("--trl", "no", "--json", "--facts", L4, "--", *SFT)
    assert json.loads(one.stdout)["plan"] == json.loads(many.stdout)["plan"]


def test_closed_pipe_is_quiet(tmp_path):
    proc = subprocess.run(
        f"{sys.executable} {PREFLIGHT} --trl no --facts {L4} -- trl sft --dataset_name d | head -1",
        shell=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.stderr == "" and proc.stdout.startswith("Plan:")


# --------------------------------------------------------------------------------------
# A TRL that is broken or hangs cannot take the preflight down
# --------------------------------------------------------------------------------------


@pytest.fixture
def fake_trl(tmp_path):
    def make(body: str) -> dict:
        package = tmp_path / "site" / "trl"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(body)
        return {"PYTHONPATH": str(tmp_path / "site")}

    return make


def test_broken_trl_falls_back_to_the_table(fake_trl):
    env = fake_trl("raise RuntimeError('this TRL is broken')\n")
    proc = run("--json", "--facts", L4, "--", *SFT, "--per_device_train_batch_size", "two", env=env)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert "TRL failed to load: RuntimeError: this TRL is broken" in report["plan"]["trl_parser"]
    assert [f["id"] for f in report["findings"] if f["severity"] == "error"] == [
        "trl-rejects-argument"
    ]


def test_hanging_trl_is_cut_off(fake_trl):
    env = fake_trl("import time\ntime.sleep(120)\n")
    start = time.perf_counter()
    proc = run("--json", "--timeout", "2", "--facts", L4, "--", *SFT, env=env)
    assert time.perf_counter() - start < 20
    assert proc.returncode == 0, proc.stderr
    assert "did not answer (timeout" in json.loads(proc.stdout)["plan"]["trl_parser"]


def test_crashing_trl_is_cut_off(fake_trl):
    env = fake_trl("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    proc = run("--json", "--facts", L4, "--", *SFT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "crashed" in json.loads(proc.stdout)["plan"]["trl_parser"]


def test_trl_yes_without_trl_is_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-S", str(PREFLIGHT), "--trl", "yes", "--facts", L4, "--", *SFT],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert_usage_error(proc, "TRL is not importable")


# --------------------------------------------------------------------------------------
# Speed without TRL
# --------------------------------------------------------------------------------------


def test_under_a_second_without_trl():
    """Without TRL: the interpreter, the tables, the rules and the report in under a second,
    collecting this machine's facts included (best of three: a shared CI core is noisy)."""
    for args in (["--facts", L4], []):
        best = min(_timed(["--trl", "no", "--json", *args, "--", *SFT]) for _ in range(3))
        assert best < 1.0, (args, best)


def _timed(args: list) -> float:
    start = time.perf_counter()
    proc = run(*args)
    assert proc.returncode in (0, 1), proc.stderr
    return time.perf_counter() - start


def test_no_torch_or_trl_import_in_the_preflight_process():
    code = (
        "import runpy, sys\n"
        "sys.argv = sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('torch', 'trl', 'transformers', 'accelerate') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    args = [str(PREFLIGHT), "--trl", "no", "--json", "--facts", L4, "--", *SFT]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert "HEAVY []" in proc.stderr and '"plan"' in proc.stdout, proc.stderr


# --------------------------------------------------------------------------------------
# The README's examples run as written (with the embedded table, for speed)
# --------------------------------------------------------------------------------------


def readme_examples() -> list:
    """(command tokens, expected exit) of each command in the README's preflight section; a
    `# fails:` comment before a command means it must exit 1."""
    import re
    import shlex

    from preflight_support import HERE

    text = (HERE.parent / "README.md").read_text(encoding="utf-8")
    section = text.split("## Check a launch before running it", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    examples, pending, fails = [], "", False
    for line in block.splitlines():
        if not pending and line.startswith("#"):
            fails = line.startswith("# fails")
            continue
        pending += line + "\n"
        try:
            tokens = shlex.split(pending.replace("\\\n", " "))
        except ValueError:
            continue  # inside a quoted string
        if pending.rstrip().endswith("\\"):
            continue
        examples.append((tokens, 1 if fails else 0))
        pending, fails = "", False
    return examples


def test_readme_examples_run_as_written():
    examples = readme_examples()
    assert len(examples) >= 8
    for tokens, expected in examples:
        assert tokens[:2] == ["python3", "scripts/preflight.py"], tokens
        proc = subprocess.run(
            [sys.executable, tokens[1], "--trl", "no", *tokens[2:]],
            capture_output=True, text=True, timeout=60, cwd=str(PREFLIGHT.parents[1]),
        )  # fmt: skip
        assert proc.returncode == expected, (tokens, proc.stdout[-800:], proc.stderr)


def test_help_names_every_key_of_the_json():
    helped = run("--help")
    assert helped.returncode == 0 and helped.stderr == ""
    text = " ".join(helped.stdout.split())
    report = json.loads(run("--trl", "no", "--json", "--facts", L4, "--", *SFT).stdout)
    documented = ("launcher", "trainer", "world_size", "processes_per_node", "nodes",
                  "distributed_type", "vllm", "precision", "peft", "memory", "trl_parser")  # fmt: skip
    assert set(documented) <= set(report["plan"])
    for key in documented + ("id", "severity", "stage", "message", "why", "fix", "source"):
        assert key in text, key
    for stage in {f["stage"] for f in report["findings"]}:
        assert stage in text
