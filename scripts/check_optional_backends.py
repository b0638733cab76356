#!/usr/bin/env python3
"""Report which optional TRL scaling backends this machine can use, and why not.

Reads package metadata, torch's build file, NVML (in a time-limited subprocess) and the
accelerate config without importing torch or any backend, then judges each backend
(vLLM, DeepSpeed, FSDP2, context/sequence parallelism, PEFT, QLoRA, Liger, Unsloth,
Hub kernels, FlashAttention, bf16, NCCL) against the rules of the installed TRL release.

Standalone: Python 3.9+, standard library only; pyyaml and nvidia-ml-py are used when
present. Never starts servers, trains, downloads, writes files or allocates GPU memory.

Layout: what is known (RULES, BACKENDS), then collect (facts only), judge (a pure function
of the facts), render (text or JSON), and the command line.
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


# ======================================================================================
# The rules: one table. Each row cites the release and file it was read from.
# ======================================================================================


class Rule(NamedTuple):
    backend: str
    subject: str  # a distribution, or "compute_capability" (of the lowest visible CUDA GPU)
    spec: str  # what the subject must satisfy
    severity: str  # the backend's status when it does not
    why: str
    source: str
    when: tuple | None = None  # (dist, "major.minor"): only under that release line
    only_if: tuple | None = None  # (dist, specifier): only when that dist matches
    compare: str = (
        "public"  # which form of the installed version to compare, see comparable_version()
    )
    fix: str | None = None  # next step when violated; default: pip install -U "<subject><spec>"


TRL_1_16, TRANSFORMERS_5_24 = ("trl", "1.16"), ("transformers", "5.24")
LIGER_DISTS = ("liger-kernel", "liger-kernel-nightly")

# The vLLM window of each TRL release line, read from that tag's trl/import_utils.py
# (is_vllm_available warns outside it). The installed TRL picks the row; a newer TRL's own
# METADATA pin is used when this table has no row for it.
VLLM_WINDOWS = {
    "0.24": "==0.10.2", "0.25": "==0.10.2", "0.26": ">=0.10.2,<=0.11.2",
    "0.27": ">=0.10.2,<=0.12.0", "0.28": ">=0.10.2,<=0.12.0", "0.29": ">=0.10.2,<=0.12.0",
    "1.0": ">=0.10.2,<=0.17.1", "1.1": ">=0.11.0,<=0.17.1", "1.2": ">=0.11.0,<=0.18.0",
    "1.3": ">=0.12.0,<=0.18.0", "1.4": ">=0.12.0,<=0.18.0", "1.5": ">=0.12.0,<=0.18.0",
    "1.6": ">=0.12.0,<=0.19.0", "1.7": ">=0.14.0,<=0.23.0", "1.8": ">=0.16.0,<=0.23.0",
    "1.9": ">=0.17.0,<=0.25.1", "1.16": ">=0.22.0,<=0.31.0",
}  # fmt: skip


def vllm_window(trl_line, spec, source=None):
    # Since TRL 1.9 the check compares Version(v).base_version, so 0.31.0+cu130 is inside
    # <=0.31.0; before, the local tag made it sort above the upper bound.
    compare = "base" if tuple(map(int, trl_line.split("."))) >= (1, 9) else "full"
    return Rule(
        "vllm", "vllm", spec, DEGRADED,
        f"TRL {trl_line} supports vLLM {spec} (it warns outside this window)",
        source or f"TRL {trl_line}.0 trl/import_utils.py is_vllm_available",
        when=("trl", trl_line), compare=compare, fix=f'pip install "vllm{spec}"',
    )  # fmt: skip


def trl_extra(backend, dist, spec, extra):
    """A pin from TRL 1.16.0's extras: older versions still import, so a miss is 'degraded'."""
    why = f'TRL 1.16.0\'s "{extra}" extra requires {dist}{spec}'
    source = f"trl-1.16.0 METADATA, extra '{extra}'"
    return Rule(backend, dist, spec, DEGRADED, why, source, when=TRL_1_16)


