"""Where a planned run's model config comes from: a local folder, or the local Hugging Face cache
(huggingface_hub's layout: <cache>/models--ORG--NAME/refs/REVISION -> snapshots/HASH/config.json).
Never the network: a model that is not on disk here is unknown, and the memory check says so."""

from __future__ import annotations

import json
import os

from .files import read_text

MAX_CONFIG_BYTES = 2_000_000


def hub_cache(environ: dict) -> str:
    """huggingface_hub's cache folder: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/..."""
    if environ.get("HF_HUB_CACHE"):
        return environ["HF_HUB_CACHE"]
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME")
        or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    return os.path.join(home, "hub")


def find_model_config(model: str | None, revision: str | None, environ: dict) -> tuple:
    """(config.json path or None, where it was looked for)."""
    if not model:
        return None, "no model named on the command line"
    if os.path.isdir(model):
        path = os.path.join(model, "config.json")
        return (path if os.path.isfile(path) else None), f"{model}/config.json"
    if model.count("/") > 1 or model.startswith((".", "/", "~")):
        return None, f"{model} (not a folder here)"
    folder = os.path.join(hub_cache(environ), "models--" + model.replace("/", "--"))
    snapshot = _snapshot(folder, revision or "main")
    if snapshot is None:
        return None, f"{model} in the local cache {hub_cache(environ)} (not downloaded here)"
    path = os.path.join(snapshot, "config.json")
    return (path if os.path.isfile(path) else None), path


def _snapshot(folder: str, revision: str) -> str | None:
    snapshots = os.path.join(folder, "snapshots")
    if not os.path.isdir(snapshots):
        return None
    ref = (read_text(os.path.join(folder, "refs", revision), 200) or "").strip()
    if ref and os.path.isdir(os.path.join(snapshots, ref)):
        return os.path.join(snapshots, ref)
    if os.path.isdir(os.path.join(snapshots, revision)):  # a commit hash as the revision
        return os.path.join(snapshots, revision)
    with_config = [
        os.path.join(snapshots, name)
        for name in os.listdir(snapshots)
        if os.path.isfile(os.path.join(snapshots, name, "config.json"))
    ]
    return max(with_config, key=os.path.getmtime) if with_config else None


def read_model_config(path: str) -> dict | None:
    text = read_text(path, MAX_CONFIG_BYTES)
    if text is None:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        return None
    return config if isinstance(config, dict) else None
