#!/usr/bin/env python3
"""Report which optional TRL scaling backends this machine can use, and why not.

Reads package metadata, torch's build file, NVML (in a time-limited subprocess) and the
accelerate config without importing torch or any backend, then judges each backend
(vLLM, DeepSpeed, FSDP2, context/sequence parallelism, PEFT, QLoRA, Liger, Unsloth,
Hub kernels, FlashAttention, bf16, NCCL) against the rules of the installed TRL release.

Standalone: Python 3.9+, standard library only; pyyaml and nvidia-ml-py are used when
present. Never starts servers, trains, downloads, writes files or allocates GPU memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

SCHEMA_VERSION = 1
EXIT_OK, EXIT_REQUIRE_UNMET, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
DEFAULT_TIMEOUT_S = 20.0
STATUSES = ("ready", "degraded", "not_installed", "unavailable")  # in rising severity
READY, DEGRADED, NOT_INSTALLED, UNAVAILABLE = STATUSES
PROG = "check_optional_backends.py"


# --------------------------------------------------------------------------------------
# What to look for
# --------------------------------------------------------------------------------------


class Dist(NamedTuple):
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

ENV_PREFIXES = (
    "NCCL_", "VLLM_", "ACCELERATE_", "TORCH_", "PYTORCH_", "CUDA_", "HF_", "TRANSFORMERS_",
    "DS_", "FSDP_", "PARALLELISM_CONFIG_", "NVIDIA_", "TORCHINDUCTOR_", "TRITON_",
)  # fmt: skip
ENV_NAMES = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "NODE_RANK", "OMP_NUM_THREADS", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK", "ASCEND_RT_VISIBLE_DEVICES", "TOKENIZERS_PARALLELISM", "XDG_CACHE_HOME",
    "LD_LIBRARY_PATH", "WANDB_MODE",
)  # fmt: skip
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


# --------------------------------------------------------------------------------------
# Versions (a small PEP 440 subset: enough to order releases, pre/post/dev and local tags)
# --------------------------------------------------------------------------------------

_VERSION_RE = re.compile(
    r"^\s*v?(?:(\d+)!)?(\d+(?:\.\d+)*)"
    r"(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
    r"(?:-(\d+)|[-_.]?(?:post|rev|r)[-_.]?(\d*))?"
    r"(?:[-_.]?dev[-_.]?(\d*))?"
    r"(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$",
    re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def version_key(text):
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
        pre_key = (-1,)  # 1.0.dev0 sorts before 1.0a1
    elif pre_l is None:
        pre_key = (2,)
    else:
        pre_key = (1, _PRE_RANK[pre_l.lower()], int(pre_n or 0))
    post_key = (-1,) if post is None else (1, int(post or 0))
    dev_key = (2,) if dev is None else (1, int(dev or 0))
    return (int(epoch or 0), tuple(parts), pre_key, post_key, dev_key)


def release_tuple(text):
    key = version_key(text)
    return key[1] if key else ()


def comparable_version(text, mode="public"):
    """The version string a rule compares (see Rule.compare)."""
    public, _, local = str(text).partition("+")
    if mode == "base":
        release = release_tuple(public)
        return ".".join(map(str, release)) if release else public
    if mode == "full" and local:
        # PEP 440 sorts 0.31.0+cu129 just above 0.31.0 (below any .post), like this:
        return public + ".post0.dev0"
    return public


def _matches_one(version, clause):
    m = re.match(r"^\s*(~=|===|==|!=|<=|>=|<|>)\s*([^\s]+)\s*$", clause)
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


def version_satisfies(version, specifier):
    """True/False for a comma-joined specifier like '>=0.22.0,<=0.31.0'; None if unparseable."""
    results = [_matches_one(version, c) for c in specifier.split(",") if c.strip()]
    if any(r is None for r in results):
        return None
    return all(results)


def normalize_name(name):
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------------------
# The rules: one table. `when` selects the release line a rule belongs to; `only_if` makes
# a rule apply only when that distribution is installed at a matching version.
# --------------------------------------------------------------------------------------


class Rule(NamedTuple):
    backend: str
    subject: str  # a distribution name, or "compute_capability" (lowest visible CUDA GPU)
    spec: str
    severity: str  # status when violated
    why: str
    source: str
    when: tuple | None = None  # (dist, "major.minor") release line this rule belongs to
    only_if: tuple | None = None  # (dist, specifier)
    # "public": drop the local tag; "base": release numbers only (TRL >= 1.9 compares
    # Version(v).base_version); "full": '+cu129' sorts above the release (TRL < 1.9).
    compare: str = "public"
    fix: str | None = None  # next step when violated (default: install a matching version)


def _vllm_window(trl_line, spec, source, compare="full"):
    why = f"TRL {trl_line} supports vLLM {spec} (it warns outside this window)"
    fix = f'pip install "vllm{spec}" (the window of the installed TRL)'
    return Rule(
        "vllm", "vllm", spec, "degraded", why, source, ("trl", trl_line), None, compare, fix
    )


_TRL_IMPORT_UTILS = "trl/import_utils.py is_vllm_available"
RULES = (
    # vLLM windows per TRL release line, from each tag's trl/import_utils.py (git history).
    _vllm_window("0.24", "==0.10.2", f"TRL 0.24.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("0.25", "==0.10.2", f"TRL 0.25.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("0.26", ">=0.10.2,<=0.11.2", f"TRL 0.26.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("0.27", ">=0.10.2,<=0.12.0", f"TRL 0.27.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("0.28", ">=0.10.2,<=0.12.0", f"TRL 0.28.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("0.29", ">=0.10.2,<=0.12.0", f"TRL 0.29.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.0", ">=0.10.2,<=0.17.1", f"TRL 1.0.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.1", ">=0.11.0,<=0.17.1", f"TRL 1.1.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.2", ">=0.11.0,<=0.18.0", f"TRL 1.2.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.3", ">=0.12.0,<=0.18.0", f"TRL 1.3.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.4", ">=0.12.0,<=0.18.0", f"TRL 1.4.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.5", ">=0.12.0,<=0.18.0", f"TRL 1.5.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.6", ">=0.12.0,<=0.19.0", f"TRL 1.6.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.7", ">=0.14.0,<=0.23.0", f"TRL 1.7.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.8", ">=0.16.0,<=0.23.0", f"TRL 1.8.0 {_TRL_IMPORT_UTILS}"),
    _vllm_window("1.9", ">=0.17.0,<=0.25.1", f"TRL 1.9.0 {_TRL_IMPORT_UTILS}", "base"),
    _vllm_window("1.16", ">=0.22.0,<=0.31.0", f"TRL 1.16.0 {_TRL_IMPORT_UTILS}", "base"),
    # Minimum versions from TRL 1.16.0's extras (trl-1.16.0.dist-info/METADATA).
    Rule("deepspeed", "deepspeed", ">=0.18.6", "degraded",
         "TRL 1.16.0's deepspeed extra needs deepspeed>=0.18.6", "TRL 1.16.0 METADATA extra 'deepspeed'"),
    Rule("peft", "peft", ">=0.13.0", "degraded",
         "TRL 1.16.0's peft extra needs peft>=0.13.0", "TRL 1.16.0 METADATA extra 'peft'"),
    Rule("qlora", "peft", ">=0.13.0", "degraded",
         "TRL 1.16.0's peft extra needs peft>=0.13.0", "TRL 1.16.0 METADATA extra 'peft'"),
    Rule("qlora", "bitsandbytes", ">=0.45.1", "degraded",
         "TRL 1.16.0's quantization extra needs bitsandbytes>=0.45.1",
         "TRL 1.16.0 METADATA extra 'quantization'"),
    Rule("liger", "liger-kernel", ">=0.8.2", "unavailable",
         "TRL treats liger-kernel below 0.8.2 as not available",
         "TRL 1.16.0 trl/import_utils.py LIGER_KERNEL_MIN_VERSION"),
    Rule("liger", "liger-kernel-nightly", ">=0.8.2", "unavailable",
         "TRL treats liger-kernel below 0.8.2 as not available",
         "TRL 1.16.0 trl/import_utils.py LIGER_KERNEL_MIN_VERSION"),
    Rule("liger", "compute_capability", ">=8.0", "unavailable",
         "liger-kernel 0.8.1 crashes on GPUs below compute capability 8.0",
         "huggingface/trl#6767", None, ("liger-kernel", "==0.8.1"), "public", 'pip install "liger-kernel>=0.8.2"'),
    # accelerate / torch gates (accelerate 1.15.0 utils/constants.py, accelerator.py).
    Rule("fsdp2", "torch", ">=2.6.0", "unavailable", "FSDP2 requires PyTorch >= 2.6.0",
         "accelerate 1.15.0 utils/constants.py FSDP2_PYTORCH_VERSION"),
    Rule("context_parallel", "torch", ">=2.6.0", "unavailable",
         "context parallelism requires PyTorch >= 2.6.0",
         "accelerate 1.15.0 utils/constants.py BETA_CP_AVAILABLE_PYTORCH_VERSION"),
    Rule("ulysses", "deepspeed", ">=0.18.2", "unavailable",
         "accelerate's DeepSpeed sequence parallelism (ALST/Ulysses) requires deepspeed>=0.18.2",
         "accelerate 1.15.0 accelerator.py BETA_SP_AVAILABLE_DEEPSPEED_VERSION"),
    Rule("ulysses", "deepspeed", ">=0.18.6", "degraded",
         "TRL 1.16.0's deepspeed extra needs deepspeed>=0.18.6", "TRL 1.16.0 METADATA extra 'deepspeed'"),
    Rule("ulysses", "accelerate", ">=1.12.0", "unavailable",
         "TRL's SFTTrainer handles sequence parallelism only with accelerate>=1.12.0",
         "TRL 1.16.0 trl/trainer/sft_trainer.py"),
    # transformers 5.24.0 gates.
    Rule("kernels", "kernels", ">=0.18.2,<0.19.0", "unavailable",
         "transformers 5.24 accepts kernels 0.18.2 <= v < 0.19.0 only",
         "transformers 5.24.0 utils/import_utils.py KERNELS_MIN_VERSION/KERNELS_MAX_VERSION",
         ("transformers", "5.24")),
    Rule("kernels", "transformers", ">=5.4.0", "unavailable",
         "use_kernels=True requires transformers>=5.4.0 (5.2.x and 5.3.x fail to load Hub kernels)",
         "TRL 1.16.0 trl/trainer/utils.py"),
    Rule("flash_attn", "flash-attn", ">=2.3.3", "unavailable",
         "transformers needs flash-attn>=2.3.3 for flash_attention_2",
         "transformers 5.24.0 utils/import_utils.py is_flash_attn_2_available"),
    # Compute capability gates (lowest visible CUDA GPU).
    Rule("bf16", "compute_capability", ">=8.0", "degraded",
         "no native bf16 below compute capability 8.0 (torch only emulates it)",
         "torch.cuda.is_bf16_supported; TRL docs: bf16 needs Ampere or newer",
         None, None, "public", "set fp16=True, bf16=False"),
    Rule("flash_attn", "compute_capability", ">=8.0", "unavailable",
         "FlashAttention-2 runs on compute capability 8.0+ (Ampere, Ada, Hopper)",
         "flash-attention README; transformers 5.24 FLASH_ATTENTION_COMPATIBILITY_MATRIX",
         None, None, "public", 'keep attn_implementation="sdpa"'),
    Rule("flash_attn", "compute_capability", ">=9.0", "degraded",
         "FlashAttention-3's speedup is Hopper-only; builds before 2025 even reject pre-Hopper GPUs "
         "(transformers allows 8.0+)",
         "transformers 5.24.0 FA3 cuda_min_major_version=8; Dao-AILab/flash-attention#1481, #1049",
         None, ("flash-attn-3", ">=0"), "public", 'usable; on Ampere prefer attn_implementation="flash_attention_2"'),
    Rule("flash_attn", "compute_capability", ">=9.0", "unavailable",
         "FlashAttention-4 requires compute capability 9.0+ (Hopper)",
         "transformers 5.24.0 modeling_flash_attention_utils.py (FA4 cuda_min_major_version=9)",
         None, ("flash-attn-4", ">=0"), "public", "uninstall flash-attn-4 and use flash-attn (FA2)"),
    Rule("vllm", "compute_capability", ">=7.0", "unavailable",
         "vLLM's CUDA builds need compute capability 7.0+", "vLLM GPU installation docs",
         None, None, "public", "use a GPU with compute capability 7.0+ for generation"),
    Rule("qlora", "compute_capability", ">=7.5", "degraded",
         "bitsandbytes warns below compute capability 7.5 (no int8 tensor-core kernels)",
         "python -m bitsandbytes diagnostic", None, None, "public",
         "plain LoRA (no 4-bit) or a GPU with compute capability 7.5+"),
)  # fmt: skip


# --------------------------------------------------------------------------------------
# The backends: what each needs and where it runs
# --------------------------------------------------------------------------------------


class Backend(NamedTuple):
    name: str
    needs: tuple  # groups of alternative distributions; every group must be installed
    ready_on: tuple  # accelerator kinds where it is fully supported
    degraded_on: tuple  # kinds where it runs with caveats
    min_devices: int  # fewer visible devices than this -> degraded
    install: str
    enable: str


ALL_KINDS = ("cuda", "rocm", "mps", "xpu", "npu", "cpu")
BACKENDS = (
    Backend("vllm", (("vllm",),), ("cuda", "rocm"), ("xpu", "npu"), 1,
            'pip install "trl[vllm]" (pins the supported vLLM window)',
            "GRPOConfig(use_vllm=True); vllm_mode defaults to 'colocate'"),
    Backend("deepspeed", (("deepspeed",), ("accelerate",)), ("cuda", "rocm"), ("xpu", "npu"), 1,
            'pip install "trl[deepspeed]"', "trl <cmd> --accelerate_config zero2 (or zero3)"),
    Backend("fsdp2", (("torch",), ("accelerate",)), ("cuda", "rocm"), ("xpu", "npu"), 2,
            'pip install "torch>=2.6" accelerate', "trl <cmd> --accelerate_config fsdp2"),
    Backend("context_parallel", (("torch",), ("accelerate",)), ("cuda",), ("rocm",), 2,
            'pip install "torch>=2.6" "accelerate>=1.11"',
            "FSDP2 config with parallelism_config_cp_size; SFT only, without packing"),
    Backend("ulysses", (("deepspeed",), ("accelerate",)), ("cuda",), ("rocm",), 2,
            'pip install "trl[deepspeed]" "accelerate>=1.12"',
            "DeepSpeed config with parallelism_config_sp_size and sp_backend deepspeed; SFT only"),
    Backend("peft", (("peft",),), ALL_KINDS, (), 0, 'pip install "trl[peft]"',
            "pass peft_config=LoraConfig(...) to the trainer"),
    Backend("qlora", (("peft",), ("bitsandbytes",)), ("cuda",), ("rocm", "xpu", "npu", "cpu"), 1,
            'pip install "trl[peft,quantization]"',
            "model_init_kwargs quantization_config=BitsAndBytesConfig(load_in_4bit=True) + LoraConfig"),
    Backend("liger", (("liger-kernel", "liger-kernel-nightly"),), ("cuda", "rocm"), ("xpu",), 1,
            'pip install "trl[liger]"',
            'use_liger_kernel=True still works but is deprecated in TRL 1.16.0; prefer model_init_kwargs={"use_kernels": True}'),
    Backend("unsloth", (("unsloth",), ("unsloth-zoo",)), ("cuda",), ("rocm", "xpu"), 1,
            "pip install unsloth", "load the model with unsloth's FastLanguageModel before the trainer"),
    Backend("kernels", (("kernels",), ("transformers",)), ("cuda", "rocm", "xpu", "mps"), ("npu", "cpu"), 1,
            'pip install "trl[kernels]"', 'model_init_kwargs={"use_kernels": True}'),
    Backend("flash_attn", (("flash-attn", "flash-attn-3", "flash-attn-4"),), ("cuda",), ("rocm", "npu", "xpu"), 1,
            "pip install flash-attn --no-build-isolation (or use the Hub kernel via the kernels package)",
            'model_init_kwargs={"attn_implementation": "flash_attention_2"}'),
    Backend("bf16", (("torch",),), ("cuda", "rocm", "xpu", "npu", "mps"), ("cpu",), 1,
            "pip install torch", "bf16=True (the TRL config default)"),
    Backend("nccl", (("torch",),), ("cuda", "rocm"), (), 1,
            "install a CUDA (or ROCm) build of torch", "used automatically by multi-GPU launches"),
)  # fmt: skip
BACKEND_NAMES = tuple(b.name for b in BACKENDS)
# On a GPU box, a torch build that cannot use the GPUs sinks every backend but PEFT.
NEEDS_GPU_TORCH = set(BACKEND_NAMES) - {"peft"}
SEQUENCE_SPLITTING = {"context_parallel", "ulysses"}


# --------------------------------------------------------------------------------------
# Facts: packages (metadata only, never imported)
# --------------------------------------------------------------------------------------


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _parse_metadata(text):
    from email.parser import HeaderParser  # stdlib, loaded only when a dist is found

    msg = HeaderParser().parsestr(text or "")
    return msg.get("Name"), msg.get("Version"), msg.get_all("Requires-Dist") or []


def _dist_name_from_dir(entry):
    stem = entry.rsplit(".", 1)[0]
    return normalize_name(stem.split("-", 1)[0])


def _metadata_path(meta_dir):
    if meta_dir.endswith(".dist-info"):
        return os.path.join(meta_dir, "METADATA")
    return os.path.join(meta_dir, "PKG-INFO") if os.path.isdir(meta_dir) else meta_dir


def _editable_target(meta_dir):
    raw = _read_text(os.path.join(meta_dir, "direct_url.json")) if os.path.isdir(meta_dir) else None
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        return None
    if not (info.get("dir_info") or {}).get("editable"):
        return None
    url = info.get("url", "")
    return url[len("file://") :] if url.startswith("file://") else url


def _parse_requirement(line):
    """('torch', '==2.10.0', 'vllm') from "torch==2.10.0; extra == 'vllm'"; None if other markers."""
    req, _, marker = line.partition(";")
    m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^)]*)\)?\s*$", req)
    if not m:
        return None
    extra = None
    if marker.strip():
        em = re.fullmatch(r"\s*extra\s*==\s*['\"]([^'\"]+)['\"]\s*", marker)
        if not em:
            return None
        extra = normalize_name(em.group(1))
    return normalize_name(m.group(1)), m.group(2).replace(" ", ""), extra


def _record(meta_dir, site_dir, wanted):
    text = _read_text(_metadata_path(meta_dir))
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


def scan_distributions(paths, wanted):
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


def _module_found(module):
    import importlib.util  # find_spec on a top-level name locates it without executing it

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def collect_packages(paths, warnings):
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


# --------------------------------------------------------------------------------------
# Facts: torch build (read torch/version.py as text; never import torch)
# --------------------------------------------------------------------------------------


def collect_torch_build(packages):
    torch = packages.get("torch", {})
    build = {"version": torch.get("version"), "cuda": None, "hip": None, "xpu": None}
    if not torch.get("installed"):
        return build
    path = os.path.join(torch.get("location") or "", "torch", "version.py")
    text = _read_text(path)
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


# --------------------------------------------------------------------------------------
# Facts: child processes (bounded in time; the whole process group is killed on timeout)
# --------------------------------------------------------------------------------------

RESULT_MARK = "__CHECK_RESULT__ "


def _child_prelude():
    # The child must see exactly our sys.path (a '' entry or PYTHONPATH could differ).
    return "import json, sys\nsys.path[:] = json.loads(sys.argv[1])\n"


def run_child(code, args, timeout, extra_env=None):
    """Run `python -c code` and return (status, result dict or detail str, seconds)."""
    cmd = [sys.executable]
    if sys.flags.no_site:
        cmd.append("-S")
    cmd += ["-c", _child_prelude() + code, json.dumps(sys.path), *args]
    env = dict(os.environ, PYTHONWARNINGS="ignore", **(extra_env or {}))
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=(os.name == "posix"),
        )
    except OSError as exc:
        return "error", f"cannot start {sys.executable}: {exc}", 0.0
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        return "timeout", f"no answer after {timeout:g} s", time.perf_counter() - start
    seconds = time.perf_counter() - start
    if proc.returncode < 0:
        return "crashed", f"killed by {_signal_name(-proc.returncode)}", seconds
    for line in reversed(out.decode("utf-8", "replace").splitlines()):
        if line.startswith(RESULT_MARK):
            try:
                return "ok", json.loads(line[len(RESULT_MARK) :]), seconds
            except ValueError:
                break
    return "error", _last_line(err) or f"exit status {proc.returncode}", seconds


def _kill_tree(proc):
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except OSError:
        pass
    with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
        proc.communicate(timeout=2)


def _signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _last_line(data):
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


# --------------------------------------------------------------------------------------
# Facts: accelerators
# --------------------------------------------------------------------------------------

NVML_PROBE = r"""
MARK = "__CHECK_RESULT__ "
def s(v):
    return v.decode() if isinstance(v, bytes) else v
