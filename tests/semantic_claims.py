"""Behavioural claims in the docs ("X raises Y", "X is ignored", "X warns") and their proofs.

A *claim unit* is one sentence of prose, one list-item sentence or one table row of SKILL.md or a
reference, outside code blocks. A unit is a claim when its text outside inline code matches
CLAIM_RE. Every claim must be registered in tests/semantic_registry.py with a fragment of its
text and at least one proof:

- Run(test): a test in tests/test_semantics_run.py that runs the installed library on CPU
  (a tiny model built from a config, no downloads) and shows the behaviour;
- Cite(ref, needle): `ref` is a `path:line` in site-packages that the doc names in the same
  section, and `needle` must still be written within a few lines of it in the installed file
  (for what cannot run here: GPUs, NCCL, vLLM, DeepSpeed);
- NotAClaim(reason): the keyword is not a behavioural claim about the stack ("raise
  `gradient_accumulation_steps`" means increase it), or it is about software outside the stack
  that this suite cannot check (vLLM's own server, Unsloth), which the reason must say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from docs_oracle import SITE_PACKAGES, Doc

CLAIM_RE = re.compile(
    r"\b(?:rais(?:e|es|ed|ing)|ignor(?:e|es|ed|ing)|silent(?:ly)?|forc(?:e|es|ed|ing)"
    r"|at trainer init|at config time|warn(?:s|ed|ing|ings)?|reject(?:s|ed)?|refus(?:e|es|ed))\b",
    re.IGNORECASE,
)
_CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1")
_SENTENCE_END_RE = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!\bvs)[.!?](?=\s+(?:[A-Z`(\[]|\*\*))")
_TABLE_RULE_RE = re.compile(r"^\|[\s:|-]+\|?$")
_LIST_ITEM_RE = re.compile(r"^(?:[-*] |\d+\. )")
_SOURCE_REF_RE = re.compile(r"`(?P<path>(?:[\w.-]+/)*(?P<base>[\w.-]+\.py))?:(?P<line>\d+)")
MIN_FRAGMENT = 15
CITE_BEFORE, CITE_AFTER = 3, 12


@dataclass(frozen=True)
class Run:
    test: str


@dataclass(frozen=True)
class Cite:
    ref: str
    needle: str


@dataclass(frozen=True)
class NotAClaim:
    reason: str


@dataclass(frozen=True)
class Restates:
    """The sentence repeats a claim registered (and proven) elsewhere, e.g. a summary table."""

    doc: str
    fragment: str


@dataclass(frozen=True)
class Claim:
    doc: str
    fragment: str
    proofs: tuple


@dataclass(frozen=True)
class Unit:
    doc: str
    line: int
    text: str
    section: tuple[int, int]  # first and last line of the heading section it sits in

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def is_claim(self) -> bool:
        return bool(CLAIM_RE.search(_CODE_SPAN_RE.sub(" ", self.text)))


def normalize(text: str) -> str:
    return " ".join(text.split())


def _sections(doc: Doc) -> list[tuple[int, int]]:
    starts = [ln for ln, text in doc.prose if text.startswith("#")] or [1]
    if starts[0] != 1:
        starts.insert(0, 1)
    ends = [s - 1 for s in starts[1:]] + [len(doc.lines)]
    return list(zip(starts, ends))


def _paragraphs(doc: Doc) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    para: list[tuple[int, str]] = []

    def flush():
        if para:
            out.append((para[0][0], normalize(" ".join(t for _, t in para))))
            para.clear()

    last, in_contents = 0, False
    prose = doc.prose
    for i, (ln, text) in enumerate(prose):
        stripped = text.strip()
        if ln != last + 1 or not stripped or stripped.startswith("#"):
            flush()  # a code block, a blank line or a heading ends the paragraph
        last = ln
        if stripped.startswith("#"):
            in_contents = stripped.lstrip("#").strip() == "Contents"
        if not stripped or stripped.startswith("#") or in_contents:
            continue
        if stripped.startswith("|"):
            flush()
            following = prose[i + 1][1].strip() if i + 1 < len(prose) else ""
            is_header = bool(_TABLE_RULE_RE.match(following))
            if not _TABLE_RULE_RE.match(stripped) and not is_header:
                out.append((ln, normalize(stripped)))
            continue
        if _LIST_ITEM_RE.match(stripped):
            flush()
        para.append((ln, stripped))
    flush()
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of one paragraph; code spans are masked so periods inside them do not split."""
    if text.startswith("|"):
        return [text]
    masked = _CODE_SPAN_RE.sub(lambda m: m.group(1) + "x" * len(m.group(2)) + m.group(1), text)
    out, start = [], 0
    for m in _SENTENCE_END_RE.finditer(masked):
        out.append(text[start : m.end()].strip())
        start = m.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


def units(doc: Doc) -> list[Unit]:
    sections = _sections(doc)
    out = []
    for line, para in _paragraphs(doc):
        section = next(s for s in sections if s[0] <= line <= s[1])
        out += [Unit(doc.path, line, s, section) for s in split_sentences(para)]
    return out