RULES = (
    *(vllm_window(line, spec) for line, spec in VLLM_WINDOWS.items()),
    trl_extra("deepspeed", "deepspeed", ">=0.18.6", "deepspeed"),
    trl_extra("deepspeed", "transformers", "!=5.1.0", "deepspeed"),
    trl_extra("ulysses", "deepspeed", ">=0.18.6", "deepspeed"),
    trl_extra("peft", "peft", ">=0.13.0", "peft"),
    trl_extra("qlora", "peft", ">=0.13.0", "peft"),
    *(trl_extra("liger", dist, ">=0.8.2", "liger") for dist in LIGER_DISTS),
    # Hard gates: the library raises below these.
    *(Rule("liger", dist, ">=0.3.0", UNAVAILABLE,
           "transformers rejects use_liger_kernel=True without liger-kernel>=0.3.0",
           "transformers 5.24.0 utils/import_utils.py is_liger_kernel_available",
           when=TRANSFORMERS_5_24) for dist in LIGER_DISTS),
    Rule("qlora", "bitsandbytes", ">=0.46.1", UNAVAILABLE,
         "transformers 5.24 refuses 4-bit loading below bitsandbytes 0.46.1 "
         "(stricter than TRL's \"quantization\" extra, >=0.45.1)",
         "transformers 5.24.0 utils/import_utils.py BITSANDBYTES_MIN_VERSION",
         when=TRANSFORMERS_5_24),
    Rule("fsdp2", "torch", ">=2.6.0", UNAVAILABLE, "accelerate's FSDP2 requires torch>=2.6.0",
         "accelerate 1.15.0 utils/constants.py FSDP2_PYTORCH_VERSION"),
    Rule("context_parallel", "torch", ">=2.6.0", UNAVAILABLE,
         "accelerate's context parallelism requires torch>=2.6.0",
         "accelerate 1.15.0 utils/constants.py BETA_CP_AVAILABLE_PYTORCH_VERSION"),
    Rule("ulysses", "deepspeed", ">=0.18.2", UNAVAILABLE,
         "accelerate raises for DeepSpeed sequence parallelism (ALST/Ulysses) below 0.18.2",
         "accelerate 1.15.0 accelerator.py BETA_SP_AVAILABLE_DEEPSPEED_VERSION"),
    Rule("ulysses", "accelerate", ">=1.12.0", UNAVAILABLE,
         "TRL's SFTTrainer handles sequence parallelism only from accelerate 1.12.0",
         "TRL 1.16.0 trl/trainer/sft_trainer.py", when=TRL_1_16),
    Rule("kernels", "kernels", ">=0.18.2,<0.19.0", UNAVAILABLE,
         "transformers 5.24 raises for use_kernels=True outside kernels 0.18.2 <= v < 0.19.0",
         "transformers 5.24.0 utils/import_utils.py KERNELS_MIN_VERSION/KERNELS_MAX_VERSION",
         when=TRANSFORMERS_5_24),
    Rule("kernels", "transformers", "!=5.2.*,!=5.3.*", UNAVAILABLE,
         "TRL 1.16.0 raises for use_kernels=True on transformers 5.2.x/5.3.x",
         "TRL 1.16.0 trl/trainer/utils.py", when=TRL_1_16,
         fix='pip install -U "transformers>=5.4.0"'),
    Rule("flash_attn", "flash-attn", ">=2.3.3", UNAVAILABLE,
         "transformers treats flash-attn below 2.3.3 as unavailable (flash_attention_2 raises)",
         "transformers 5.24.0 utils/import_utils.py is_flash_attn_2_available",
         when=TRANSFORMERS_5_24),
    # Compute capability gates (lowest visible CUDA GPU).
    Rule("bf16", "compute_capability", ">=8.0", DEGRADED,
         "torch only emulates bf16 there, so TRL's default bf16=True passes the check but "
         "runs slowly",
         "torch 2.13 torch/cuda/__init__.py is_bf16_supported(including_emulation=True)",
         fix="set fp16=True, bf16=False"),
    Rule("flash_attn", "compute_capability", ">=8.0", UNAVAILABLE,
         "FlashAttention-2 needs compute capability 8.0+ (Ampere or newer)",
         "flash-attention README: FA2 supports Ampere, Ada, Hopper; Turing only in FA 1.x",
         fix='keep attn_implementation="sdpa"'),
    Rule("flash_attn", "compute_capability", ">=9.0", DEGRADED,
         "FlashAttention-3 is optimized for Hopper; transformers accepts it from 8.0, but "
         "on Ampere FA2 is the proven path",
         "transformers 5.24.0 FA3 cuda_min_major_version=8; Dao-AILab/flash-attention#1481",
         only_if=("flash-attn-3", ">=0"),
         fix='use attn_implementation="flash_attention_2" on pre-Hopper GPUs'),
    Rule("flash_attn", "compute_capability", ">=9.0", UNAVAILABLE,
         "FlashAttention-4 needs compute capability 9.0+ (Hopper or newer)",
         "transformers 5.24.0 modeling_flash_attention_utils.py FA4 cuda_min_major_version=9",
         only_if=("flash-attn-4", ">=0"), fix="pip uninstall flash-attn-4; use FA2 (flash-attn)"),
    Rule("liger", "compute_capability", ">=8.0", UNAVAILABLE,
         "liger-kernel 0.8.1's fused linear cross-entropy backward fails below compute "
         "capability 8.0", "huggingface/trl#6767 (TRL excluded 0.8.1)",
         only_if=("liger-kernel", "==0.8.1"), fix='pip install -U "liger-kernel>=0.8.2"'),
    Rule("vllm", "compute_capability", ">=7.0", UNAVAILABLE,
         "vLLM's CUDA wheels need compute capability 7.0+",
         "vLLM GPU installation docs (v0.7 to v0.14: 'compute capability 7.0 or higher')",
         fix="generate on a GPU with compute capability 7.0+"),
)  # fmt: skip