def call(fn, *a):
    try:
        return fn(*a)
    except Exception:
        return None
try:
    import pynvml as nv
except Exception as e:
    print(MARK + json.dumps({"error": "nvidia-ml-py not importable: %s" % e})); sys.exit(0)
try:
    nv.nvmlInit()
except Exception as e:
    print(MARK + json.dumps({"error": "%s: %s" % (type(e).__name__, e)})); sys.exit(0)
out = {"driver_version": s(call(nv.nvmlSystemGetDriverVersion)), "devices": [], "topology": []}
cuda = call(getattr(nv, "nvmlSystemGetCudaDriverVersion_v2", None)
            or getattr(nv, "nvmlSystemGetCudaDriverVersion", None))
out["cuda_driver_version"] = "%d.%d" % (cuda // 1000, cuda % 1000 // 10) if cuda else None
handles = []
for i in range(call(nv.nvmlDeviceGetCount) or 0):
    h = call(nv.nvmlDeviceGetHandleByIndex, i)
    if h is None:  # e.g. a GPU that fell off the bus: report it, keep the others
        out["devices"].append({"index": i, "name": None, "error": "no NVML handle"})
        continue
    handles.append((i, h))
    mem = call(nv.nvmlDeviceGetMemoryInfo, h)
    cc = call(nv.nvmlDeviceGetCudaComputeCapability, h)
    mig = call(nv.nvmlDeviceGetMigMode, h)
    pci = call(nv.nvmlDeviceGetPciInfo, h)
    procs = call(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
    links = 0
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        if call(nv.nvmlDeviceGetNvLinkState, h, link) == 1:
            links += 1
    dev = {"index": i, "name": s(call(nv.nvmlDeviceGetName, h)), "uuid": s(call(nv.nvmlDeviceGetUUID, h)),
           "pci_bus_id": s(pci.busId) if pci else None,
           "memory_total_mib": mem.total // 2**20 if mem else None,
           "memory_used_mib": mem.used // 2**20 if mem else None,
           "memory_free_mib": mem.free // 2**20 if mem else None,
           "compute_capability": "%d.%d" % tuple(cc) if cc else None,
           "mig_enabled": bool(mig[0]) if mig else False,
           "nvlink_active_links": links,
           "processes": [{"pid": p.pid, "used_memory_mib": (p.usedGpuMemory or 0) // 2**20} for p in procs],
           "mig_devices": []}
    if dev["mig_enabled"]:
        for j in range(call(nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            m = call(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, j)
            if m is None:
                continue
            mm = call(nv.nvmlDeviceGetMemoryInfo, m)
            dev["mig_devices"].append({"uuid": s(call(nv.nvmlDeviceGetUUID, m)),
                                       "memory_total_mib": mm.total // 2**20 if mm else None})
    out["devices"].append(dev)
levels = {0: "same board", 10: "single PCIe switch", 20: "multiple PCIe switches",
          30: "host bridge", 40: "same NUMA node", 50: "across NUMA nodes (SYS)"}
nvlink_caps = getattr(nv, "NVML_P2P_CAPS_INDEX_NVLINK", 3)
for x, (i, hi) in enumerate(handles):
    for j, hj in handles[x + 1:]:
        lvl = call(nv.nvmlDeviceGetTopologyCommonAncestor, hi, hj)
        p2p = call(nv.nvmlDeviceGetP2PStatus, hi, hj, nvlink_caps)
        out["topology"].append({"a": i, "b": j, "link": levels.get(lvl, lvl), "nvlink": p2p == 0})
call(nv.nvmlShutdown)
print(MARK + json.dumps(out))
"""


def probe_nvml(timeout):
    status, result, seconds = run_child(NVML_PROBE, [], timeout)
    if status != "ok":
        return {"error": f"NVML probe {status}: {result}"}, seconds
    return result, seconds


def probe_nvidia_smi(timeout):
    """Fallback when nvidia-ml-py is absent: nvidia-smi's CSV query, bounded in time."""
    import shutil

    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    fields = (
        "index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,compute_cap,driver_version"
    )
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"nvidia-smi gave no answer after {timeout:g} s"}
    except OSError as exc:
        return {"error": f"nvidia-smi failed: {exc}"}
    if proc.returncode != 0:
        return {"error": f"nvidia-smi: {_last_line(proc.stdout + proc.stderr)}"}
    devices, driver = [], None
    for row in proc.stdout.decode("utf-8", "replace").splitlines():
        cols = [c.strip() for c in row.split(",")]
        if len(cols) != 9:
            continue
        num = [int(c) if c.isdigit() else None for c in cols[4:7]]
        driver = cols[8]
        devices.append(
            {
                "index": int(cols[0]),
                "name": cols[1],
                "uuid": cols[2],
                "pci_bus_id": cols[3],
                "memory_total_mib": num[0],
                "memory_used_mib": num[1],
                "memory_free_mib": num[2],
                "compute_capability": cols[7],
                "mig_enabled": None,
                "processes": None,
            }
        )
    return {"driver_version": driver, "cuda_driver_version": None, "devices": devices}


def parse_visible_devices(value, devices):
    """Apply CUDA_VISIBLE_DEVICES to NVML's device list; returns (visible, problems)."""
    if value is None:
        return list(devices), []
    if not value.strip():
        return [], ["CUDA_VISIBLE_DEVICES is set to an empty string: no GPU is visible"]
    visible, problems = [], []
    for token in (t.strip() for t in value.split(",")):
        match = None
        if re.fullmatch(r"\d+", token):
            match = next((d for d in devices if d["index"] == int(token)), None)
        elif token.startswith("GPU-"):
            match = next((d for d in devices if (d.get("uuid") or "").startswith(token)), None)
        elif token.startswith("MIG-"):
            match = _mig_slice(devices, token)
        if match is None:
            # The CUDA runtime stops at the first invalid entry and ignores the rest.
            problems.append(
                f"CUDA_VISIBLE_DEVICES entry '{token}' matches no device; CUDA ignores it and all after it"
            )
            break
        if match not in visible:
            visible.append(match)
    return visible, problems


def _mig_slice(devices, token):
    for dev in devices:
        for mig in dev.get("mig_devices") or []:
            if (mig.get("uuid") or "").startswith(token):
                return dict(
                    dev, memory_total_mib=mig.get("memory_total_mib"), mig_slice=mig["uuid"]
                )
    return None


def _other_accelerator(packages, torch_build):
    system, machine = platform.system(), platform.machine().lower()
    if torch_build.get("hip") or os.path.isdir("/opt/rocm") or os.path.exists("/sys/class/kfd"):
        return "rocm", _rocm_devices()
    if system == "Darwin" and machine in ("arm64", "aarch64"):
        return "mps", [
            {"index": 0, "name": f"Apple {machine} (MPS)", "memory_total_mib": _ram_mib()}
        ]
    intel = packages.get("intel-extension-for-pytorch", {}).get("installed") or torch_build.get(
        "xpu"
    )
    if intel and os.path.isdir("/dev/dri"):
        return "xpu", []
    if os.path.isdir("/usr/local/Ascend") or packages.get("torch-npu", {}).get("installed"):
        return "npu", []
    return "cpu", []


def _rocm_devices():
    root = "/sys/class/kfd/kfd/topology/nodes"
    devices = []
    try:
        nodes = sorted(os.listdir(root), key=lambda n: int(n) if n.isdigit() else 0)
    except OSError:
        return devices
    for node in nodes:
        props = _read_text(os.path.join(root, node, "properties")) or ""
        target = re.search(r"^gfx_target_version\s+(\d+)", props, re.MULTILINE)
        if target and int(target.group(1)) > 0:
            v = int(target.group(1))
            gfx = f"gfx{v // 10000}{(v // 100) % 100:x}{v % 100:x}"
            devices.append({"index": len(devices), "name": gfx, "gfx_target": gfx})
    return devices


def _ram_mib():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):
        return None


def collect_accelerators(packages, torch_build, timeout, timings):
    nvml_dist = packages["nvidia-ml-py"]["installed"] or packages["pynvml"]["installed"]
    start = time.perf_counter()
    if nvml_dist:
        nvml, timings["nvml"] = probe_nvml(min(timeout, 15.0))
    else:
        nvml = probe_nvidia_smi(min(timeout, 15.0)) or {
            "error": "nvidia-ml-py not installed and nvidia-smi not found"
        }
        timings["nvidia_smi"] = round(time.perf_counter() - start, 3)
    acc = {
        "kind": "cpu",
        "driver_version": nvml.get("driver_version"),
        "cuda_driver_version": nvml.get("cuda_driver_version"),
        "devices": [],
        "physical_device_count": len(nvml.get("devices") or []),
        "topology": nvml.get("topology") or [],
        "error": nvml.get("error"),
        "visibility": {
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER"),
            "problems": [],
        },
    }
    if nvml.get("devices"):
        acc["kind"] = "cuda"
        visible, problems = parse_visible_devices(
            os.environ.get("CUDA_VISIBLE_DEVICES"), nvml["devices"]
        )
        acc["devices"] = visible
        acc["visibility"]["problems"] = problems + _order_problems(nvml["devices"])
        return acc
    acc["kind"], acc["devices"] = _other_accelerator(packages, torch_build)
    return acc


def _order_problems(devices):
    names = {d.get("name") for d in devices}
    if len(names) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return [
            "mixed GPU models: CUDA numbers devices fastest-first while NVML/nvidia-smi use PCI order; "
            "set CUDA_DEVICE_ORDER=PCI_BUS_ID so indices agree"
        ]
    return []


# --------------------------------------------------------------------------------------
# Facts: environment variables and the accelerate config
# --------------------------------------------------------------------------------------


def collect_environment(environ):
    picked = {}
    for key in sorted(environ):
        if key.startswith(ENV_PREFIXES) or key in ENV_NAMES:
            secret = any(marker in key.upper() for marker in SECRET_MARKERS)
            picked[key] = "<redacted>" if secret else environ[key]
    return picked


def default_accelerate_config_path(environ):
    # accelerate/commands/config/config_args.py: $HF_HOME, else $XDG_CACHE_HOME/huggingface
    cache = environ.get("XDG_CACHE_HOME", "~/.cache")
    hf_home = environ.get("HF_HOME", os.path.join(cache, "huggingface"))
    return os.path.expanduser(os.path.join(hf_home, "accelerate", "default_config.yaml"))


def parse_flat_yaml(text):
    """Minimal YAML for accelerate configs: nested mappings by indentation, scalars, '- x' lists."""
    root = {}
    stack = [(-1, root)]
    last_key = None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        indent = len(line) - len(line.lstrip())
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        body = line.strip()
        if body.startswith("- "):
            if isinstance(parent, dict) and last_key is not None and parent.get(last_key) == {}:
                parent[last_key] = []
            target = parent.get(last_key) if isinstance(parent, dict) else None
            if isinstance(target, list):
                target.append(_yaml_scalar(body[2:]))
            continue
        key, sep, value = body.partition(":")
        if not sep:
            raise ValueError(f"cannot parse line: {raw.strip()!r}")
        key = key.strip().strip("'\"")
        if value.strip():
            parent[key] = _yaml_scalar(value)
        else:
            parent[key] = {}
            stack.append((indent, parent[key]))
        last_key = key
    return root


def _yaml_scalar(value):
    value = value.strip()
    if value[:1] in ("'", '"') and value[-1:] == value[:1]:
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


def load_config_file(path):
    text = _read_text(path)
    if text is None:
        raise OSError(f"cannot read {path}")
    if path.endswith(".json"):
        return json.loads(text), "json"
    try:
        import yaml  # optional; full YAML when present
    except ImportError:
        return parse_flat_yaml(text), "builtin-yaml"
    return yaml.safe_load(text), "pyyaml"


def collect_config(path_arg, environ):
    if path_arg:
        path, source = path_arg, "--accelerate-config"
    else:
        path, source = default_accelerate_config_path(environ), "default"
    config = {"path": path, "source": source, "exists": os.path.isfile(path), "values": None}
    if not config["exists"]:
        return config
    try:
        values, parser = load_config_file(path)
    except Exception as exc:  # any parser error is a fact about the file, not our failure
        config["error"] = f"cannot parse: {type(exc).__name__}: {exc}".splitlines()[0]
        return config
    config["parser"] = parser
    config["values"] = values if isinstance(values, dict) else None
    if not isinstance(values, dict):
        config["error"] = "not a mapping"
    return config


# --------------------------------------------------------------------------------------
# Facts: optional probes (--imports, --vllm-url)
# --------------------------------------------------------------------------------------

IMPORT_PROBE = r"""
import importlib, traceback
try:
    mod = importlib.import_module(sys.argv[2])
except BaseException as e:
    print("__CHECK_RESULT__ " + json.dumps({"error": traceback.format_exception_only(type(e), e)[-1].strip()}))
    sys.exit(0)
print("__CHECK_RESULT__ " + json.dumps({"module_version": str(getattr(mod, "__version__", "") or "") or None}))
"""

TORCH_PROBE = r"""
import torch, torch.distributed as dist
info = {"version": torch.__version__, "cuda_build": torch.version.cuda, "hip_build": torch.version.hip,
        "cuda_available": torch.cuda.is_available(), "device_count": torch.cuda.device_count(),
        "distributed_available": dist.is_available()}
if info["distributed_available"]:
    info["nccl_available"] = dist.is_nccl_available()
    info["gloo_available"] = dist.is_gloo_available()
try:
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    info["fsdp2_fully_shard"] = True
except Exception:
    info["fsdp2_fully_shard"] = False
if torch.version.cuda and info["cuda_available"]:
    try:
        info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:
        info["nccl_version_error"] = str(e)
mps = getattr(torch.backends, "mps", None)
info["mps_available"] = bool(mps and mps.is_available())
print("__CHECK_RESULT__ " + json.dumps(info))
"""


def import_probe_targets(packages):
    targets = {}
    for dist in DISTS:
        if dist.module and packages[dist.name]["installed"] and dist.module not in targets.values():
            targets[dist.name] = dist.module
    return targets


def run_import_probes(packages, timeout, timings):
    """Import each installed package in its own subprocess, in parallel; annotate `packages`."""
    targets = import_probe_targets(packages)
    # PYTORCH_NVML_BASED_CUDA_CHECK keeps torch.cuda.is_available() from creating a context.
    env = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    jobs = [(name, IMPORT_PROBE, [module]) for name, module in targets.items()]
    if packages["torch"]["installed"]:
        jobs.append(("torch-runtime", TORCH_PROBE, []))
    # One probe per core: oversubscribing made every import slower (measured on 2 cores).
    workers = max(1, min(len(jobs), os.cpu_count() or 2))
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            name: pool.submit(run_child, code, args, timeout, env) for name, code, args in jobs
        }
        results = {name: f.result() for name, f in futures.items()}
    timings["imports_wall"] = round(time.perf_counter() - start, 3)
    timings["imports_workers"] = workers
    torch_runtime = None
    for name, (status, payload, seconds) in results.items():
        if name == "torch-runtime":
            torch_runtime = payload if status == "ok" else {"error": f"{status}: {payload}"}
            continue
        outcome = {"status": status, "detail": None, "seconds": round(seconds, 3)}
        if status == "ok" and isinstance(payload, dict) and payload.get("error"):
            outcome.update(status="error", detail=payload["error"])
        elif status == "ok":
            outcome["module_version"] = payload.get("module_version")
        else:
            outcome["detail"] = payload
        packages[name]["import"] = outcome
    return torch_runtime


def probe_vllm_server(url, timeout):
    """Read-only GETs against a running vLLM server; never raises."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    base = url.rstrip("/")
    report = {"url": base}
    start = time.perf_counter()

    def get(path):
        remaining = max(0.5, timeout - (time.perf_counter() - start))
        try:
            with opener.open(base + path, timeout=remaining) as resp:
                body = resp.read(4_000_000)
                return resp.status, body
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except Exception as exc:  # refused, DNS, timeout, TLS: all are facts
            return None, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"

    status, body = get("/health")
    report["health"] = status
    if status is None:
        report["error"] = body
        report["seconds"] = round(time.perf_counter() - start, 3)
        return report
    status, body = get("/v1/models")
    report["models"] = [
        m.get("id") for m in _json_or({}, body).get("data", []) if isinstance(m, dict)
    ]
    status, body = get("/server_info?config_format=json")
    report["server_info_status"] = status
    report["dev_mode"] = status == 200
    if status == 200:
        config = _json_or({}, body).get("vllm_config") or {}
        report["weight_transfer_config"] = config.get("weight_transfer_config")
        report["logprobs_mode"] = (config.get("model_config") or {}).get("logprobs_mode")
    status, body = get("/get_world_size")
    if status == 200:
        report["world_size"] = _json_or({}, body).get("world_size")
    report["seconds"] = round(time.perf_counter() - start, 3)
    return report


def _json_or(default, body):
    try:
        value = json.loads(body)
    except (ValueError, TypeError):
        return default
    return value if isinstance(value, dict) else default


# --------------------------------------------------------------------------------------
# Facts: assembly
# --------------------------------------------------------------------------------------


def collect_facts(args):
    start = time.perf_counter()
    timings, warnings = {}, []
    packages = collect_packages(sys.path, warnings)
    timings["metadata"] = round(time.perf_counter() - start, 3)
    torch_build = collect_torch_build(packages)
    facts = {
        "schema_version": SCHEMA_VERSION,
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
            "no_site": bool(sys.flags.no_site),
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "platform": platform.platform(),
            "mac_version": platform.mac_ver()[0] or None,
        },
        "packages": packages,
        "torch_build": torch_build,
        "accelerators": collect_accelerators(packages, torch_build, args.timeout, timings),
        "environment": collect_environment(os.environ),
        "config": collect_config(args.accelerate_config, os.environ),
    }
    if args.imports:
        facts["torch_runtime"] = run_import_probes(packages, args.timeout, timings)
    if args.vllm_url:
        facts["vllm_server"] = probe_vllm_server(args.vllm_url, min(args.timeout, 10.0))
    timings["total"] = round(time.perf_counter() - start, 3)
    facts["timings"] = timings
    facts["warnings"] = warnings
    return facts


# --------------------------------------------------------------------------------------
# Judging: a pure function of the facts dict
# --------------------------------------------------------------------------------------


class Finding(NamedTuple):
    status: str
    reason: str
    next_step: str | None = None
    passed_rule: bool = False  # a met rule: explains "ready", noise next to a problem


class Context(NamedTuple):
    facts: dict
    versions: dict  # installed distribution -> version (None if broken)
    kind: str
    devices: list
    min_cc: tuple | None
    lines: dict  # dist -> release line whose rules apply ("1.16")
    line_notes: list
    rules: tuple  # RULES, plus a vLLM window read from an unknown TRL's own metadata


def _installed(facts):
    return {n: p.get("version") for n, p in facts.get("packages", {}).items() if p.get("installed")}


def _cc_tuple(text):
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def _release_line(version):
    parts = release_tuple(version)
    return f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}" if parts else None


def select_release_lines(versions):
    """For each dist that rules are keyed on, the release line to apply, plus notes."""
    lines, notes = {}, []
    keyed = {}
    for rule in RULES:
        if rule.when:
            keyed.setdefault(rule.when[0], set()).add(rule.when[1])
    for dist, known in keyed.items():
        newest = max(known, key=lambda v: release_tuple(v))
        installed = versions.get(dist)
        line = _release_line(installed) if installed else None
        if line in known:
            lines[dist] = line
            continue
        lines[dist] = newest
        if installed:
            notes.append(f"{dist} {installed} has no recorded rules here; using {dist} {newest}'s")
    return lines, notes


def make_context(facts):
    versions = _installed(facts)
    acc = facts.get("accelerators") or {}
    devices = list(acc.get("devices") or [])
    kind = acc.get("kind") or "cpu"
    ccs = [c for c in (_cc_tuple(d.get("compute_capability")) for d in devices) if c]
    min_cc = min(ccs) if ccs and kind == "cuda" else None
    lines, notes = select_release_lines(versions)
    rules = RULES
    metadata_rule = _window_from_trl_metadata(facts, versions)
    if metadata_rule and lines.get("trl") != _release_line(versions.get("trl")):
        # A TRL release this table does not know: its own extra pin beats a guess.
        lines["trl"] = metadata_rule.when[1]
        notes = [n for n in notes if not n.startswith("trl ")]
        notes.append(
            f"trl {versions['trl']}: vLLM window {metadata_rule.spec} read from its METADATA"
        )
        rules = RULES + (metadata_rule,)
    return Context(facts, versions, kind, devices, min_cc, lines, notes, rules)


def _window_from_trl_metadata(facts, versions):
    trl = (facts.get("packages") or {}).get("trl") or {}
    for req in trl.get("requires") or []:
        if req.get("name") == "vllm" and req.get("extra") == "vllm" and req.get("specifier"):
            line = _release_line(versions.get("trl"))
            source = f"installed TRL {versions.get('trl')} METADATA extra 'vllm'"
            return _vllm_window(line, req["specifier"], source, "base")
    return None


def rule_applies(rule, ctx):
    if rule.when and ctx.lines.get(rule.when[0]) != rule.when[1]:
        return False
    if rule.only_if:
        version = ctx.versions.get(rule.only_if[0])
        return bool(version) and version_satisfies(version, rule.only_if[1]) is not False
    return True


def check_rule(rule, ctx):
    """A Finding if the rule is violated, a passing Finding('ready', ...) if met, else None."""
    if rule.subject == "compute_capability":
        if ctx.min_cc is None:
            return None
        value = "{}.{}".format(*ctx.min_cc)
        ok = version_satisfies(value, rule.spec)
        label = f"lowest visible compute capability {value}"
    else:
        value = ctx.versions.get(rule.subject)
        if not value:
            return None
        compared = comparable_version(value, rule.compare)
        ok = version_satisfies(compared, rule.spec)
        label = f"{rule.subject} {value}"
    if ok is None:
        return Finding("degraded", f"cannot compare {label} with {rule.spec} ({rule.source})")
    if ok:
        return Finding("ready", f"{label} meets {rule.spec} ({rule.source})", None, True)
    fix = rule.fix or f'pip install "{rule.subject}{rule.spec}"'
    return Finding(rule.severity, f"{label}: {rule.why} [{rule.source}]", fix)


def _missing_findings(backend, ctx):
    findings = []
    for group in backend.needs:
        present = [d for d in group if d in ctx.versions]
        if not present:
            reason = f"{' or '.join(group)} not installed"
            findings.append(Finding(NOT_INSTALLED, reason, backend.install))
        for dist in present:
            pkg = ctx.facts["packages"][dist]
            if pkg.get("broken"):
                reason = f"{dist}: broken metadata (no Version)"
                findings.append(Finding(UNAVAILABLE, reason, f"reinstall {dist}"))
            outcome = pkg.get("import") or {}
            if outcome.get("status") in ("error", "timeout", "crashed"):
                detail = outcome.get("detail") or outcome["status"]
                reason = f"import {dist} {outcome['status']}: {detail}"
                findings.append(Finding(UNAVAILABLE, reason, _import_fix(dist, detail)))
    return findings


def _import_fix(dist, detail):
    if "libcudart" in detail or "libcuda" in detail or "undefined symbol" in detail:
        return f"reinstall {dist} built for the installed torch/CUDA (the binary does not match)"
    module = next((d.module for d in DISTS if d.name == dist and d.module), dist)
    return f'run python -c "import {module}" to see the full error, then reinstall {dist}'


def _hardware_findings(backend, ctx):
    kind, count = ctx.kind, len(ctx.devices)
    if kind not in backend.ready_on + backend.degraded_on:
        reason = f"needs a {'/'.join(backend.ready_on)} accelerator; this machine: {kind}"
        return [Finding(UNAVAILABLE, reason, _no_gpu_step(backend))]
    findings = []
    if kind in backend.degraded_on:
        reason = f"runs on {kind} with limits (fully supported on {'/'.join(backend.ready_on)})"
        findings.append(Finding(DEGRADED, reason))
    hidden = (ctx.facts.get("accelerators") or {}).get("physical_device_count")
    if kind != "cpu" and backend.min_devices and count == 0 and hidden:
        reason = "no GPU visible (CUDA_VISIBLE_DEVICES hides them all)"
        return findings + [Finding(UNAVAILABLE, reason, "unset or fix CUDA_VISIBLE_DEVICES")]
    if kind != "cpu" and 0 < count < backend.min_devices:
        # One device cannot split a sequence; it can still run FSDP/DeepSpeed (offload).
        severity = UNAVAILABLE if backend.name in SEQUENCE_SPLITTING else DEGRADED
        reason = f"{count} GPU visible; {backend.name} needs {backend.min_devices}+ to pay off"
        findings.append(Finding(severity, reason, "run on a machine with more GPUs"))
    if backend.name in NEEDS_GPU_TORCH:
        findings += _torch_build_findings(ctx)
    return findings


def _no_gpu_step(backend):
    if backend.name == "flash_attn":
        return 'keep attn_implementation="sdpa"'
    if backend.name == "bf16":
        return "train in fp32 or fp16"
    return f"run on a machine with a {'/'.join(backend.ready_on)} GPU"


def _torch_build_findings(ctx):
    build = ctx.facts.get("torch_build") or {}
    acc = ctx.facts.get("accelerators") or {}
    if "torch" not in ctx.versions or ctx.kind not in ("cuda", "rocm"):
        return []
    variant, version = build.get("variant"), build.get("version")
    if ctx.kind == "cuda" and variant != "cuda":
        reason = f"torch {version} is a {variant} build: it cannot use the NVIDIA GPUs"
        fix = "install a CUDA build of torch (pip install torch --index-url https://download.pytorch.org/whl/cu128)"
        return [Finding(UNAVAILABLE, reason, fix)]
    if ctx.kind == "rocm" and variant not in ("rocm", None):
        reason = f"torch {version} is a {variant} build: it cannot use the AMD GPUs"
        return [Finding(UNAVAILABLE, reason, "install a ROCm build of torch")]
    torch_cuda = release_tuple(build.get("cuda"))
    driver_cuda = release_tuple(acc.get("cuda_driver_version"))
    if ctx.kind == "cuda" and torch_cuda and driver_cuda and torch_cuda[:1] > driver_cuda[:1]:
        reason = (
            f"torch is built for CUDA {build.get('cuda')} but the driver supports "
            f"CUDA {acc.get('cuda_driver_version')}"
        )
        fix = "upgrade the NVIDIA driver or install a torch built for an older CUDA"
        return [Finding(UNAVAILABLE, reason, fix)]
    return []


def _requires_findings(backend, ctx):
    """Pins a backend declares on the installed stack (e.g. vLLM's exact torch)."""
    findings = []
    for dist in (d for group in backend.needs for d in group):
        for req in (ctx.facts["packages"].get(dist) or {}).get("requires") or []:
            name, spec, have = req["name"], req["specifier"], ctx.versions.get(req["name"])
            if req.get("extra") or not spec or not have:
                continue
            if version_satisfies(comparable_version(have), spec) is False:
                # An exact pin (vLLM's torch==) means a compiled ABI: a mismatch breaks imports.
                severity = UNAVAILABLE if spec.startswith("==") else DEGRADED
                reason = (
                    f"{dist} {ctx.versions[dist]} requires {name}{spec}, installed {name} {have}"
                )
                fix = f"install {name}{spec} or a matching {dist}"
                findings.append(Finding(severity, reason, fix))
    return findings


def _special_findings(backend, ctx):
    name = backend.name
    if name == "vllm":
        return _vllm_findings(ctx)
    if name == "bf16":
        return _bf16_findings(ctx)
    if name == "nccl":
        return _nccl_findings(ctx)
    sm80 = ctx.min_cc is None or ctx.min_cc >= (8, 0)
    if name == "flash_attn" and sm80 and "kernels" in ctx.versions:
        return [
            Finding(READY, 'kernels can also serve "kernels-community/flash-attn2" (Hub kernel)')
        ]
    if name in SEQUENCE_SPLITTING:
        return [Finding(READY, "TRL 1.16.0: SFT only (GRPO/RLOO/Distillation reject cp/sp > 1)")]
    return []


def _vllm_findings(ctx):
    findings = []
    if "vllm" in ctx.versions:
        findings += [Finding(READY, note) for note in ctx.line_notes if note.startswith("trl ")]
    server = ctx.facts.get("vllm_server")
    return findings + (_vllm_server_findings(server) if server else [])


def _vllm_server_findings(server):
    url, health = server.get("url"), server.get("health")
    if health is None:
        reason = f"vLLM server {url} unreachable: {server.get('error')}"
        return [
            Finding(DEGRADED, reason, "start it: VLLM_SERVER_DEV_MODE=1 vllm serve <model> ...")
        ]
    if health != 200:
        reason = f"vLLM server {url} /health answered {health}"
        return [Finding(DEGRADED, reason, "wait for the server to finish loading")]
    if not server.get("dev_mode"):
        reason = (
            f"vLLM server {url} has no /server_info (status {server.get('server_info_status')}): "
            "dev mode is off, TRL cannot sync weights"
        )
        return [
            Finding(DEGRADED, reason, "restart it with VLLM_SERVER_DEV_MODE=1 in its environment")
        ]
    if server.get("weight_transfer_config") is None:
        reason = f"vLLM server {url} has no weight_transfer_config: TRL cannot sync weights"
        fix = """restart it with --weight-transfer-config '{"backend": "nccl"}'"""
        return [Finding(DEGRADED, reason, fix)]
    findings = [Finding(READY, f"vLLM server {url} is up, dev mode on, weight transfer configured")]
    mode = server.get("logprobs_mode")
    if mode and mode != "processed_logprobs":
        reason = f"server runs --logprobs-mode {mode}; GRPO's importance sampling expects processed_logprobs"
        findings.append(
            Finding(DEGRADED, reason, "restart it with --logprobs-mode processed_logprobs")
        )
    return findings


def _bf16_findings(ctx):
    if ctx.kind == "mps":
        mac = release_tuple((ctx.facts.get("platform") or {}).get("mac_version"))
        if mac and mac < (14,):
            reason = f"MPS bf16 needs macOS 14+ (this is {'.'.join(map(str, mac))})"
            return [Finding(UNAVAILABLE, reason, "use fp32, or upgrade macOS")]
        return [Finding(READY, "MPS supports bf16 on macOS 14+ (transformers checks the version)")]
    if ctx.kind == "cpu":
        reason = "no accelerator: bf16 only with use_cpu=True (slow)"
        return [Finding(DEGRADED, reason, "set use_cpu=True, or bf16=False")]
    if ctx.min_cc is not None and ctx.min_cc < (8, 0):
        reason = (
            "torch accepts bf16 by emulation, so TRL's default bf16=True passes but runs slowly"
        )
        return [Finding(DEGRADED, reason, "set fp16=True, bf16=False")]
    return []


def _nccl_findings(ctx):
    packages = ctx.facts.get("packages", {})
    libs = [
        f"{n} {packages[n]['version']}"
        for n in ("nvidia-nccl-cu12", "nvidia-nccl-cu13")
        if packages.get(n, {}).get("installed")
    ]
    findings = [Finding(READY, f"NCCL library: {', '.join(libs)}")] if libs else []
    if (ctx.facts.get("platform") or {}).get("system") == "Windows":
        reason, fix = "torch has no NCCL on Windows", "use Linux (or WSL2) for multi-GPU training"
        findings.append(Finding(UNAVAILABLE, reason, fix))
    if any(d.get("mig_enabled") for d in ctx.devices):
        reason = "MIG slice(s) visible: NCCL cannot communicate between MIG instances"
        fix = "use one process per MIG slice, or whole GPUs for multi-GPU training"
        findings.append(Finding(DEGRADED, reason, fix))
    if len(ctx.devices) > 1 and ctx.kind == "cuda" and not _any_nvlink(ctx):
        findings.append(Finding(READY, "no NVLink between the visible GPUs: NCCL uses PCIe/host"))
    runtime = ctx.facts.get("torch_runtime") or {}
    if runtime.get("distributed_available") and runtime.get("nccl_available") is False:
        reason = "torch.distributed reports NCCL unavailable"
        findings.append(Finding(UNAVAILABLE, reason, "install a CUDA build of torch"))
    return findings


def _any_nvlink(ctx):
    topology = (ctx.facts.get("accelerators") or {}).get("topology") or []
    return any(t.get("nvlink") for t in topology) or any(
        d.get("nvlink_active_links") for d in ctx.devices
    )


def judge_backend(backend, ctx):
    findings = _missing_findings(backend, ctx) + _hardware_findings(backend, ctx)
    findings += [
        f
        for f in (
            check_rule(r, ctx)
            for r in ctx.rules
            if r.backend == backend.name and rule_applies(r, ctx)
        )
        if f
    ]
    findings += _requires_findings(backend, ctx) + _special_findings(backend, ctx)
    status = max((f.status for f in findings), key=STATUSES.index, default="ready")
    problems = [f for f in findings if f.status != "ready"]
    notes = [f for f in findings if f.status == "ready" and not (problems and f.passed_rule)]
    ordered = sorted(problems, key=lambda f: -STATUSES.index(f.status)) + notes
    if status == "ready":
        installed = [
            f"{d} {ctx.versions[d]}" for g in backend.needs for d in g if d in ctx.versions
        ]
        basis = f"{', '.join(installed)} installed" if installed else "no packages needed"
        ordered.insert(0, Finding("ready", f"{basis}; accelerator: {_describe_kind(ctx)}"))
    next_step = next((f.next_step for f in ordered if f.status == status and f.next_step), None)
    if status == "ready":
        next_step = backend.enable
    elif status == "degraded" and next_step is None:
        next_step = f"usable; {backend.enable}"
    return {"status": status, "reasons": _dedupe(f.reason for f in ordered), "next_step": next_step}


def _describe_kind(ctx):
    if ctx.kind == "cpu":
        return "none (CPU only)"
    names = sorted({d.get("name") or "?" for d in ctx.devices})
    return f"{len(ctx.devices)}x {ctx.kind} ({', '.join(names)})" if ctx.devices else ctx.kind


def _dedupe(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def check_accelerate_config(ctx):
    """Problems in the accelerate config given the visible devices and installed stack."""
    values = ((ctx.facts.get("config") or {}).get("values")) or {}
    if not values:
        return []
    problems = []
    dist_type = str(values.get("distributed_type", "NO")).upper()
    nproc = values.get("num_processes")
    machines = values.get("num_machines") or 1
    gpus = len(ctx.devices) if ctx.kind != "cpu" else 0
    if (
        isinstance(nproc, int)
        and machines == 1
        and dist_type in ("MULTI_GPU", "FSDP", "DEEPSPEED")
        and nproc > gpus
    ):
        problems.append(
            f"num_processes: {nproc} but {gpus} GPU(s) visible; pass --num_processes {max(gpus, 1)}"
        )
    if dist_type == "NO" and gpus > 1 and not values.get("use_cpu"):
        problems.append(
            f"distributed_type NO with {gpus} GPUs visible: TRL trainers raise the nn.DataParallel error; "
            "set CUDA_VISIBLE_DEVICES to one GPU or use a multi-GPU config"
        )
    precision = str(values.get("mixed_precision", "no")).lower()
    if precision == "bf16" and ctx.min_cc is not None and ctx.min_cc < (8, 0):
        problems.append(
            "mixed_precision: bf16 on a GPU below compute capability 8.0 (no native bf16); use fp16"
        )
    if precision == "fp8" and ctx.min_cc is not None and ctx.min_cc < (8, 9):
        problems.append("mixed_precision: fp8 needs compute capability 8.9+ (Ada/Hopper)")
    if dist_type == "DEEPSPEED" and "deepspeed" not in ctx.versions:
        problems.append(
            'distributed_type DEEPSPEED but deepspeed is not installed (pip install "trl[deepspeed]")'
        )
    if dist_type == "FSDP":
        problems += _fsdp_config_problems(values.get("fsdp_config") or {}, ctx)
    return problems


def _fsdp_config_problems(fsdp, ctx):
    problems = []
    version = fsdp.get("fsdp_version", 1)
    torch = ctx.versions.get("torch")
    if str(version) == "2" and torch and version_satisfies(torch.split("+")[0], ">=2.6.0") is False:
        problems.append(f"fsdp_version: 2 needs torch>=2.6.0 (installed {torch})")
    if fsdp.get("fsdp_activation_checkpointing") is True:
        problems.append(
            "fsdp_activation_checkpointing: true clashes with TRL's default gradient_checkpointing=True "
            "(transformers raises); set gradient_checkpointing=False in the TRL config"
        )
    if str(version) == "2":
        if fsdp.get("fsdp_forward_prefetch") is True:
            problems.append(
                "fsdp_forward_prefetch: true is rejected with FSDP2 (accelerate raises ValueError); remove it"
            )
        reshard = fsdp.get("fsdp_reshard_after_forward")
        if (
            reshard is not None
            and not isinstance(reshard, bool)
            and str(reshard).lower() not in ("true", "false")
        ):
            problems.append(
                f"fsdp_reshard_after_forward: {reshard} is not a bool; FSDP2 needs true/false"
            )
    return problems


def judge(facts):
    """Verdicts for every backend, config problems and warnings: a pure function of `facts`."""
    ctx = make_context(facts)
    acc = facts.get("accelerators") or {}
    warnings = list(ctx.line_notes) + ((acc.get("visibility") or {}).get("problems") or [])
    return {
        "backends": {b.name: judge_backend(b, ctx) for b in BACKENDS},
        "config_problems": check_accelerate_config(ctx),
        "warnings": warnings + _cross_check_warnings(ctx),
    }


def _cross_check_warnings(ctx):
    """Disagreements between sources: metadata vs module, NVML vs torch."""
    warnings = []
    for name, pkg in (ctx.facts.get("packages") or {}).items():
        reported = (pkg.get("import") or {}).get("module_version")
        if reported and pkg.get("version") and version_key(reported) != version_key(pkg["version"]):
            warnings.append(
                f"{name}: metadata says {pkg['version']} but the module says {reported}"
            )
    runtime = ctx.facts.get("torch_runtime") or {}
    if ctx.kind == "cuda" and ctx.devices and runtime.get("cuda_available") is False:
        warnings.append(
            "NVML lists GPUs but torch.cuda.is_available() is False "
            "(CPU build of torch, driver too old for torch's CUDA, or CUDA_VISIBLE_DEVICES)"
        )
    return warnings


def build_report(facts):
    verdict = judge(facts)
    report = dict(facts)
    report["config"] = dict(facts.get("config") or {}, problems=verdict["config_problems"])
    report["backends"] = verdict["backends"]
    report["warnings"] = _dedupe(list(facts.get("warnings") or []) + verdict["warnings"])
    return report


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------

WIDTH = 96
COLOURS = {"ready": "32", "degraded": "33", "not_installed": "2", "unavailable": "31"}


def render_json(report):
    return json.dumps(report, indent=2, sort_keys=False, default=str)


def _wrap(text, indent, width=WIDTH):
    import textwrap

    return textwrap.fill(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    )


def render_text(report, colour=False):
    lines = [_header(report), ""]
    lines += _accelerator_lines(report)
    lines += _package_lines(report)
    lines += _env_and_config_lines(report)
    lines += ["", "Backends (status, why, next step):"]
    for name, verdict in report["backends"].items():
        status = verdict["status"]
        first = _wrap(verdict["reasons"][0] if verdict["reasons"] else "", " " * 33)
        first = f"  {name:<17}{status:<14}" + first[33:]
        if colour:
            first = first.replace(status, f"\033[{COLOURS[status]}m{status}\033[0m", 1)
        lines.append(first)
        for reason in verdict["reasons"][1:3]:
            lines.append(_wrap(reason, " " * 33))
        if verdict["next_step"]:
            lines.append(_wrap(f"-> {verdict['next_step']}", " " * 33))
    if report.get("warnings"):
        lines += ["", "Warnings:"] + [_wrap(w, "  ! ") for w in report["warnings"]]
    lines += [
        "",
        f"Collected in {report.get('timings', {}).get('total', 0):.2f} s. --json for every fact.",
    ]
    return "\n".join(lines)


def _header(report):
    py, plat = report["python"], report["platform"]
    return f"Python {py['version']} ({py['executable']}) on {plat['platform']}"


def _accelerator_lines(report):
    acc, build = report["accelerators"], report["torch_build"]
    lines = [f"Accelerator: {acc['kind']}"]
    if acc.get("driver_version"):
        lines[0] += f"  driver {acc['driver_version']} (CUDA {acc.get('cuda_driver_version')})"
    if acc.get("error") and acc["kind"] in ("cpu", "cuda"):
        lines.append(_wrap(f"NVML: {acc['error']}", "  "))
    for dev in acc.get("devices") or []:
        mem = dev.get("memory_total_mib")
        free = dev.get("memory_free_mib")
        memory = (
            f"{mem / 1024:.1f} GiB" + (f" ({free / 1024:.1f} free)" if free is not None else "")
            if mem
            else ""
        )
        extra = " MIG" if dev.get("mig_enabled") else ""
        lines.append(
            f"  [{dev.get('index')}] {dev.get('name')}  CC {dev.get('compute_capability')}  {memory}{extra}"
        )
    nvlinked = [t for t in acc.get("topology") or [] if t.get("nvlink")]
    if nvlinked:
        lines.append(f"  NVLink between {len(nvlinked)} GPU pair(s)")
    if build.get("version"):
        lines.append(
            f"torch {build['version']}: {build.get('variant')} build"
            + (f", CUDA {build['cuda']}" if build.get("cuda") else "")
            + (f", HIP {build['hip']}" if build.get("hip") else "")
        )
    runtime = report.get("torch_runtime")
    if runtime:
        lines.append(
            _wrap("torch runtime: " + ", ".join(f"{k}={v}" for k, v in runtime.items()), "  ")
        )
    return lines


def _package_lines(report):
    installed, missing = [], []
    for name, pkg in report["packages"].items():
        if not pkg["installed"]:
            missing.append(name)
            continue
        text = f"{name} {pkg['version']}" + (" (editable)" if pkg.get("editable") else "")
        outcome = pkg.get("import")
        if outcome:
            text += f" [import {outcome['status']} {outcome['seconds']:.1f}s]"
        installed.append(text)
    return [
        "",
        _wrap("Installed: " + ", ".join(installed), ""),
        _wrap("Not installed: " + ", ".join(missing), ""),
    ]


def _env_and_config_lines(report):
    env = report["environment"]
    lines = [""]
    shown = ", ".join(f"{k}={v}" for k, v in env.items() if k != "LD_LIBRARY_PATH")
    lines.append(_wrap(f"Environment: {shown or '(no backend-related variables set)'}", ""))
    config = report["config"]
    if config.get("exists"):
        values = config.get("values") or {}
        summary = ", ".join(
            f"{k}={values[k]}"
            for k in ("distributed_type", "num_processes", "mixed_precision")
            if k in values
        )
        lines.append(
            _wrap(
                f"Accelerate config ({config['source']}): {config['path']}: {summary or config.get('error')}",
                "",
            )
        )
    else:
        lines.append(
            _wrap(f"Accelerate config: none at {config['path']} (accelerate defaults apply)", "")
        )
    lines += [_wrap(p, "  ! ") for p in config.get("problems") or []]
    if report.get("vllm_server"):
        server = report["vllm_server"]
        lines.append(
            _wrap(
                f"vLLM server {server['url']}: health={server.get('health')} dev_mode={server.get('dev_mode')} "
                f"models={server.get('models')} {server.get('error') or ''}",
                "",
            )
        )
    return lines


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------

EPILOG = f"""\
exit status:
  0  report made      1  a --require backend is not ready
  2  bad usage (unknown flag, unreadable config, malformed URL, bad timeout)
  3  internal error (one line on stderr, never a traceback)

statuses: ready | degraded (usable with caveats) | not_installed | unavailable (installing
the package alone will not help: hardware, broken import, wrong build)

--json prints one object (schema_version {SCHEMA_VERSION}; keys are stable, new keys may be added):
  python, platform            interpreter and OS facts
  packages.<dist>             {{installed, version, location, editable?, duplicates?, broken?,
                               requires?, import? = {{status: ok|error|timeout|crashed,
                               detail, seconds}} (with --imports)}}
  torch_build                 {{version, cuda, hip, xpu, variant}} from torch/version.py
  accelerators                {{kind: cuda|rocm|mps|xpu|npu|cpu, driver_version,
                               cuda_driver_version, devices: [{{index, name, uuid,
                               memory_total_mib, memory_used_mib, memory_free_mib,
                               compute_capability, mig_enabled, processes}}], topology, error}}
  environment                 backend-related variables that are set (secrets redacted)
  config                      accelerate config {{path, source, exists, values, problems}}
  torch_runtime               (--imports) torch's own view, with PYTORCH_NVML_BASED_CUDA_CHECK=1
  vllm_server                 (--vllm-url) health, models, dev_mode, weight_transfer_config
  backends.<name>             {{status, reasons: [..], next_step}} for each backend:
                               {", ".join(BACKEND_NAMES[:7])},
                               {", ".join(BACKEND_NAMES[7:])}
  warnings, timings
"""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        hint = "see --help"
        if "unrecognized arguments" in message:
            hint = "expected: --json --imports --timeout S --vllm-url URL --require NAMES --accelerate-config PATH"
        sys.stderr.write(f"{PROG}: error: {message} ({hint})\n")
        sys.exit(EXIT_USAGE)


def _timeout(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds as a number, got {text!r}") from None
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"expected 0 < seconds <= 600, got {text!r}")
    return value


def _url(text):
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(f"expected an http(s)://host[:port] URL, got {text!r}")
    return text


def _config_path(text):
    if not os.path.isfile(text) or not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(
            f"expected a readable accelerate config file, got {text!r}"
        )
    return text


def _require(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKEND_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown backend {', '.join(unknown) or repr(text)}; expected some of {','.join(BACKEND_NAMES)}"
        )
    return names


def build_parser():
    parser = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--imports",
        action="store_true",
        help="also import each installed package in its own subprocess (parallel, each bounded "
        "by --timeout); imports may initialise CUDA in those children, never in this process",
    )
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"limit for each probe (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--vllm-url",
        type=_url,
        metavar="URL",
        help="read-only probe of a running vLLM server (GET /health, /v1/models, /server_info)",
    )
    parser.add_argument(
        "--require",
        type=_require,
        metavar="NAME[,NAME...]",
        help="exit 1 unless each named backend is ready",
    )
    parser.add_argument(
        "--accelerate-config",
        type=_config_path,
        metavar="PATH",
        help="accelerate config to check (default: $HF_HOME/accelerate/default_config.yaml)",
    )
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    report = build_report(collect_facts(args))
    if args.json:
        print(render_json(report))
    else:
        colour = (
            sys.stdout.isatty()
            and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb"
        )
        print(render_text(report, colour=colour))
    unmet = [n for n in args.require or [] if report["backends"][n]["status"] != "ready"]
    if unmet:
        detail = "; ".join(f"{n} is {report['backends'][n]['status']}" for n in unmet)
        sys.stderr.write(f"{PROG}: required backend not ready: {detail}\n")
        return EXIT_REQUIRE_UNMET
    return EXIT_OK


def entry_point():
    try:
        code = main()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        code = 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) left; stop quietly, and keep Python's exit flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    except BaseException as exc:
        sys.stderr.write(
            f"{PROG}: internal error: {type(exc).__name__}: {exc}".splitlines()[0] + "\n"
        )
        code = EXIT_INTERNAL
    sys.exit(code)


if __name__ == "__main__":
    entry_point()
