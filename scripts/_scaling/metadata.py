"""Facts about installed packages, read from their metadata and files only: nothing is imported,
so a package whose import hangs or crashes cannot take this scan down with it."""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

from .files import read_text
from .versions import normalize_name


class Dist(NamedTuple):
    """A distribution the check looks for."""

    name: str  # PEP 503-normalized distribution name
    module: str | None  # top-level import name; None = nothing to import


DISTS = (
    Dist("torch", "torch"), Dist("transformers", "transformers"), Dist("trl", "trl"),
    Dist("accelerate", "accelerate"), Dist("datasets", "datasets"), Dist("peft", "peft"),
    Dist("bitsandbytes", "bitsandbytes"), Dist("deepspeed", "deepspeed"), Dist("vllm", "vllm"),
    Dist("liger-kernel", "liger_kernel"), Dist("liger-kernel-nightly", "liger_kernel"),
    Dist("unsloth", "unsloth"), Dist("unsloth-zoo", "unsloth_zoo"), Dist("kernels", "kernels"),
    Dist("flash-attn", "flash_attn"), Dist("flash-attn-3", "flash_attn_interface"),
    Dist("flash-attn-4", "flash_attn"), Dist("triton", "triton"),
    Dist("pytorch-triton-rocm", "triton"), Dist("pytorch-triton-xpu", "triton"),
    Dist("xformers", "xformers"), Dist("rapidfireai", "rapidfireai"),
    Dist("nvidia-ml-py", "pynvml"),
    Dist("pynvml", None),  # deprecated wrapper dist; the module comes from nvidia-ml-py
    Dist("nvidia-nccl-cu12", None), Dist("nvidia-nccl-cu13", None),
    Dist("huggingface-hub", "huggingface_hub"), Dist("torch-npu", "torch_npu"),
    Dist("intel-extension-for-pytorch", "intel_extension_for_pytorch"), Dist("ninja", None),
    Dist("aiohttp", None), Dist("requests", None), Dist("pyyaml", None),
    Dist("packaging", None),
)  # fmt: skip
DIST_NAMES = tuple(d.name for d in DISTS)


def _parse_metadata(text: str | None) -> tuple:
    """(Name, Version, [Requires-Dist, ...]) from the header block of a METADATA/PKG-INFO file
    (RFC 822 style: it ends at the first empty line; indented lines continue a header). Read by
    hand: the email package costs more to import than the whole scan."""
    headers: dict = {}
    last: list = []
    for line in (text or "").split("\n\n", 1)[0].splitlines():
        if not line:
            break
        if line[0] in " \t" and last:
            last[-1] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        if sep:
            last = headers.setdefault(key.strip().lower(), [])
            last.append(value.strip())
    first = {k: v[0] for k, v in headers.items()}
    return first.get("name"), first.get("version"), headers.get("requires-dist", [])


def _dist_name_from_dir(entry: str) -> str:
    stem = entry.rsplit(".", 1)[0]
    return normalize_name(stem.split("-", 1)[0])


def _metadata_path(meta_dir: str) -> str:
    if meta_dir.endswith(".dist-info"):
        return os.path.join(meta_dir, "METADATA")
    return os.path.join(meta_dir, "PKG-INFO") if os.path.isdir(meta_dir) else meta_dir


def _editable_target(meta_dir: str) -> str | None:
    raw = read_text(os.path.join(meta_dir, "direct_url.json")) if os.path.isdir(meta_dir) else None
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        return None
    if not (info.get("dir_info") or {}).get("editable"):
        return None
    url = info.get("url", "")
    return url[len("file://") :] if url.startswith("file://") else url


_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^)]*)\)?\s*$")
_EXTRA_MARKER = re.compile(r"\s*extra\s*==\s*['\"]([^'\"]+)['\"]\s*")