# ======================================================================================
# The backends: what each needs, where it runs, how to install and enable it
# ======================================================================================


class Backend(NamedTuple):
    name: str
    needs: tuple  # groups of alternative distributions; every group must be installed
    ready_on: tuple  # accelerator kinds where it is fully supported
    degraded_on: tuple  # kinds where it runs with caveats
    min_devices: int  # fewer visible devices than this -> degraded
    enable: str


ALL_KINDS = ("cuda", "rocm", "mps", "xpu", "npu", "cpu")
GPU_KINDS = ("cuda", "rocm")
BACKENDS = (
    Backend("vllm", (("vllm",),), GPU_KINDS, ("xpu", "npu"), 1,
            "GRPOConfig(use_vllm=True); vllm_mode defaults to 'colocate'"),
    Backend("deepspeed", (("deepspeed",), ("accelerate",)), GPU_KINDS, ("xpu", "npu"), 1,
            "trl <cmd> --accelerate_config zero2 (or zero3)"),
    Backend("fsdp2", (("torch",), ("accelerate",)), GPU_KINDS, ("xpu", "npu"), 2,
            "trl <cmd> --accelerate_config fsdp2"),
    Backend("context_parallel", (("torch",), ("accelerate",)), ("cuda",), ("rocm",), 2,
            "FSDP2 config with parallelism_config_cp_size; SFT only, without packing"),
    Backend("ulysses", (("deepspeed",), ("accelerate",)), ("cuda",), ("rocm",), 2,
            "DeepSpeed config with parallelism_config_sp_size and sp_backend deepspeed; SFT only"),
    Backend("peft", (("peft",),), ALL_KINDS, (), 0,
            "pass peft_config=LoraConfig(...) to the trainer (CLI: --use_peft)"),
    Backend("qlora", (("peft",), ("bitsandbytes",)), ("cuda",), ("rocm", "xpu", "npu", "cpu"), 1,
            "CLI: --use_peft --load_in_4bit; in Python, BitsAndBytesConfig(load_in_4bit=True) as "
            "model_init_kwargs quantization_config plus peft_config=LoraConfig(...)"),
    Backend("liger", (LIGER_DISTS,), GPU_KINDS, ("xpu",), 1,
            'use_liger_kernel=True (deprecated in TRL 1.16.0; prefer model_init_kwargs={"use_kernels": True})'),
    Backend("unsloth", (("unsloth",),), ("cuda",), ("rocm", "xpu"), 1,
            "load the model with unsloth's FastLanguageModel before the trainer"),
    Backend("kernels", (("kernels",), ("transformers",)), ("cuda", "rocm", "xpu", "mps"), ("npu", "cpu"), 1,
            'model_init_kwargs={"use_kernels": True}'),
    Backend("flash_attn", (("flash-attn", "flash-attn-3", "flash-attn-4"),), ("cuda",), ("rocm", "npu", "xpu"), 1,
            'model_init_kwargs={"attn_implementation": "flash_attention_2"}'),
    Backend("bf16", (("torch",),), ("cuda", "rocm", "xpu", "npu", "mps"), ("cpu",), 1,
            "bf16=True (the TRL config default)"),
    Backend("nccl", (("torch",),), GPU_KINDS, (), 1, "used automatically by multi-GPU launches"),
)  # fmt: skip
BACKEND_NAMES = tuple(b.name for b in BACKENDS)
# On a GPU box, a torch build that cannot use the GPUs sinks every backend but PEFT.
NEEDS_GPU_TORCH = set(BACKEND_NAMES) - {"peft"}
SEQUENCE_SPLITTING = {"context_parallel", "ulysses"}

# How to install a missing distribution: TRL 1.16.0's extra when one provides it.
TRL_EXTRA_OF = {
    "vllm": "vllm", "deepspeed": "deepspeed", "peft": "peft", "bitsandbytes": "quantization",
    "liger-kernel": "liger", "kernels": "kernels",
}  # fmt: skip
TRL_BRINGS = ("transformers", "accelerate", "torch")  # trl-1.16.0 METADATA, accelerate's
BUILD_FROM_SOURCE = {"flash-attn": "pip install flash-attn --no-build-isolation"}


