"""Version strings: a small PEP 440 subset, enough to order releases, pre/post/dev and local tags.

Stdlib only, so that every script can compare versions on a bare interpreter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_VERSION_RE = re.compile(
    r"^\s*v?(?:(\d+)!)?(\d+(?:\.\d+)*)"
    r"(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
    r"(?:-(\d+)|[-_.]?(?:post|rev|r)[-_.]?(\d*))?"
    r"(?:[-_.]?dev[-_.]?(\d*))?"
    r"(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$",
    re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_CLAUSE_RE = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)\s*([^\s]+)\s*$")


def normalize_name(name: str) -> str:
    """PEP 503 name: 'Flash_Attn' -> 'flash-attn'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def version_key(text: object) -> tuple | None:
    """Sort key of a version string, local tag ignored; None if it does not parse."""
    m = _VERSION_RE.match(str(text or ""))
    if not m:
        return None
    epoch, release, pre_l, pre_n, post_a, post_b, dev = m.groups()[:7]
    parts = [int(p) for p in release.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    post = post_a if post_a is not None else post_b
    if pre_l is None and post is None and dev is not None:
        pre_key: tuple = (-1,)  # 1.0.dev0 sorts before 1.0a1
    elif pre_l is None:
        pre_key = (2,)
    else:
        pre_key = (1, _PRE_RANK[pre_l.lower()], int(pre_n or 0))
    post_key = (-1,) if post is None else (1, int(post or 0))
    dev_key = (2,) if dev is None else (1, int(dev or 0))
    return (int(epoch or 0), tuple(parts), pre_key, post_key, dev_key)


def release_tuple(text: object) -> tuple:
    """(1, 16) from '1.16.0rc1+cu128'; () if it does not parse."""
    key = version_key(text)
    return key[1] if key else ()


def release_line(version: object) -> str | None:
    """'1.16' from '1.16.0': the major.minor line that rule tables are keyed on."""
    parts = release_tuple(version)
    return f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}" if parts else None


def comparable_version(text: object, mode: str = "public") -> str:
    """The form of a version a rule compares: "public" drops the local tag, "base" keeps only
    the release numbers, "full" keeps the local tag's PEP 440 order."""
    public, _, local = str(text).partition("+")
    if mode == "base":
        release = release_tuple(public)
        return ".".join(map(str, release)) if release else public
    if mode == "full" and local:
        # PEP 440 sorts 0.31.0+cu129 just above 0.31.0 (below any .post), like this:
        return public + ".post0.dev0"
    return public


def _matches_one(version: str, clause: str) -> bool | None:
    m = _CLAUSE_RE.match(clause)
    if not m:
        return None
    op, target = m.groups()
    if op in ("==", "!=") and target.endswith(".*"):
        prefix = tuple(int(p) for p in target[:-2].split(".") if p.isdigit())
        full = version_key(version)
        if full is None:
            return None
        padded = full[1] + (0,) * len(prefix)
        equal = padded[: len(prefix)] == prefix
        return equal if op == "==" else not equal
    mine, theirs = version_key(version), version_key(target)
    if mine is None or theirs is None:
        return None
    if op == "~=":
        head = theirs[1][:-1] if len(theirs[1]) > 1 else theirs[1]
        return mine >= theirs and mine[1][: len(head)] == head
    return {
        "==": mine == theirs,
        "===": str(version) == target,
        "!=": mine != theirs,
        "<=": mine <= theirs,
        ">=": mine >= theirs,
        "<": mine < theirs,
        ">": mine > theirs,
    }[op]


def version_satisfies(version: object, specifier: str) -> bool | None:
    """True/False for a comma-joined specifier like '>=0.22.0,<=0.31.0'; None if unparseable.
    A local tag (+cu128) is ignored; pass `comparable_version(v, "full")` to order it."""
    results = [_matches_one(str(version), c) for c in specifier.split(",") if c.strip()]
    if any(r is None for r in results):
        return None
    return all(results)


def tightest(specs: Iterable[str]) -> str:
    """'>=0.18.6' from ['>=0.18.2', '>=0.18.6']; other combinations are joined with commas."""
    unique = list(dict.fromkeys(specs))
    if all(re.fullmatch(r">=[^,]+", s) for s in unique):
        return max(unique, key=lambda s: version_key(s[2:]) or ())
    return ",".join(unique)