def claim_units(doc: Doc) -> list[Unit]:
    return [u for u in units(doc) if u.is_claim]


def section_refs(doc: Doc, section: tuple[int, int]) -> set[tuple[str, int]]:
    """(file name, line) of every backticked source ref in the section; `:1115` after
    `trl/trainer/grpo_config.py:1105` in the same section inherits its file name."""
    refs = set()
    base = None
    for ln, text in doc.prose:
        if not section[0] <= ln <= section[1]:
            continue
        for m in _SOURCE_REF_RE.finditer(text):
            base = m.group("base") or base
            if base:
                refs.add((base, int(m.group("line"))))
    return refs


def _joined_source(lines: list[str]) -> str:
    """Source lines as one string with adjacent string literals joined, whitespace collapsed."""
    text = "\n".join(lines)
    text = re.sub(r"""(["'])\s*\n\s*[rbf]*(["'])""", "", text)
    return normalize(text)


def check_cite(cite: Cite, site_packages: Path = SITE_PACKAGES) -> str | None:
    """None when `cite.needle` is still written near `cite.ref` in the installed package."""
    path, _, line = cite.ref.rpartition(":")
    f = site_packages / path
    if not f.is_file() or not line.isdigit():
        return f"{cite.ref}: no such file in the installed packages"
    lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
    n = int(line)
    window = lines[max(0, n - 1 - CITE_BEFORE) : n + CITE_AFTER]
    if normalize(cite.needle) not in _joined_source(window):
        return (
            f"{cite.ref}: the installed source no longer says {cite.needle!r} within "
            f"{CITE_BEFORE} lines before or {CITE_AFTER} after line {n}"
        )
    return None


def registry_problems(docs: list[Doc], claims, run_tests: set[str]) -> list[str]:
    """Unregistered claim units, stale or ambiguous fragments, missing proofs, proofs whose
    test does not exist, cites the doc section does not name or the source no longer holds."""
    problems = []
    by_doc = {d.path: d for d in docs}
    proven = {
        (c.doc, normalize(c.fragment))
        for c in claims
        if any(isinstance(p, (Run, Cite)) for p in c.proofs)
    }
    # SKILL.md routes to the references for detail: it may rest on a line they cite.
    reference_refs = set().union(
        *(section_refs(d, (1, len(d.lines))) for d in docs if d.path.startswith("references/"))
    )
    covered: set[tuple[str, int, str]] = set()
    for claim in claims:
        doc = by_doc.get(claim.doc)
        if doc is None:
            problems.append(f"registry names {claim.doc}, which is not a doc")
            continue
        frag = normalize(claim.fragment)
        hits = [u for u in units(doc) if frag in u.text]
        label = f"{claim.doc}: registered fragment {claim.fragment!r}"
        if len(frag) < MIN_FRAGMENT:
            problems.append(f"{label} is shorter than {MIN_FRAGMENT} characters")
        if not hits:
            problems.append(f"{label} is no longer in the doc (re-prove the new text)")
            continue
        if len(hits) > 1:
            problems.append(f"{label} matches {len(hits)} sentences; make it unique")
        if not claim.proofs:
            problems.append(f"{label} has no proof")
        for unit in hits:
            covered.add((unit.doc, unit.line, unit.text))
            refs = section_refs(doc, unit.section)
            if doc.path == "SKILL.md":
                refs |= reference_refs
            problems += _proof_problems(claim, unit, refs, run_tests, proven)
    for doc in docs:
        for unit in claim_units(doc):
            if (unit.doc, unit.line, unit.text) not in covered:
                problems.append(
                    f"{unit.where}: unproven claim: {unit.text!r}. Register a fragment of it in "
                    "tests/semantic_registry.py with Run(test), Cite(ref, needle) or NotAClaim."
                )
    return problems


def _proof_problems(claim: Claim, unit: Unit, refs, run_tests: set[str], proven) -> list[str]:
    problems = []
    for proof in claim.proofs:
        if isinstance(proof, Run) and proof.test not in run_tests:
            problems.append(f"{unit.where}: Run({proof.test!r}) names no test")
        elif isinstance(proof, Restates):
            if (proof.doc, normalize(proof.fragment)) not in proven:
                problems.append(
                    f"{unit.where}: Restates({proof.fragment!r}) is not a registered, proven claim"
                )
        elif isinstance(proof, Cite):
            path, _, line = proof.ref.rpartition(":")
            if (Path(path).name, int(line or 0)) not in refs:
                problems.append(
                    f"{unit.where}: Cite({proof.ref!r}) is not named in the doc's section; the "
                    "sentence's section must cite the line it rests on"
                )
            if bad := check_cite(proof):
                problems.append(f"{unit.where}: {bad}")
        elif isinstance(proof, NotAClaim) and len(proof.reason) < 15:
            problems.append(f"{unit.where}: NotAClaim needs a reason")
        elif not isinstance(proof, (Run, Cite, NotAClaim, Restates)):
            problems.append(f"{unit.where}: unknown proof {proof!r}")
    return problems