def install_command(dists):
    """One command line installing `dists`, e.g. 'pip install "trl[peft,quantization]"'."""
    extras = sorted({TRL_EXTRA_OF[d] for d in dists if d in TRL_EXTRA_OF})
    # TRL itself brings transformers and accelerate, and accelerate brings torch.
    rest = [d for d in dists if d not in TRL_EXTRA_OF and not (extras and d in TRL_BRINGS)]
    plain = [d for d in rest if d not in BUILD_FROM_SOURCE]
    commands = [f'pip install "trl[{",".join(extras)}]"'] if extras else []
    commands += [f"pip install {' '.join(plain)}"] if plain else []
    commands += [BUILD_FROM_SOURCE[d] for d in rest if d in BUILD_FROM_SOURCE]
    return " && ".join(commands)


# ======================================================================================
# Collect: facts about this machine (nothing here judges them)
# ======================================================================================


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
# --imports starts the slowest imports first, so the wall time approaches
# max(slowest, sum / cores) instead of ending on a heavy straggler. Packages that import
# torch and more come first, then torch (its probe also reads the runtime), then the rest.
IMPORT_FIRST = (
    "unsloth", "vllm", "peft", "deepspeed", "liger-kernel", "liger-kernel-nightly",
    "bitsandbytes", "flash-attn", "flash-attn-3", "flash-attn-4", "xformers", "kernels",
    "torch", "accelerate", "datasets", "transformers",
)  # fmt: skip
IMPORT_RANK = {name: rank for rank, name in enumerate(IMPORT_FIRST)}

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
# Facts: packages (metadata only, never imported)
# --------------------------------------------------------------------------------------


def normalize_name(name):
    return re.sub(r"[-_.]+", "-", name).lower()


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


# Every child sees exactly our sys.path (a '' entry or PYTHONPATH could differ) and prints
# one marked JSON line; anything else it prints is ignored.
CHILD_PRELUDE = f"import json, sys\nsys.path[:] = json.loads(sys.argv[1])\nMARK = {RESULT_MARK!r}\n"


def run_child(code, args, timeout, extra_env=None):
    """Run `python -c code` and return (status, result dict or detail str, seconds)."""
    cmd = [sys.executable]
    if sys.flags.no_site:
        cmd.append("-S")
    cmd += ["-c", CHILD_PRELUDE + code, json.dumps(sys.path), *args]
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

# Imports the module named in argv[2]; for torch also reports its runtime view, so torch
# is imported once. PYTORCH_NVML_BASED_CUDA_CHECK=1 keeps is_available() from creating a
# CUDA context.
IMPORT_PROBE = r"""
import importlib, traceback
def last_line(e):
    return traceback.format_exception_only(type(e), e)[-1].strip()
def torch_runtime(torch):
    dist = importlib.import_module("torch.distributed")
    info = {"version": torch.__version__, "cuda_build": torch.version.cuda,
            "hip_build": torch.version.hip, "cuda_available": torch.cuda.is_available(),
            "device_count": torch.cuda.device_count(), "distributed_available": dist.is_available()}
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
            info["nccl_version_error"] = last_line(e)
    mps = getattr(torch.backends, "mps", None)
    info["mps_available"] = bool(mps and mps.is_available())
    return info
name = sys.argv[2]
try:
    mod = importlib.import_module(name)
except BaseException as e:
    print(MARK + json.dumps({"error": last_line(e)}))
    sys.exit(0)
out = {"module_version": str(getattr(mod, "__version__", "") or "") or None}
if name == "torch":
    try:
        out["torch_runtime"] = torch_runtime(mod)
    except Exception as e:  # the import worked; a broken runtime query is a fact about it
        out["torch_runtime"] = {"error": last_line(e)}
print(MARK + json.dumps(out))
"""


def import_probe_targets(packages):
    """{dist: module} for installed dists, slowest imports first (see IMPORT_FIRST)."""
    targets = {}
    for dist in sorted(DISTS, key=lambda d: IMPORT_RANK.get(d.name, len(IMPORT_RANK))):
        installed = (packages.get(dist.name) or {}).get("installed")
        if dist.module and installed and dist.module not in targets.values():
            targets[dist.name] = dist.module
    return targets


def run_import_probes(packages, timeout, timings):
    """Import each installed package in its own subprocess, in parallel; annotate `packages`
    and return torch's runtime view (None without torch)."""
    targets = import_probe_targets(packages)
    env = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    # One probe per core, slowest first: oversubscribing made every import slower (2 cores).
    workers = max(1, min(len(targets), os.cpu_count() or 2))
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            name: pool.submit(run_child, IMPORT_PROBE, [module], timeout, env)
            for name, module in targets.items()
        }
        results = {name: f.result() for name, f in futures.items()}
    timings["imports_wall"] = round(time.perf_counter() - start, 3)
    timings["imports_workers"] = workers
    runtime = None
    for name, (status, payload, seconds) in results.items():
        outcome = {"status": status, "detail": None, "seconds": round(seconds, 3)}
        if status != "ok":
            outcome["detail"] = payload
        elif payload.get("error"):
            outcome.update(status="error", detail=payload["error"])
        else:
            outcome["module_version"] = payload.get("module_version")
        packages[name]["import"] = outcome
        if name == "torch":
            failed = {"error": f"import torch {outcome['status']}: {outcome['detail']}"}
            runtime = payload.get("torch_runtime") if outcome["status"] == "ok" else failed
    return runtime


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


