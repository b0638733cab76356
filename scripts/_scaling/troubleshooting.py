"""The troubleshooting reference (references/troubleshooting.md) read as data: the entries, each
with its signature lines, releases, cause, confirm, fix, upgrade and sources. The reference is the
only copy of this knowledge; diagnosis.py matches logs against what is parsed here.

The shape of an entry, strictly (a deviation is a ReferenceError naming the line):

    ### <title>
    ```text
    <signature line(s): verbatim log fragments; {name} marks a value that varies>
    ```
    - **Releases**: `trl>=0.19,<0.22`, `vllm>=0.10` (or `any`), optional prose after " — "
    - **Cause**: ...
    - **Confirm**: ...
    - **Fix**: ...
    - **Upgrade**: ...
    - **Source**: `owner/repo#123`, `trl/generation/vllm_client.py:289`

Free paragraphs, code blocks and tables may follow the list."""

from __future__ import annotations

import re
from typing import NamedTuple

FIELDS = ("Releases", "Cause", "Confirm", "Fix", "Upgrade", "Source")
_FIELD_RE = re.compile(r"^- \*\*(\w+)\*\*: (.+)$")
_REQUIREMENT_RE = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*((?:[<>=!~]=?|===)[^\s,]+(?:,\s*(?:[<>=!~]=?)[^\s,]+)*)?$"
)
_THREAD_RE = re.compile(r"^[\w.-]+/[\w.-]+#\d+$")
_SOURCE_LINE_RE = re.compile(r"^[\w./-]+\.py:\d+$")
PLACEHOLDER = re.compile(r"\{[^{}]*\}")


class ReferenceError(ValueError):  # noqa: A001 (the reference is malformed, not the user)
    """The reference does not have the shape diagnosis.py relies on."""


class Entry(NamedTuple):
    id: str  # the heading's anchor, as GitHub makes it
    title: str
    section: str
    signatures: tuple  # verbatim lines; {name} stands for a varying value
    releases: tuple  # ((dist, specifier), ...); () means any release
    releases_text: str
    cause: str
    confirm: str
    fix: str
    upgrade: str
    sources: tuple
    line: int  # 1-based line of the heading

    @property
    def threads(self) -> tuple:
        return tuple(s for s in self.sources if _THREAD_RE.match(s))


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def parse_reference(text: str) -> list:
    """Every entry of the reference, in order; raises ReferenceError on a malformed one."""
    lines = text.splitlines()
    entries, section, fenced = [], "", False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("### "):
            entries.append(_parse_entry(lines, number, section))
    first_line: dict = {}
    for entry in entries:
        if entry.id in first_line:
            raise ReferenceError(
                f"line {entry.line}: the anchor {entry.id!r} is taken by line {first_line[entry.id]}"
            )
        first_line[entry.id] = entry.line
    return entries


def _parse_entry(lines: list, number: int, section: str) -> Entry:
    title = lines[number - 1][4:].strip()
    where = f"line {number} ({title!r})"
    i = _skip_blank(lines, number)
    if i >= len(lines) or lines[i].strip() != "```text":
        raise ReferenceError(f"{where}: the title must be followed by a ```text signature block")
    signatures = []
    i += 1
    while i < len(lines) and lines[i].strip() != "```":
        if lines[i].strip():
            signatures.append(lines[i].strip())
        i += 1
    if i >= len(lines) or not signatures:
        raise ReferenceError(f"{where}: empty or unclosed signature block")
    fields = _parse_fields(lines, _skip_blank(lines, i + 1), where)
    releases_text, releases = parse_releases(fields["Releases"], where)
    return Entry(
        id=slug(title),
        title=title,
        section=section,
        signatures=tuple(signatures),
        releases=releases,
        releases_text=releases_text,
        cause=fields["Cause"],
        confirm=fields["Confirm"],
        fix=fields["Fix"],
        upgrade=fields["Upgrade"],
        sources=parse_sources(fields["Source"], where),
        line=number,
    )


def _skip_blank(lines: list, index: int) -> int:
    while index < len(lines) and not lines[index].strip():
        index += 1
    return index


def _parse_fields(lines: list, index: int, where: str) -> dict:
    fields = {}
    for name in FIELDS:
        m = _FIELD_RE.match(lines[index]) if index < len(lines) else None
        if not m or m.group(1) != name:
            found = lines[index].strip()[:60] if index < len(lines) else "the end of the file"
            raise ReferenceError(f"{where}: expected '- **{name}**: ...', found {found!r}")
        text = m.group(2).strip()
        index += 1
        while index < len(lines) and lines[index].startswith("  ") and lines[index].strip():
            text += " " + lines[index].strip()  # a wrapped list item
            index += 1
        fields[name] = text
    return fields


def parse_releases(text: str, where: str = "Releases") -> tuple:
    """('`trl<0.20`, `vllm>=0.10`', (('trl', '<0.20'), ('vllm', '>=0.10'))); `any` is ()."""
    head = text.split(" — ", 1)[0].strip()
    if head.lower().startswith("any"):
        return text, ()
    specs = re.findall(r"`([^`]+)`", head)
    if not specs or re.sub(r"`[^`]+`|[,\s]|and", "", head):
        raise ReferenceError(f"{where}: Releases must be backticked requirements or 'any'")
    parsed = []
    for spec in specs:
        m = _REQUIREMENT_RE.match(spec.strip())
        if not m:
            raise ReferenceError(f"{where}: {spec!r} is not a requirement like `trl>=0.19,<0.22`")
        parsed.append((m.group(1).lower(), (m.group(2) or "").replace(" ", "")))
    return text, tuple(parsed)


def parse_sources(text: str, where: str = "Source") -> tuple:
    sources = tuple(s.strip() for s in re.findall(r"`([^`]+)`", text))
    bad = [s for s in sources if not (_THREAD_RE.match(s) or _SOURCE_LINE_RE.match(s))]
    if not sources or bad:
        raise ReferenceError(
            f"{where}: Source must list `owner/repo#N` threads or `path.py:line` source lines"
            + (f", not {bad[0]!r}" if bad else "")
        )
    return sources


def signature_pattern(signature: str, flags: int = re.IGNORECASE) -> re.Pattern:
    """A signature as a regex: literal text, {placeholders} as wildcards, any run of white
    space as white space, letters in any case (`flags=0` for a lowercased signature searched in
    lowercased text: the same matches, and re's fast literal search)."""
    parts = []
    for index, chunk in enumerate(PLACEHOLDER.split(signature)):
        if index:
            parts.append(r".*?")
        words = [re.escape(w) for w in chunk.split()]
        lead = r"\s+" if chunk[:1].isspace() and index else ""
        tail = r"\s+" if chunk[-1:].isspace() and words else ""
        parts.append(lead + r"\s+".join(words) + tail)
    return re.compile("".join(parts), flags)


def signature_sample(signature: str) -> str:
    """The signature with each {placeholder} filled by a plain value, as a log would show it."""
    return PLACEHOLDER.sub("x7", signature)
