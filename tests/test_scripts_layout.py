"""The scripts as one portable system: each entry script is a thin command with a PEP 723 header,
runs from a copy of scripts/ anywhere (also under -I, PYTHONSAFEPATH and as a zipapp), refuses
old interpreters with one line, and judges recorded facts as if they were collected here."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import script_modules
from _scaling import verdicts

SCRIPTS = script_modules.SCRIPTS
ENTRY_SCRIPTS = sorted(SCRIPTS.glob("*.py"))
MODULES = sorted(script_modules.PACKAGE.glob("*.py"))
FIXTURES = Path(__file__).parent / "fixtures" / "check_facts"
OLD_PYTHONS = [
    p
    for p in (Path(f"/root/.pyenv/versions/{v}/bin/python") for v in ("3.8.18", "3.7.16", "3.6.15"))
    if p.exists()
]
# Arguments that make each entry script do real work without a GPU.
DIAGNOSE = Path(__file__).parent / "fixtures" / "diagnose"
SMOKE_ARGS = {
    "check_optional_backends.py": ["--json"],
    "diagnose.py": [
        "--json",
        "--reference",
        str(DIAGNOSE / "reference.md"),
        str(DIAGNOSE / "oom.log"),
    ],
    "estimate_memory.py": ["--params", "7e9", "--gpus", "2", "--gpu-memory-gb", "24", "--json"],
    "preflight.py": [
        "--json",
        "--facts",
        str(FIXTURES / "l4.json"),
        "--",
        "trl",
        "sft",
        "--model_name_or_path",
        "m",
        "--dataset_name",
        "d",
    ],
}


def run(cmd: list, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=env, cwd=cwd, stdin=subprocess.DEVNULL
    )


@pytest.fixture(scope="module")
def copied(tmp_path_factory) -> Path:
    """scripts/ copied into a deep folder elsewhere, as a user carries it to another node."""
    deep = tmp_path_factory.mktemp("node").joinpath(*"abcdefghij")
    shutil.copytree(SCRIPTS, deep / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    return deep / "scripts"


def test_every_entry_script_has_smoke_args():
    assert {p.name for p in ENTRY_SCRIPTS} == set(SMOKE_ARGS)


@pytest.mark.parametrize("script", ENTRY_SCRIPTS, ids=lambda p: p.name)
def test_pep723_header_declares_no_dependencies(script):
    head = script.read_text(encoding="utf-8").split('"""', 1)[0]
    block = re.search(r"^# /// script\n((?:#.*\n)*?)# ///$", head, re.M)
    assert block, f"{script.name}: no PEP 723 block before the docstring"
    body = block.group(1)
    assert re.search(r'^# requires-python = ">=3\.9"$', body, re.M), body
    assert re.search(r"^# dependencies = \[\]$", body, re.M), body


@pytest.mark.parametrize("mode", ["-I", "PYTHONSAFEPATH", "plain"])
@pytest.mark.parametrize("name", sorted(SMOKE_ARGS))
def test_copied_scripts_run_anywhere(copied, tmp_path, name, mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    flags = []
    if mode == "-I":
        flags = ["-I"]
    elif mode == "PYTHONSAFEPATH":
        env["PYTHONSAFEPATH"] = "1"
    # From another working directory: nothing may depend on the repository or the cwd.
    proc = run([sys.executable, *flags, str(copied / name), *SMOKE_ARGS[name]], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), dict)
    assert proc.stderr == ""