# ======================================================================================
# Judge: verdicts as a pure function of the facts dict
# ======================================================================================

# Versions: a small PEP 440 subset, enough to order releases, pre/post/dev and local tags.

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


# --------------------------------------------------------------------------------------
# Judge: findings per backend
# --------------------------------------------------------------------------------------


class Finding(NamedTuple):
    status: str
    reason: str
    next_step: str | None = None
    background: bool = False  # a met rule or a generic caveat: dropped next to a real problem


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
            return vllm_window(line, req["specifier"], source)
    return None


def rule_applies(rule, ctx):
    if rule.when and ctx.lines.get(rule.when[0]) != rule.when[1]:
        return False
    if rule.only_if:
        version = ctx.versions.get(rule.only_if[0])
        return bool(version) and version_satisfies(version, rule.only_if[1]) is not False
    return True


def rule_findings(backend, ctx):
    """One finding per subject of the backend's rules: the worst miss, else the met rules."""
    by_subject = {}
    for rule in ctx.rules:
        if rule.backend == backend.name and rule_applies(rule, ctx):
            by_subject.setdefault(rule.subject, []).append(rule)
    findings = []
    for subject, rules in by_subject.items():
        value, label = _subject_value(subject, ctx)
        if value is None:
            continue
        verdicts = [
            (r, version_satisfies(comparable_version(value, r.compare), r.spec)) for r in rules
        ]
        failed = [r for r, ok in verdicts if ok is False]
        unknown = [r for r, ok in verdicts if ok is None]
        if failed:
            worst = max(failed, key=lambda r: STATUSES.index(r.severity))
            fix = worst.fix or f'pip install -U "{subject}{_tightest(r.spec for r in failed)}"'
            findings.append(Finding(worst.severity, f"{label}: {worst.why} [{worst.source}]", fix))
        elif unknown:
            reason = f"cannot compare {label} with {unknown[0].spec} ({unknown[0].source})"
            findings.append(Finding(DEGRADED, reason))
        else:
            findings += [
                Finding(READY, f"{label} meets {r.spec} ({r.source})", background=True)
                for r in rules
            ]
    return findings


def _subject_value(subject, ctx):
    if subject == "compute_capability":
        if ctx.min_cc is None:
            return None, None
        value = "{}.{}".format(*ctx.min_cc)
        return value, f"lowest visible compute capability {value}"
    value = ctx.versions.get(subject)
    return value, f"{subject} {value}"


def _tightest(specs):
    """'>=0.18.6' from ['>=0.18.2', '>=0.18.6']; other combinations are joined."""
    specs = _dedupe(specs)
    if all(re.fullmatch(r">=[^,]+", s) for s in specs):
        return max(specs, key=lambda s: version_key(s[2:]) or ())
    return ",".join(specs)


def _package_findings(backend, ctx):
    """Missing distributions, broken metadata and (with --imports) failed imports."""
    findings = []
    missing = [group[0] for group in backend.needs if not any(d in ctx.versions for d in group)]
    if missing:
        reason = f"{' and '.join(missing)} not installed"
        findings.append(Finding(NOT_INSTALLED, reason, install_command(missing)))
    for dist in (d for group in backend.needs for d in group if d in ctx.versions):
        pkg = ctx.facts["packages"][dist]
        if pkg.get("broken"):
            reason = f"{dist}: broken metadata (no Version)"
            findings.append(Finding(UNAVAILABLE, reason, f"pip install --force-reinstall {dist}"))
        outcome = pkg.get("import") or {}
        if outcome.get("status") in ("error", "timeout", "crashed"):
            detail = outcome.get("detail") or outcome["status"]
            reason = f"import {dist} {outcome['status']}: {detail}"
            findings.append(Finding(UNAVAILABLE, reason, _import_fix(dist, detail)))
    return findings


def _import_fix(dist, detail):
    if "libcudart" in detail or "libcuda" in detail or "undefined symbol" in detail:
        return f"pip install --force-reinstall --no-cache-dir {dist} (its binary does not match torch/CUDA)"
    module = next((d.module for d in DISTS if d.name == dist and d.module), dist)
    return f'python -c "import {module}" shows the full error; then pip install --force-reinstall {dist}'


