"""Every behavioural claim in the docs is registered with a proof, and every proof still holds.

The first tests check the checker on small samples (a claim without a proof fails, a stale
fragment fails, a cite whose source line no longer says the text fails); the last ones run it
on SKILL.md and the references with tests/semantic_registry.py.
"""

from __future__ import annotations

import inspect
import textwrap
from collections import Counter

import pytest
import semantic_registry
import test_semantics_run
from docs_oracle import doc_paths, load_doc, parse_markdown
from semantic_claims import (
    Cite,
    Claim,
    NotAClaim,
    Restates,
    Run,
    check_cite,
    claim_units,
    normalize,
    registry_problems,
    split_sentences,
    units,
)

RUN_TESTS = {name for name, _ in inspect.getmembers(test_semantics_run, inspect.isfunction)}


def sample(body: str, path: str = "references/sample.md"):
    return parse_markdown(textwrap.dedent(body).lstrip("\n"), path)


SAMPLE = """
    # Sample

    ## Contents

    - [Errors that are raised](#errors)

    ## Errors

    Passing both raises `At most one of fp16 and bf16 can be True`. Raise `lr` for LoRA, e.g. `2e-4`.

    | Key | Effect |
    |---|---|
    | `a_key` | silently ignored from a YAML |

    ```python
    raise ValueError("code blocks are not prose")
    ```
    Raised by `trl/trainer/grpo_config.py:1072` at config time.
    """


def test_units_split_sentences_rows_and_skip_code_contents_and_headers():
    doc = sample(SAMPLE)
    texts = [u.text for u in units(doc)]
    assert texts == [
        "Passing both raises `At most one of fp16 and bf16 can be True`.",
        "Raise `lr` for LoRA, e.g. `2e-4`.",
        "| `a_key` | silently ignored from a YAML |",
        "Raised by `trl/trainer/grpo_config.py:1072` at config time.",
    ]
    assert [u.line for u in claim_units(doc)] == [9, 9, 13, 18]
    assert split_sentences("See `a.b`. Then `c` raises.") == ["See `a.b`.", "Then `c` raises."]
    assert not [u for u in units(sample("Use `raises` in code only.\n")) if u.is_claim]


def test_registry_checker_fails_unproven_stale_and_broken_proofs():
    doc = sample(SAMPLE)
    good = (
        Claim(doc.path, "Passing both raises `At most one of fp16", (Run("known_test"),)),
        Claim(doc.path, "Raise `lr` for LoRA", (NotAClaim("'raise' means increase here"),)),
        Claim(
            doc.path,
            "| `a_key` | silently ignored",
            (Restates(doc.path, "Passing both raises `At most one of fp16"),),
        ),
        Claim(
            doc.path,
            "Raised by `trl/trainer/grpo_config.py:1072`",
            (Cite("trl/trainer/grpo_config.py:1072", "does not support sequence-dim parallelism"),),
        ),
    )
    assert registry_problems([doc], good, {"known_test"}) == []

    problems = "\n".join(registry_problems([doc], good[:2] + good[3:], {"known_test"}))
    assert "references/sample.md:13: unproven claim" in problems  # the table row lost its entry

    broken = (
        Claim(doc.path, "Passing both raises `At most one of fp16", (Run("missing_test"),)),
        Claim(doc.path, "Raise `lr` for LoRA", ()),
        Claim(
            doc.path,
            "| `a_key` | silently ignored",
            (Restates(doc.path, "nowhere registered at all"),),
        ),
        Claim(
            doc.path,
            "Raised by `trl/trainer/grpo_config.py:1072`",
            (
                Cite("trl/trainer/grpo_config.py:1072", "a sentence the source never had"),
                Cite("trl/trainer/grpo_trainer.py:339", "You set `quantization_config` both"),
            ),
        ),
        Claim(doc.path, "a fragment that is not in the doc", (Run("known_test"),)),
        Claim(doc.path, "raises", (Run("known_test"),)),
    )
    problems = "\n".join(registry_problems([doc], broken, {"known_test"}))
    for needle in (
        "Run('missing_test') names no test",
        "'Raise `lr` for LoRA' has no proof",
        "is not a registered, proven claim",
        "no longer says 'a sentence the source never had'",
        "Cite('trl/trainer/grpo_trainer.py:339') is not named in the doc's section",
        "'a fragment that is not in the doc' is no longer in the doc",
        "'raises' is shorter than",
    ):
        assert needle in problems, (needle, problems)


def test_cite_checker_reads_joined_string_literals_near_the_line():
    # The message is split over two string literals three lines below the `raise`.
    ok = Cite(
        "trl/trainer/grpo_config.py:1071", "GRPOTrainer does not support sequence-dim parallelism"
    )
    assert check_cite(ok) is None
    assert check_cite(Cite("trl/trainer/grpo_config.py:100", "does not support sequence-dim"))
    assert check_cite(Cite("trl/no_such_file.py:1", "x"))


# ---------------------------------------------------------------------------------------------
# The real docs
# ---------------------------------------------------------------------------------------------


def test_every_behavioural_claim_in_the_docs_is_registered_and_proven():
    docs = [load_doc(p) for p in doc_paths()]
    problems = registry_problems(docs, semantic_registry.CLAIMS, RUN_TESTS)
    assert not problems, "\n".join(problems)


def proof_kind(proofs) -> str:
    names = {type(p).__name__ for p in proofs}
    for kind, name in (("executed", "Run"), ("cited", "Cite"), ("restated", "Restates")):
        if name in names:
            return kind
    return "not a claim"


def test_proof_counts():
    """How the detected claim sentences are proven (printed with -s); each kind stays in use."""
    kinds = Counter()
    for doc in (load_doc(p) for p in doc_paths()):
        for unit in claim_units(doc):
            proofs = [
                proof
                for claim in semantic_registry.CLAIMS
                if claim.doc == doc.path and normalize(claim.fragment) in unit.text
                for proof in claim.proofs
            ]
            kinds[proof_kind(proofs)] += 1
    print(f"\nclaim sentences by proof: {dict(kinds)}, total {sum(kinds.values())}")
    assert kinds["executed"] and kinds["cited"]


@pytest.mark.parametrize("name", sorted(t for t in RUN_TESTS if t.startswith("test_")))
def test_every_executed_proof_backs_a_registered_claim(name):
    used = {p.test for c in semantic_registry.CLAIMS for p in c.proofs if isinstance(p, Run)}
    assert name in used, f"{name} proves nothing the registry names; register its claim"
