"""Bundle and agentskills.io spec conformance (skill-format.md, section (d): F*, B*, S*, P1).

Deliberate deviation: SKILL.md carries the Claude-Code-only key `disable-model-invocation: true`
(the skill loads only when the user types /scaling-and-backends). The spec has no place for it,
so test_spec_validator_passes_without_cc_only_key proves it is the ONLY deviation: a copy
without it passes the skills-ref validator, and the original fails with exactly that complaint.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from docs_oracle import REPO, SKILL_MD, frontmatter_range, inline_code_spans, parse_markdown

SPEC_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
# Non-spec frontmatter keys we keep on purpose, with the reason.
CC_ONLY_KEYS = {
    # Claude Code: only the user can invoke the skill (/scaling-and-backends); the description
    # costs no context. skills-ref and the Skills API reject it, see the F3 test below.
    "disable-model-invocation": "Claude Code user-only invocation",
}
SKILL_NAME = "scaling-and-backends"
NAME_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
TRIGGER_RE = re.compile(r"\b(when|if|for|before)\b", re.I)
SCRIPTS = sorted((REPO / "scripts").glob("*.py")) if (REPO / "scripts").is_dir() else []
# Every Python file the scripts run: the entry scripts and the package they share.
SOURCES = SCRIPTS + sorted((REPO / "scripts" / "_scaling").glob("*.py"))
OWN_PACKAGE = "_scaling"
BUNDLE_PARTS = ("SKILL.md", "LICENSE", "references", "scripts", "evals", "agents")
FORBIDDEN_LAUNCH = re.compile(
    r"^\s*(accelerate\s+launch|torchrun|vllm\s+serve|deepspeed|"
    r"trl\s+(sft|dpo|grpo|rloo|kto|reward|distillation|vllm-serve))\b"
)
FORBIDDEN_ARGV = {
    ("accelerate", "launch"),
    ("vllm", "serve"),
    ("trl", "sft"),
    ("trl", "dpo"),
    ("trl", "grpo"),
    ("trl", "rloo"),
    ("trl", "kto"),
    ("trl", "reward"),
    ("trl", "distillation"),
    ("trl", "vllm-serve"),
}
FORBIDDEN_EXE = {"torchrun", "deepspeed"}


def split_skill(text: str) -> tuple[str, str]:
    lines = text.splitlines()
    fm = frontmatter_range(lines)
    assert fm, "SKILL.md must open with a `---` frontmatter block closed by `---`"
    return "\n".join(lines[1 : fm[1]]), "\n".join(lines[fm[1] + 1 :])


@pytest.fixture(scope="module")
def skill():
    if not SKILL_MD.is_file():
        pytest.skip("SKILL.md is not written yet")
    text = SKILL_MD.read_text(encoding="utf-8")
    fm_text, body = split_skill(text)
    fm = yaml.safe_load(fm_text)
    return {"text": text, "fm_text": fm_text, "fm": fm, "body": body}


# --- frontmatter (F1-F8) --------------------------------------------------------------------


def test_frontmatter_parses_with_pyyaml_and_strictyaml(skill):
    import strictyaml

    assert isinstance(skill["fm"], dict)
    strict = strictyaml.load(skill["fm_text"]).data  # rejects flow style like {a: b}
    assert isinstance(strict, dict)
    assert set(strict) == set(skill["fm"])


def test_frontmatter_keys(skill):
    extra = set(skill["fm"]) - SPEC_KEYS - set(CC_ONLY_KEYS)
    assert not extra, f"non-spec frontmatter keys not in CC_ONLY_KEYS: {sorted(extra)}"
    assert {"name", "description"} <= set(skill["fm"])


def test_disable_model_invocation_is_yaml_true(skill):
    assert skill["fm"].get("disable-model-invocation") is True


def test_metadata(skill):
    meta = skill["fm"].get("metadata")
    assert isinstance(meta, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()), meta
    assert meta.get("disco-role") == "operating"
    assert "version" not in skill["fm"], "put a version in metadata.version (quoted), not top level"


def test_license_is_apache_everywhere(skill):
    assert skill["fm"].get("license") == "Apache-2.0"
    lic = (REPO / "LICENSE").read_text(encoding="utf-8")
    for phrase in (
        "Apache License",
        "Version 2.0, January 2004",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "END OF TERMS AND CONDITIONS",
    ):
        assert phrase in lic, f"LICENSE is not the Apache-2.0 text (missing {phrase!r})"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"


def test_name(skill):
    name = skill["fm"]["name"]
    assert isinstance(name, str) and NAME_RE.fullmatch(name) and len(name) <= 64
    assert name == SKILL_NAME
    assert not re.search(r"claude|anthropic|<|>", name)


def test_description(skill):
    d = skill["fm"]["description"]
    assert isinstance(d, str) and 1 <= len(d) <= 1024, len(d)
    assert len(d) <= 500, f"description is {len(d)} chars; keep it within 500"
    assert "<" not in d and ">" not in d
    assert "TRL" in d
    assert re.search(r"vLLM|PEFT|memory", d), "description should name vLLM, PEFT or memory"
    assert re.search(r"\bUse (it )?when\b", d), "description needs a 'Use when ...' clause"
    assert "---" not in skill["fm_text"], "`---` inside frontmatter breaks skills-ref's split"


# --- body (B*) ------------------------------------------------------------------------------


def test_body_size(skill):
    body = skill["body"]
    assert len(body.splitlines()) < 500
    assert len(body) / 4 < 5000, f"body is ~{len(body) // 4} tokens"


def test_gotchas_section(skill):
    assert re.search(r"^## Gotchas\s*$", skill["body"], re.M)


def test_no_orphan_files(skill):
    orphans = [
        f"{d}/{p.name}"
        for d in ("references", "scripts")
        if (REPO / d).is_dir()
        for p in sorted((REPO / d).iterdir())
        if p.is_file() and f"{d}/{p.name}" not in skill["body"]
    ]
    assert not orphans, f"files never named in SKILL.md: {orphans}"


def test_reference_mentions_have_triggers(skill):
    bad = [
        f"SKILL.md: {ln.strip()}"
        for ln in skill["body"].splitlines()
        if re.search(r"references/[\w.-]+\.md", ln) and not TRIGGER_RE.search(ln)
    ]
    assert not bad, "lines naming a reference without when/if/for/before:\n" + "\n".join(bad)


def test_backticked_bundle_paths_resolve(skill):
    """B2/B8: a backticked span starting with references/, scripts/ or assets/ is exactly an
    existing path (case-sensitive); commands start with `python `."""
    doc = parse_markdown(skill["text"], "SKILL.md")
    problems = []
    for span in doc.spans:
        t = span.text
        if not re.match(r"(references|scripts|assets)/", t):
            continue
        p = REPO / t
        if " " in t or not p.exists() or p.name not in {q.name for q in p.parent.iterdir()}:
            problems.append(
                f"{span.where}: `{t}` is not an existing path (write commands as "
                "`python scripts/x.py ...`)"
            )
    assert not problems, "\n".join(problems)


# --- F3: the skills-ref validator -------------------------------------------------------------


def copy_bundle(dest: Path, keep_cc_keys: bool) -> Path:
    skill_dir = dest / SKILL_NAME
    skill_dir.mkdir(parents=True)
    for part in BUNDLE_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, skill_dir / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            shutil.copy2(src, skill_dir / part)
    if not keep_cc_keys:
        lines = (skill_dir / "SKILL.md").read_text(encoding="utf-8").splitlines(keepends=True)
        fm = frontmatter_range([ln.rstrip("\n") for ln in lines])
        keep = [
            ln
            for i, ln in enumerate(lines)
            if not (fm[0] < i < fm[1] and re.match(r"^(%s)\s*:" % "|".join(CC_ONLY_KEYS), ln))
        ]
        (skill_dir / "SKILL.md").write_text("".join(keep), encoding="utf-8")
    return skill_dir


def agentskills_validate(skill_dir: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "agentskills"
    if not exe.exists():
        pytest.skip("skills-ref (agentskills CLI) is not installed in this venv")
    return subprocess.run(
        [str(exe), "validate", str(skill_dir)], capture_output=True, text=True, timeout=60
    )


def test_spec_validator_passes_without_cc_only_key(skill, tmp_path):
    stripped = copy_bundle(tmp_path / "a", keep_cc_keys=False)
    fm = yaml.safe_load(split_skill((stripped / "SKILL.md").read_text())[0])
    assert not set(fm) & set(CC_ONLY_KEYS)
    res = agentskills_validate(stripped)
    assert res.returncode == 0, res.stdout + res.stderr


def test_spec_validator_rejects_only_the_cc_only_key(skill, tmp_path):
    if not set(skill["fm"]) & set(CC_ONLY_KEYS):
        pytest.skip("no CC-only key present")
    res = agentskills_validate(copy_bundle(tmp_path / "b", keep_cc_keys=True))
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "Unexpected fields in frontmatter: disable-model-invocation." in out, out
    complaints = [ln for ln in out.splitlines() if ln.strip().startswith("- ")]
    assert len(complaints) == 1, out


# --- agents/openai.yaml -----------------------------------------------------------------------


def test_codex_sidecar():
    path = REPO / "agents" / "openai.yaml"
    if not path.is_file():
        pytest.skip("no agents/openai.yaml")
    data = yaml.safe_load(path.read_text())
    assert data["policy"]["allow_implicit_invocation"] is False


# --- scripts (S*) -----------------------------------------------------------------------------


def script_ids():
    return [p.name for p in SCRIPTS] or ["(none)"]


@pytest.fixture(params=script_ids())
def script(request):
    if request.param == "(none)":
        pytest.skip("no scripts yet")
    return REPO / "scripts" / request.param


def run_help(script: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *flags, str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )


def test_script_help(script):
    res = run_help(script)
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout
    m = re.search(r"\bexit (codes?|status)\b", res.stdout, re.I)
    assert m, f"{script.name} --help does not document its exit codes"
    tail = res.stdout[m.start() :]
    assert re.search(r"\b0\b", tail) and re.search(r"\b2\b", tail), (
        f"{script.name} --help should list exit codes 0 and 2"
    )


def test_script_runs_without_site_packages(script):
    res = run_help(script, "-S")
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(REPO / "scripts")))
def test_script_imports_only_stdlib_at_top(source):
    tree = ast.parse(source.read_text(encoding="utf-8"))
    bad = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods = [node.module or ""]
        else:
            continue  # relative imports stay inside the package
        bad += [
            f"{source.name}:{node.lineno}: {m}"
            for m in mods
            if m.split(".")[0] not in (*sys.stdlib_module_names, OWN_PACKAGE)
        ]
    assert not bad, f"non-stdlib imports at module top: {bad}"


def launch_violations(script: Path) -> list[str]:
    """Static check: argv literals or subprocess/os calls that would start a job."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            strs = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            strs = [s for s in strs if isinstance(s, str)]
            # An argv literal has at least two strings: ["torchrun", "--nproc_per_node", ...].
            exe = Path(strs[0]).name if strs else ""
            # A launcher followed by a flag or a script is argv; ("deepspeed", "str") is a
            # table row naming TrainingArguments' `deepspeed` field and its type.
            exe_argv = len(strs) >= 2 and exe in FORBIDDEN_EXE and re.match(r"-|.*\.py$", strs[1])
            if exe_argv or tuple(strs[:2]) in FORBIDDEN_ARGV:
                bad.append(f"{script.name}:{node.lineno}: argv {strs[:3]}")
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if re.match(r"(subprocess\.|os\.(system|popen|exec|spawn)|Popen|run$|check_)", func):
                for sub in ast.walk(node):
                    if (
                        isinstance(sub, ast.Constant)
                        and isinstance(sub.value, str)
                        and FORBIDDEN_LAUNCH.match(sub.value)
                    ):
                        bad.append(f"{script.name}:{node.lineno}: {func}({sub.value!r})")
    return bad


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(REPO / "scripts")))
def test_script_never_launches_jobs(source):
    bad = launch_violations(source)
    assert not bad, "scripts must not launch training or serving jobs:\n" + "\n".join(bad)