def _hardware_findings(backend, ctx):
    kind, count = ctx.kind, len(ctx.devices)
    if kind not in backend.ready_on + backend.degraded_on:
        reason = f"needs a {'/'.join(backend.ready_on)} GPU; this machine: {kind}"
        return [Finding(UNAVAILABLE, reason, _no_gpu_step(backend))]
    findings = []
    if kind in backend.degraded_on:
        reason = f"runs on {kind} with limits (fully supported on {'/'.join(backend.ready_on)})"
        findings.append(Finding(DEGRADED, reason, background=True))
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
    return f"run on a machine with a {'/'.join(backend.ready_on)} GPU"


def _torch_build_findings(ctx):
    build = ctx.facts.get("torch_build") or {}
    acc = ctx.facts.get("accelerators") or {}
    if "torch" not in ctx.versions or ctx.kind not in ("cuda", "rocm"):
        return []
    variant, version = build.get("variant"), build.get("version")
    if ctx.kind == "cuda" and variant != "cuda":
        reason = f"torch {version} is a {variant} build: it cannot use the NVIDIA GPUs"
        cuda = "".join(map(str, release_tuple(acc.get("cuda_driver_version"))[:2])) or "128"
        fix = f"pip install torch --index-url https://download.pytorch.org/whl/cu{cuda} (or a lower cuXYZ)"
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


# TRL 1.16.0's `trl vllm-serve` runs `vllm serve` with VLLM_SERVER_DEV_MODE=1,
# --weight-transfer-config '{"backend": "nccl"}' and --logprobs-mode processed_logprobs.
TRL_VLLM_SERVE = "trl vllm-serve --model <model>"


def _vllm_server_findings(server):
    url, health = server.get("url"), server.get("health")
    if health is None:
        reason = f"vLLM server {url} unreachable: {server.get('error')}"
        return [Finding(DEGRADED, reason, f"start it with {TRL_VLLM_SERVE}")]
    if health != 200:
        reason = f"vLLM server {url} /health answered {health}"
        return [Finding(DEGRADED, reason, "wait for the server to finish loading")]
    if not server.get("dev_mode"):
        status = server.get("server_info_status")
        reason = f"vLLM server {url}: /server_info answered {status}, so dev mode is off and TRL "
        reason += "cannot sync weights"
        fix = f"restart it with {TRL_VLLM_SERVE} (or VLLM_SERVER_DEV_MODE=1 vllm serve ...)"
        return [Finding(DEGRADED, reason, fix)]
    if server.get("weight_transfer_config") is None:
        reason = f"vLLM server {url} has no weight_transfer_config: TRL cannot sync weights"
        fix = f"""restart it with {TRL_VLLM_SERVE} (or --weight-transfer-config '{{"backend": "nccl"}}')"""
        return [Finding(DEGRADED, reason, fix)]
    findings = [Finding(READY, f"vLLM server {url} is up, dev mode on, weight transfer configured")]
    mode = server.get("logprobs_mode")
    if mode and mode != "processed_logprobs":
        reason = f"server runs --logprobs-mode {mode}; TRL's importance sampling correction "
        reason += "expects processed_logprobs (temperature applied)"
        fix = "restart it with --logprobs-mode processed_logprobs"
        findings.append(Finding(DEGRADED, reason, fix))
    return findings


def _bf16_findings(ctx):
    if ctx.kind == "mps":
        mac = release_tuple((ctx.facts.get("platform") or {}).get("mac_version"))
        if mac and mac < (14,):
            reason = f"MPS bf16 needs macOS 14+ (this is {'.'.join(map(str, mac))})"
            return [Finding(UNAVAILABLE, reason, "use fp32, or upgrade macOS")]
        return [Finding(READY, "MPS supports bf16 on macOS 14+ (transformers checks the version)")]
    if ctx.kind == "cpu":
        # transformers 5.24.0 training_args.py: "Your setup doesn't support bf16/gpu."
        reason = "no GPU: TRL's default bf16=True raises ValueError unless use_cpu=True"
        return [Finding(DEGRADED, reason, "set use_cpu=True (slow bf16 on CPU), or bf16=False")]
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
    findings = (
        _package_findings(backend, ctx)
        + _hardware_findings(backend, ctx)
        + rule_findings(backend, ctx)
        + _requires_findings(backend, ctx)
        + _special_findings(backend, ctx)
    )
    status = max((f.status for f in findings), key=STATUSES.index, default=READY)
    real_problem = any(f.status != READY and not f.background for f in findings)
    shown = [f for f in findings if not (real_problem and f.background)]
    ordered = sorted(shown, key=lambda f: -STATUSES.index(f.status))  # stable: notes last
    if status == READY:
        installed = [
            f"{d} {ctx.versions[d]}" for g in backend.needs for d in g if d in ctx.versions
        ]
        basis = f"{', '.join(installed)} installed" if installed else "no packages needed"
        ordered.insert(0, Finding(READY, basis))
        next_step = backend.enable
    else:
        steps = (f.next_step for f in ordered if f.status == status and f.next_step)
        next_step = next(steps, f"usable; {backend.enable}" if status == DEGRADED else None)
    return {"status": status, "reasons": _dedupe(f.reason for f in ordered), "next_step": next_step}


