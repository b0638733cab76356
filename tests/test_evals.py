"""evals/evals.json: agentskills.io "Evaluating skills" format, plus this bundle's conventions.

Schema (agentskills.io/skill-creation/evaluating-skills):
    {"skill_name": str, "evals": [{"id": int, "prompt": str, "expected_output": str,
                                   "files": [str]?, "assertions": [str]}]}
Bundle convention: each case also carries `"reference": "references/<file>.md"` (a string, or
a list of such strings) naming the reference the case exercises; every reference gets at least
MIN_PER_REFERENCE cases. Backticked names in expected_output/assertions pass the same identifier
oracle as the docs (test_references.py).
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from docs_oracle import (
    EVALS_JSON,
    EXPECTED_REFERENCES,
    REPO,
    inline_code_spans,
    vllm_window_problems,
)

SKILL_NAME = "scaling-and-backends"
MIN_CASES = 20
MIN_PER_REFERENCE = 5
CASE_KEYS = {"id", "prompt", "expected_output", "files", "assertions", "reference"}
REFERENCE_KEY = "reference"


@pytest.fixture(scope="module")
def evals():
    if not EVALS_JSON.is_file():
        pytest.skip("evals/evals.json is not written yet")
    return json.loads(EVALS_JSON.read_text(encoding="utf-8"))


def case_refs(case) -> list[str]:
    ref = case.get(REFERENCE_KEY)
    return [ref] if isinstance(ref, str) else list(ref or [])


def test_top_level(evals):
    assert set(evals) == {"skill_name", "evals"}, set(evals)
    assert evals["skill_name"] == SKILL_NAME
    assert isinstance(evals["evals"], list) and len(evals["evals"]) >= MIN_CASES


def test_cases_schema(evals):
    problems = []
    for i, c in enumerate(evals["evals"]):
        where = f"evals[{i}] (id={c.get('id')!r})"
        if set(c) - CASE_KEYS:
            problems.append(f"{where}: unknown keys {sorted(set(c) - CASE_KEYS)}")
        if not (isinstance(c.get("id"), int) and not isinstance(c.get("id"), bool)):
            problems.append(f"{where}: id must be an integer")
        for k in ("prompt", "expected_output"):
            if not (isinstance(c.get(k), str) and c[k].strip()):
                problems.append(f"{where}: {k} must be a non-empty string")
        a = c.get("assertions")
        if not (isinstance(a, list) and a and all(isinstance(x, str) and x.strip() for x in a)):
            problems.append(f"{where}: assertions must be a non-empty list of non-empty strings")
        files = c.get("files", [])
        if not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
            problems.append(f"{where}: files must be a list of paths")
        for f in files if isinstance(files, list) else []:
            if not (REPO / f).is_file() and not (REPO / "evals" / f).is_file():
                problems.append(f"{where}: file {f} does not exist")
        refs = case_refs(c)
        if not refs:
            problems.append(f"{where}: missing `{REFERENCE_KEY}`")
        for r in refs:
            if not re.fullmatch(r"references/[\w.-]+\.md", r) or not (REPO / r).is_file():
                problems.append(f"{where}: `{REFERENCE_KEY}` {r!r} is not an existing reference")
    assert not problems, "\n".join(problems)


def test_ids_unique(evals):
    dup = [k for k, n in Counter(c.get("id") for c in evals["evals"]).items() if n > 1]
    assert not dup, f"duplicate ids: {dup}"


def test_prompts_unique(evals):
    dup = [k[:60] for k, n in Counter(c.get("prompt") for c in evals["evals"]).items() if n > 1]
    assert not dup, f"duplicate prompts: {dup}"


def test_cases_spread_over_references(evals):
    counts = Counter(r for c in evals["evals"] for r in case_refs(c))
    thin = {
        r: counts.get(r, 0) for r in EXPECTED_REFERENCES if counts.get(r, 0) < MIN_PER_REFERENCE
    }
    assert not thin, f"references with fewer than {MIN_PER_REFERENCE} cases: {thin}"


def test_backticked_names_pass_the_oracle(evals, ident):
    problems = []
    for c in evals["evals"]:
        texts = [("expected_output", c.get("expected_output", ""))]
        texts += [(f"assertions[{j}]", a) for j, a in enumerate(c.get("assertions", []))]
        for field, text in texts:
            for tok in inline_code_spans(str(text).replace("\n", " ")):
                problems += ident.check_token(tok, f"evals.json id={c.get('id')} {field}")
    assert not problems, "\n".join(problems)


def test_vllm_window_statements(evals):
    """Expected outputs and assertions state TRL's vLLM window (prompts may quote anything)."""
    problems = []
    for c in evals["evals"]:
        texts = [("expected_output", c.get("expected_output", ""))]
        texts += [(f"assertions[{j}]", a) for j, a in enumerate(c.get("assertions", []))]
        for field, text in texts:
            problems += vllm_window_problems(str(text), f"evals.json id={c.get('id')} {field}")
    assert not problems, "\n".join(problems)