def test_launch_check_self_test(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import subprocess, os\n"
        "subprocess.run(['accelerate', 'launch', 'train.py'])\n"
        "os.system('vllm serve Qwen/Qwen3-0.6B')\n"
        "CMD = ('torchrun', '--nproc_per_node', '2')\n"
        "DS = ['deepspeed', 'train.py', '--deepspeed', 'ds.json']\n"
    )
    assert len(launch_violations(bad)) == 4, launch_violations(bad)
    ok = tmp_path / "ok.py"
    ok.write_text(
        "import subprocess\nNAMES = ('deepspeed',)\n"
        "HINT = 'run accelerate launch yourself'\n"
        "subprocess.run(['nvidia-smi', '-L'])\n"
        "FIELD = ('deepspeed', 'str', None, None, None)\n"
    )
    assert launch_violations(ok) == []


def test_backticked_commands_start_with_python(skill):
    """B8: `scripts/x.py --flag` in backticks reads as a missing path to link checkers."""
    bad = [
        t
        for ln in skill["body"].splitlines()
        for t in inline_code_spans(ln)
        if re.match(r"scripts/\S+\.py\s", t)
    ]
    assert not bad, f"write `python scripts/...`: {bad}"


ROUTES = {
    # what the user brings -> the script the routing sends the agent to first
    r"error message|traceback|log": "scripts/diagnose.py",
    r"about to run a command": "scripts/preflight.py",
    r"will it fit": "scripts/estimate_memory.py",
    r"what is installed": "scripts/check_optional_backends.py",
}


def test_routing_is_a_decision_tree_over_the_scripts(skill):
    """Issue 12/11/10: SKILL.md routes by what the user brings; an agent with a log runs the
    diagnoser before it opens the troubleshooting reference; scripts are run, not read."""
    body = skill["body"]
    routing = body[body.index("## Routing") : body.index("## Safe workflow")]
    items = re.split(r"\n- ", routing)
    for trigger, script in ROUTES.items():
        matching = [item for item in items if re.search(trigger, item.split(":")[0])]
        assert matching, f"no routing item is triggered by {trigger!r}"
        assert script in matching[0], (trigger, script, matching[0][:120])
    log_item = next(item for item in items if re.search(ROUTES_LOG, item.split(":")[0]))
    assert log_item.index("scripts/diagnose.py") < log_item.index("references/troubleshooting.md")
    assert re.search(r"`--help`.*do not read its source", routing, re.S)


ROUTES_LOG = next(iter(ROUTES))