def _dedupe(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


# --------------------------------------------------------------------------------------
# Judge: the accelerate config, cross-checks, the report
# --------------------------------------------------------------------------------------


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


# ======================================================================================
# Render: text for people, JSON for programs (JSON keeps every fact; text picks)
# ======================================================================================

COLOURS = {"ready": "32", "degraded": "33", "not_installed": "2", "unavailable": "31"}
NAME_COL, STATUS_COL = 18, 14
REASON_INDENT = " " * (2 + NAME_COL + STATUS_COL)


def render_json(report):
    return json.dumps(report, indent=2, default=str)


def text_width():
    import shutil

    return max(72, min(100, shutil.get_terminal_size((88, 24)).columns))


def _wrap(text, indent, width):
    """Fill to `width`; a no-break space (\\xa0) keeps "name version" on one line."""
    import textwrap

    filled = textwrap.fill(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return filled.replace("\xa0", " ")


def render_text(report, colour=False, width=88):
    lines = [_header(report), ""]
    lines += _accelerator_lines(report, width)
    lines += _package_lines(report, width)
    lines += _env_and_config_lines(report, width)
    lines += ["", "Backends:"] + _backend_lines(report, colour, width)
    if report.get("warnings"):
        lines += ["", "Warnings:"] + [_wrap(w, "  ! ", width) for w in report["warnings"]]
    total = report.get("timings", {}).get("total", 0)
    lines += ["", f"Collected in {total:.2f} s; --json has every fact and every reason."]
    return "\n".join(lines)


def _header(report):
    py, plat = report["python"], report["platform"]
    return f"Python {py['version']} ({py['executable']}) on {plat['platform']}"


def _accelerator_lines(report, width):
    acc, build = report["accelerators"], report["torch_build"]
    lines = [f"Accelerator: {acc['kind']}"]
    if acc.get("driver_version"):
        lines[0] += f", driver {acc['driver_version']} (CUDA {acc.get('cuda_driver_version')})"
    if acc.get("error") and acc["kind"] in ("cpu", "cuda"):
        lines.append(_wrap(f"NVML: {acc['error']}", "  ", width))
    lines += [_wrap(text, "  ", width) for text in _device_groups(acc.get("devices") or [])]
    nvlinked = [t for t in acc.get("topology") or [] if t.get("nvlink")]
    if nvlinked:
        lines.append(f"  NVLink between {len(nvlinked)} GPU pair(s)")
    if build.get("version"):
        text = f"torch {build['version']}: {build.get('variant')} build"
        text += f", CUDA {build['cuda']}" if build.get("cuda") else ""
        text += f", HIP {build['hip']}" if build.get("hip") else ""
        lines.append(text)
    runtime = report.get("torch_runtime")
    if runtime:
        skip = ("version", "cuda_build", "hip_build")  # already on the torch line
        shown = ", ".join(f"{k}={v}" for k, v in runtime.items() if k not in skip)
        lines.append(_wrap(f"torch runtime: {shown}", "  ", width))
    return lines


def _device_groups(devices):
    """One line per model: '8x NVIDIA H100 80GB HBM3 [0-7], CC 9.0, 79.6 GiB, min free 79.6'."""
    groups = {}
    for dev in devices:
        key = (dev.get("name"), dev.get("compute_capability"), dev.get("memory_total_mib"))
        groups.setdefault(key, []).append(dev)
    for (name, cc, total), devs in groups.items():
        indices = ",".join(str(d.get("index")) for d in devs)
        text = f"{len(devs)}x {name} [GPU {indices}]"
        if cc:
            text += f", CC {cc}"
        if total:
            text += f", {total / 1024:.1f} GiB"
        free = [d["memory_free_mib"] for d in devs if d.get("memory_free_mib") is not None]
        if free:
            text += f", {'min ' if len(devs) > 1 else ''}free {min(free) / 1024:.1f} GiB"
        if any(d.get("mig_enabled") for d in devs):
            text += ", MIG on"
        yield text


def relevant_dists(kind):
    """Distributions a backend usable on this accelerator kind needs (first of alternatives)."""
    usable = [b for b in BACKENDS if kind in b.ready_on + b.degraded_on]
    return {group[0] for b in usable for group in b.needs}


def _package_lines(report, width):
    installed, missing, hidden = [], [], 0
    relevant = relevant_dists(report["accelerators"]["kind"])
    for name, pkg in report["packages"].items():
        if pkg["installed"]:
            text = f"{name}\xa0{pkg['version']}" + (" (editable)" if pkg.get("editable") else "")
            outcome = pkg.get("import")
            if outcome:
                done = "" if outcome["status"] == "ok" else f"import {outcome['status']}, "
                text += f"\xa0({done}{outcome['seconds']:.1f}\xa0s)".replace(" ", "\xa0")
            installed.append(text)
        elif name in relevant:
            missing.append(name)
        else:
            hidden += 1
    probed = any(pkg.get("import") for pkg in report["packages"].values())
    title = "Installed (import time): " if probed else "Installed: "
    lines = ["", _wrap(title + ", ".join(installed), "", width)]
    if missing:
        lines.append(_wrap("Missing for backends usable here: " + ", ".join(missing), "", width))
    if hidden:
        lines.append(f"({hidden} other optional packages not installed; see --json)")
    return lines


def _backend_lines(report, colour, width):
    kind = report["accelerators"]["kind"]
    need_gpu = [b.name for b in BACKENDS if kind not in b.ready_on + b.degraded_on]
    if report.get("vllm_server"):
        need_gpu = [n for n in need_gpu if n != "vllm"]  # keep the server's findings in view
    lines = []
    for name, verdict in report["backends"].items():
        if name not in need_gpu:
            lines += _verdict_lines(name, verdict, colour, width)
    if need_gpu:
        text = f"Need a GPU (this machine: {kind}), so unavailable: {', '.join(need_gpu)}"
        lines.append(_wrap(text, "  ", width))
    return lines


def _verdict_lines(name, verdict, colour, width):
    status, reasons = verdict["status"], verdict["reasons"] or [""]
    label = (
        f"\033[{COLOURS[status]}m{status:<{STATUS_COL}}\033[0m"
        if colour
        else f"{status:<{STATUS_COL}}"
    )
    # Ready: the installed versions say enough. Otherwise the worst reasons, without the
    # [source] citations (--json keeps them).
    shown = [re.sub(r" \[[^\]]*\]$", "", r) for r in reasons[: 1 if status == READY else 3]]
    first = _wrap(shown[0], REASON_INDENT, width)[len(REASON_INDENT) :]
    lines = [f"  {name:<{NAME_COL}}{label}{first}"]
    lines += [_wrap(reason, REASON_INDENT, width) for reason in shown[1:]]
    if verdict["next_step"]:
        lines.append(_wrap(f"-> {verdict['next_step']}", REASON_INDENT, width))
    return lines


def _env_and_config_lines(report, width):
    env = report["environment"]
    shown = ", ".join(f"{k}={v}" for k, v in env.items() if k != "LD_LIBRARY_PATH")
    texts = [f"Environment: {shown or '(no backend-related variables set)'}"]
    config = report["config"]
    if config.get("exists"):
        values = config.get("values") or {}
        keys = ("distributed_type", "num_processes", "mixed_precision")
        summary = ", ".join(f"{k}={values[k]}" for k in keys if k in values)
        texts.append(f"Accelerate config ({config['source']}): {config['path']}: ")
        texts[-1] += summary or config.get("error") or "(empty)"
    else:
        texts.append(f"Accelerate config: none at {config['path']} (accelerate defaults apply)")
    lines = [""] + [_wrap(text, "", width) for text in texts]
    lines += [_wrap(p, "  ! ", width) for p in config.get("problems") or []]
    server = report.get("vllm_server")
    if server:
        text = (
            f"vLLM server {server['url']}: health={server.get('health')}, "
            f"dev_mode={server.get('dev_mode')}, models={server.get('models')}"
        )
        lines.append(
            _wrap(text + (f", {server['error']}" if server.get("error") else ""), "", width)
        )
    return lines


# ======================================================================================
# Command line
# ======================================================================================

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
                               detail, seconds, module_version?}} (with --imports)}}
  torch_build                 {{version, cuda, hip, xpu, variant}} from torch/version.py
  accelerators                {{kind: cuda|rocm|mps|xpu|npu|cpu, driver_version,
                               cuda_driver_version, devices: [{{index, name, uuid,
                               memory_total_mib, memory_used_mib, memory_free_mib,
                               compute_capability, mig_enabled, processes}}], topology, error}}
  environment                 backend-related variables that are set (secrets redacted)
  config                      accelerate config {{path, source, exists, values, problems}}
  torch_runtime               (--imports) torch's own view, with PYTORCH_NVML_BASED_CUDA_CHECK=1
  vllm_server                 (--vllm-url) health, models, dev_mode, weight_transfer_config
  backends.<name>             {{status, reasons: [worst first; a rule's source in [..]],
                               next_step: one command or setting, or null}} for each of:
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
        print(render_text(report, colour=colour, width=text_width()))
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