def test_zipapp_of_the_scripts_runs_the_check(tmp_path):
    """One file to copy to a node: python3 -m zipapp scripts -m check_optional_backends:entry."""
    target = tmp_path / "check.pyz"
    build = [sys.executable, "-m", "zipapp", str(SCRIPTS), "-o", str(target)]
    build += ["-m", "check_optional_backends:entry", "-p", "/usr/bin/env python3"]
    assert run(build).returncode == 0
    for flags in ([], ["-I"]):
        proc = run([sys.executable, *flags, str(target), "--json"], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        # The NVML child's source is read out of the archive: it ran and said why no GPU.
        assert report["accelerators"]["error"], report["accelerators"]


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python below 3.9 installed here")
@pytest.mark.parametrize("python", OLD_PYTHONS, ids=lambda p: p.parent.parent.name)
@pytest.mark.parametrize("script", ENTRY_SCRIPTS, ids=lambda p: p.name)
def test_old_python_gets_one_line_and_exit_2(python, script):
    proc = run([str(python), str(script), "--help"])
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs Python 3.9 or newer" in lines[0], proc.stderr


def _public_functions(path: Path):
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            yield node


@pytest.mark.parametrize("path", ENTRY_SCRIPTS + MODULES, ids=lambda p: p.name)
def test_public_functions_are_typed(path):
    if path.name in ("nvml_probe.py", "import_probe.py"):
        pytest.skip("child-process source: runs as a script, has no callers")
    untyped = [
        f"{path.name}:{fn.lineno} {fn.name}"
        for fn in _public_functions(path)
        if fn.returns is None
        or any(a.annotation is None for a in fn.args.args + fn.args.kwonlyargs if a.arg != "self")
    ]
    assert not untyped, untyped


def test_package_map_names_every_module():
    doc = ast.get_docstring(ast.parse((script_modules.PACKAGE / "__init__.py").read_text()))
    listed = set(re.findall(r"^  (\w+)\s{2,}", doc, re.M))
    present = {p.stem for p in MODULES} - {"__init__"}
    assert listed == present, (sorted(present - listed), sorted(listed - present))


def test_shared_pieces_are_written_once():
    """The pieces every script needs exist in the package only, never again in a script."""
    for script in ENTRY_SCRIPTS:
        tree = ast.parse(script.read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        shared = {"OneLineParser", "version_satisfies", "version_key", "run", "collect_facts"}
        assert not defined & shared, (script.name, defined & shared)
        literals = [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Return) and isinstance(n.value, ast.Constant)
        ]
        assert not [v for v in literals if isinstance(v.value, int) and v.value in (1, 2, 3)], (
            f"{script.name}: exit codes come from _scaling.cli"
        )


# --------------------------------------------------------------------------------------
# --facts: recorded facts judged here
# --------------------------------------------------------------------------------------

CHECK = SCRIPTS / "check_optional_backends.py"


@pytest.mark.parametrize("fixture", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_recorded_fixtures_are_judged_as_if_collected_here(fixture):
    path = FIXTURES / f"{fixture}.json"
    proc = run([sys.executable, str(CHECK), "--facts", str(path), "--json"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    expected = verdicts.judge(json.loads(path.read_text()))["backends"]
    assert report["backends"] == expected
    assert report["origin"] == {"facts_file": str(path)}
    text = run([sys.executable, str(CHECK), "--facts", str(path)])
    unwrapped = " ".join(re.sub(r"/\n +", "/", text.stdout).split())  # a long path wraps at "/"
    assert text.returncode == 0 and f"Facts recorded in {path}" in unwrapped


def test_own_json_output_round_trips_through_facts(tmp_path):
    first = run([sys.executable, str(CHECK), "--json"])
    recorded = tmp_path / "node.json"
    recorded.write_text(first.stdout)
    again = run([sys.executable, str(CHECK), "--facts", str(recorded), "--json"])
    assert again.returncode == 0, again.stderr
    before, after = json.loads(first.stdout), json.loads(again.stdout)
    assert after["backends"] == before["backends"]
    assert after["packages"] == before["packages"]
    assert after["config"]["problems"] == before["config"]["problems"]


def test_facts_cannot_be_mixed_with_probes():
    proc = run([sys.executable, str(CHECK), "--facts", str(FIXTURES / "t4.json"), "--imports"])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
