"""Reading the user's files: text, JSON, and YAML (pyyaml when installed, else a small built-in
reader that covers accelerate and TRL config files). Nothing here judges what it reads."""

from __future__ import annotations

import json
import math
import os

MAX_CONFIG_BYTES = 4_000_000  # a config file larger than this is not a config file
# YAML aliases let a small file stand for a huge or circular value ("billion laughs"); a config
# holds a few hundred values at most.
MAX_CONFIG_NODES, MAX_CONFIG_DEPTH = 100_000, 64


class ConfigFileError(Exception):
    """A config file that cannot be read or parsed; the message is one line for the user."""


def read_text(path: str, limit: int | None = None) -> str | None:
    """The file's text (undecodable bytes replaced), or None if it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read() if limit is None else fh.read(limit)
    except (OSError, ValueError):
        return None


def load_config_file(path: str) -> tuple:
    """(value, parser name) of a YAML or JSON file; raises ConfigFileError with one line."""
    if os.path.isdir(path):
        raise ConfigFileError(f"{path} is a directory, not a config file")
    text = read_text(path, MAX_CONFIG_BYTES + 1)
    if text is None:
        raise ConfigFileError(f"cannot read {path}")
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"{path} is larger than {MAX_CONFIG_BYTES:,} bytes")
    if "\x00" in text or "\ufffd" in text:
        raise ConfigFileError(f"{path} is not a text file (binary or not UTF-8)")
    try:
        if path.endswith(".json"):
            value, parser = json.loads(text), "json"
        else:
            try:
                import yaml  # optional; full YAML when present
            except ImportError:
                value, parser = parse_flat_yaml(text), "builtin-yaml"
            else:
                value, parser = yaml.safe_load(text), "pyyaml"
    except Exception as exc:  # every parser error is a fact about the file
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise ConfigFileError(f"cannot parse {path}: {detail}") from None
    try:
        return plain(value, [MAX_CONFIG_NODES]), parser
    except ValueError as exc:
        raise ConfigFileError(f"{path} {exc}") from None


def plain(value: object, budget: list, depth: int = 0) -> object:
    """`value` as JSON-ready data: string keys where YAML had dates or other objects, lists for
    sets and tuples, text for non-finite floats and other scalars. Raises ValueError when it
    nests deeper than MAX_CONFIG_DEPTH or holds more than budget[0] values (aliases count each
    time they are used, so a circular or exploding value stops here)."""
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_CONFIG_DEPTH:
        raise ValueError(
            f"holds more than {MAX_CONFIG_NODES:,} values or nests deeper than "
            f"{MAX_CONFIG_DEPTH} levels (circular or exploding YAML aliases?)"
        )
    if isinstance(value, dict):
        return {_key(k): plain(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, budget, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _key(key: object) -> object:
    plain_key = key is None or isinstance(key, (str, int, bool))
    return key if plain_key or (isinstance(key, float) and math.isfinite(key)) else str(key)


def parse_flat_yaml(text: str) -> dict:
    """Minimal YAML for accelerate and TRL configs: nested mappings by indentation, scalars,
    '- x' lists and [a, b] flow lists; None for a file without content, as YAML has it. Raises
    ValueError on a line it does not understand, and on anchors, aliases and tags."""
    root: dict = {}
    stack: list = [(-1, root, None, None)]  # (indent, container, its owner dict, its key)
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        item = body == "-" or body.startswith("- ")
        # A list may sit at its key's own indentation ("key:\n- a"): keep its container open.
        while len(stack) > 1 and (indent < stack[-1][0] or (indent == stack[-1][0] and not item)):
            stack.pop()
        _, container, owner, key = stack[-1]
        if item:
            if container == {} and owner is not None:
                container = owner[key] = []
                stack[-1] = (stack[-1][0], container, owner, key)
            if not isinstance(container, list):
                raise ValueError(f"list item outside a list: {raw.strip()!r}")
            container.append(_yaml_scalar(body[1:]))
            continue
        if not isinstance(container, dict):
            raise ValueError(f"mapping key inside a list: {raw.strip()!r}")
        name, sep, value = body.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"cannot parse line: {raw.strip()!r}")
        name = name.strip().strip("'\"")
        if value.strip():
            container[name] = _yaml_scalar(value)
        else:
            container[name] = {}
            stack.append((indent, container[name], container, name))
    return root or None


def _yaml_scalar(value: str) -> object:
    value = value.strip()
    if value[:1] in ("&", "*", "!"):
        raise ValueError(f"YAML anchors, aliases and tags need pyyaml: {value[:40]!r}")
    if value[:1] in ("'", '"') and value[-1:] == value[:1] and len(value) > 1:
        return value[1:-1]
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~"):
        return None
    if value.startswith("[") and value.endswith("]"):
        return [_yaml_scalar(v) for v in value[1:-1].split(",") if v.strip()]
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value
