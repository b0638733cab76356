"""Match a failed run's log against the troubleshooting entries and rank the causes.

A log is cleaned (ANSI colours, carriage-return progress bars, rank and timestamp prefixes),
each entry's signature lines are searched in it, and the entries that match are ranked: the
specific signatures first, the line that ended the run above everything else, and entries whose
releases include the installed versions above those that exclude them. Pure functions of the
text, the entries and the versions; nothing in the log is ever run."""

from __future__ import annotations

import math
import re
from collections import deque
from typing import NamedTuple

from .troubleshooting import PLACEHOLDER, Entry, signature_pattern
from .versions import version_satisfies

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_PREFIXES = re.compile(
    r"^(?:[ \t]*(?:\[(?:rank|default)?\d+\]:?|\[\d+,\d+\]<std(?:out|err)>:|rank\d+:|\(\w+ pid=\d+\)"
    r"|\d{4}-\d\d-\d\d[ T][\d:.,]+|\[\d{4}-\d\d-\d\d [\d:.,]+\]|(?:INFO|WARNING|ERROR|DEBUG)"
    r"(?: \d\d-\d\d [\d:.]+)?(?: \[[^\]]*\])?:?)[ \t]*)+",
    re.MULTILINE,
)
_OVERWRITTEN = re.compile(r"^[^\n]*\r(?!\n)", re.MULTILINE)  # progress-bar text redrawn by \r
# A tqdm bar (`desc:  45%|████▌     | 45/100 [10:00<12:00, 1.2s/it]`) that another process's
# output continues on the same line: the text after it starts the line.
_BAR_PREFIX = re.compile(
    r"^[ \t]*(?:[^|\n]{0,80}?:[ \t]*)?\d{1,3}%\|[^|\n]*\|[^\[\n]*\[[^\]\n]*\](?=[ \t]*\S)",
    re.MULTILINE,
)
# Launcher lines that only report that a child failed; the child's own error came before them.
_WRAPPER = re.compile(
    r"ChildFailedError|CalledProcessError|returned non-zero exit status|^\S+ FAILED$"
    r"|failed \(exitcode: -?\d+\) local_rank|^Root Cause|See root cause above",
)
# Words of a line that reads like a failure; searched in the lowercased log (fast literal scans).
_ENDING = re.compile(
    r"error|exception|killed|sigkill|exitcode|exit code|exit status|aborted|core dumped"
    r"|failed|timeout|timed out|oom|out of memory"
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{4,}")
_WHOLE_WORD = re.compile(r"(?<![\w\0])[A-Za-z_][A-Za-z0-9_]{4,}(?![\w\0])")
MAX_LINE = 4000  # longer lines are cut: a signature is a fragment, not a page
TAIL_WINDOW = 60  # lines before the last error line that still count as "where it ended"
CONTINUATION = 3  # lines after it that may still be its message (`... (look up to see ...):`)
TAIL_CHARS = 256 * 1024  # searched first for a signature: the end of a log, where runs fail


class Log(NamedTuple):
    lines: list  # cleaned lines
    final_error: int | None  # index of the line that ended the run, if one looks like it
    truncated: bool = False


class Match(NamedTuple):
    entry: Entry
    score: float
    line_index: int  # 0-based index in Log.lines of the most telling matched line
    signature: str
    release_match: bool | None  # True: versions inside the entry's releases; False: outside


def clean_log(text: str, truncated: bool = False) -> Log:
    """Whole-text substitutions (one pass each, fast on a 10 MB log), then lines."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        text = _OVERWRITTEN.sub("", text.replace("\r\n", "\n"))
    if "%|" in text:
        text = _BAR_PREFIX.sub("", text)
    text = _PREFIXES.sub("", text)
    lines = [line[:MAX_LINE].rstrip() for line in text.split("\n")]
    return Log(lines, _final_error(lines, "\n".join(lines).lower()), truncated)


def _final_error(lines: list, lowered: str) -> int | None:
    """Index of the last line that reads like the failure itself (a traceback's last line, a
    kill), not indented like a traceback frame, and not the launcher's report that a child
    failed. The tail first, then the whole log, each in one regex pass."""
    tail = max(0, len(lowered) - TAIL_CHARS)
    for start in (tail, 0) if tail else (0,):
        found, index, counted = None, lowered.count("\n", 0, start), start
        for match in _ENDING.finditer(lowered, start):
            index += lowered.count("\n", counted, match.start())
            counted = match.start()
            line = lines[index]
            if line[:1] not in ("", " ", "\t") and not _WRAPPER.search(line):
                found = index
        if found is not None:
            return found
    return None


def diagnose(log: Log, entries: list, versions: dict, limit: int = 3) -> list:
    """The best `limit` matches, best first."""
    text = "\n".join(log.lines).lower()
    words = set(_WORD.findall(text))
    shared = _shared_signatures(entries)
    matches = []
    for entry in entries:
        match = _match_entry(entry, log, text, words, shared, versions)
        if match:
            matches.append(match)
    matches.sort(key=lambda m: (-m.score, m.entry.line))
    return matches[:limit]


def _shared_signatures(entries: list) -> dict:
    """How many entries carry each signature (after placeholders): shared lines say less."""
    counts: dict = {}
    for entry in entries:
        for sig in set(entry.signatures):
            key = PLACEHOLDER.sub("{}", sig).lower()
            counts[key] = counts.get(key, 0) + 1
    return counts


def _anchors(signature: str) -> set:
    """Whole words of the signature that any matching log line must contain. A word glued to a
    placeholder (`FlashAttention{n}`, `{path}libbitsandbytes`) is only part of a log word
    (`FlashAttention2`), so it cannot be required."""
    glued = PLACEHOLDER.sub("\0", signature)
    return {w.lower() for w in _WHOLE_WORD.findall(glued)}


def _match_entry(
    entry: Entry, log: Log, text: str, words: set, shared: dict, versions: dict
) -> Match | None:
    best = None
    score = 0.0
    for signature in entry.signatures:
        if not _anchors(signature) <= words:
            continue  # a word of it is nowhere in the log: no need to search
        index = _find(signature, text)
        if index is None:
            continue
        weight = _specificity(signature) / shared.get(PLACEHOLDER.sub("{}", signature).lower(), 1)
        weight *= _position_factor(index, log)
        score += weight
        if best is None or weight > best[0]:
            best = (weight, index, signature)
    if best is None:
        return None
    release_match = release_verdict(entry, versions)
    factor = {True: 1.25, None: 1.0, False: 0.6}[release_match]
    return Match(entry, round(score * factor, 3), best[1], best[2], release_match)


def _find(signature: str, text: str) -> int | None:
    """Index of the line where the last occurrence of the signature starts in the lowercased
    log text (the latest says most). The pattern's white space also matches a line break, so a
    message the log wrapped over lines (pip/uv output, hard-wrapped pastes) is found too. The
    tail is searched first: runs fail at the end, so a 10 MB log is rarely read whole."""
    pattern = signature_pattern(signature.lower(), flags=0)
    tail = max(0, len(text) - TAIL_CHARS)
    for start in (tail, 0) if tail else (0,):
        last = deque(pattern.finditer(text, start), maxlen=1)
        if last:
            return text.count("\n", 0, last[0].start())
    return None


def _specificity(signature: str) -> float:
    """Grows with the literal characters of a signature (placeholders excluded), slowly: a long
    signature is more telling than a short one, but where it sits in the log tells more."""
    literal = len(PLACEHOLDER.sub("", signature).strip())
    return 1 + math.log2(1 + literal / 20)


def _position_factor(index: int, log: Log) -> float:
    if log.final_error is None:
        return 1.0
    if index == log.final_error:
        return 4.0  # the line that ended the run
    if log.final_error - TAIL_WINDOW <= index <= log.final_error + CONTINUATION:
        return 1.8  # in the traceback or output just before it, or the rest of its message
    return 1.0


def release_verdict(entry: Entry, versions: dict) -> bool | None:
    """True when every known version lies inside the entry's releases, False when one lies
    outside, None when the entry holds for any release or no version is known."""
    verdicts = []
    for dist, spec in entry.releases:
        have = versions.get(dist)
        if have and spec:
            verdicts.append(version_satisfies(have, spec))
    known = [v for v in verdicts if v is not None]
    if not known:
        return None
    return all(known)


def closest(log: Log, entries: list, limit: int = 3) -> list:
    """Entries whose words overlap most with the log's last error line (or its tail): what to
    read when no signature matched."""
    final = log.final_error
    focus = log.lines[final] if final is not None else " ".join(log.lines[-20:])
    wanted = {w.lower() for w in _WORD.findall(focus)}
    if not wanted:
        return []
    scored = []
    for entry in entries:
        text = " ".join((entry.title, *entry.signatures, entry.cause))
        have = {w.lower() for w in _WORD.findall(text)}
        overlap = len(wanted & have) / len(wanted | have) if have else 0.0
        if overlap:
            scored.append((overlap, entry))
    scored.sort(key=lambda pair: (-pair[0], pair[1].line))
    return [entry for _, entry in scored[:limit]]