def _parse_requirement(line: str) -> tuple | None:
    """('torch', '==2.10.0', 'vllm') from "torch==2.10.0; extra == 'vllm'"; None if other markers."""
    req, _, marker = line.partition(";")
    m = _REQUIREMENT.match(req)
    if not m:
        return None
    extra = None
    if marker.strip():
        em = _EXTRA_MARKER.fullmatch(marker)
        if not em:
            return None
        extra = normalize_name(em.group(1))
    return normalize_name(m.group(1)), m.group(2).replace(" ", ""), extra


def _record(meta_dir: str, site_dir: str, wanted: set) -> tuple:
    text = read_text(_metadata_path(meta_dir))
    name, version, requires = _parse_metadata(text)
    record = {"version": version or None, "location": site_dir}
    if text is None or not version:
        record["broken"] = True
    editable = _editable_target(meta_dir)
    if editable:
        record["editable"] = True
        record["location"] = editable
    reqs = [r for r in (_parse_requirement(x) for x in requires) if r and r[0] in wanted]
    if reqs:
        record["requires"] = [{"name": n, "specifier": s, "extra": e} for n, s, e in reqs]
    return normalize_name(name) if name else None, record


def scan_distributions(paths: list, wanted: set) -> dict:
    """{normalized name: [record, ...]} in sys.path order (the first record is the one used)."""
    found = {}
    seen_dirs = set()
    for site_dir in paths:
        real = os.path.realpath(site_dir or ".")
        if real in seen_dirs or not os.path.isdir(real):
            continue
        seen_dirs.add(real)
        try:
            entries = sorted(os.listdir(real))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            if _dist_name_from_dir(entry) not in wanted:
                continue
            name, record = _record(os.path.join(real, entry), site_dir, wanted)
            found.setdefault(name or _dist_name_from_dir(entry), []).append(record)
    return found


def _module_found(module: str) -> bool:
    import importlib.util  # find_spec on a top-level name locates it without executing it

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def collect_packages(paths: list, warnings: list) -> dict:
    found = scan_distributions(paths, set(DIST_NAMES))
    packages = {}
    for dist in DISTS:
        records = found.get(dist.name)
        if not records:
            packages[dist.name] = {"installed": False, "version": None, "location": None}
            continue
        entry = dict(records[0], installed=True)
        if len(records) > 1:
            entry["duplicates"] = records[1:]
            listing = ", ".join(f"{r['version']} in {r['location']}" for r in records)
            warnings.append(
                f"{dist.name}: {len(records)} metadata records ({listing}); the first is used, "
                "remove the stale one"
            )
        if entry.get("broken"):
            warnings.append(f"{dist.name}: broken metadata in {entry['location']} (no Version)")
        if dist.module and not _module_found(dist.module):
            entry["module_found"] = False
            warnings.append(f"{dist.name}: metadata present but module '{dist.module}' not found")
        packages[dist.name] = entry
    if packages["pynvml"]["installed"]:
        warnings.append("the 'pynvml' distribution is deprecated; install nvidia-ml-py instead")
    return packages


# torch's build: torch/version.py read as text, never imported


def collect_torch_build(packages: dict) -> dict:
    torch = packages.get("torch", {})
    build = {"version": torch.get("version"), "cuda": None, "hip": None, "xpu": None}
    if not torch.get("installed"):
        return build
    path = os.path.join(torch.get("location") or "", "torch", "version.py")
    text = read_text(path)
    if text is None:
        build["error"] = f"cannot read {path}"
        return build
    import ast

    for line in text.splitlines():
        m = re.match(r"^(\w+)\s*(?::[^=]+)?=\s*(.+)$", line.strip())
        if not m or m.group(1) not in ("__version__", "cuda", "hip", "xpu", "git_version", "debug"):
            continue
        try:
            value = ast.literal_eval(m.group(2).strip())
        except (ValueError, SyntaxError):
            continue
        build["version" if m.group(1) == "__version__" else m.group(1)] = value
    if build.get("cuda"):
        build["variant"] = "cuda"
    elif build.get("hip"):
        build["variant"] = "rocm"
    elif build.get("xpu"):
        build["variant"] = "xpu"
    else:
        build["variant"] = "cpu"
    return build
