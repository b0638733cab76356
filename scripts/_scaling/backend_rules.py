"""What is known about each optional backend: the version and hardware rules of the releases this
skill describes (one table, `RULES`, each row citing the release and file it was read from) and
what each backend needs, where it runs and how to enable it (`BACKENDS`).

Nothing here reads the machine; `verdicts.py` applies these tables to collected facts.
"""

from __future__ import annotations

from typing import NamedTuple

STATUSES = ("ready", "degraded", "not_installed", "unavailable")  # in rising severity
READY, DEGRADED, NOT_INSTALLED, UNAVAILABLE = STATUSES


class Rule(NamedTuple):
    """A version or hardware gate: `subject` must satisfy `spec`, else the backend is `severity`."""

    backend: str
    subject: str  # a distribution, or "compute_capability" (of the lowest visible CUDA GPU)
    spec: str  # what the subject must satisfy
    severity: str  # the backend's status when it does not
    why: str
    source: str
    when: tuple | None = None  # (dist, "major.minor"): only under that release line
    only_if: tuple | None = None  # (dist, specifier): only when that dist matches
    compare: str = "public"  # form of the installed version to compare: comparable_version()
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


def vllm_window(trl_line: str, spec: str, source: str | None = None) -> Rule:
    # Since TRL 1.9 the check compares Version(v).base_version, so 0.31.0+cu130 is inside
    # <=0.31.0; before, the local tag made it sort above the upper bound.
    compare = "base" if tuple(map(int, trl_line.split("."))) >= (1, 9) else "full"
    return Rule(
        "vllm", "vllm", spec, DEGRADED,
        f"TRL {trl_line} supports vLLM {spec} (it warns outside this window)",
        source or f"TRL {trl_line}.0 trl/import_utils.py is_vllm_available",
        when=("trl", trl_line), compare=compare, fix=f'pip install "vllm{spec}"',
    )  # fmt: skip


def trl_extra(backend: str, dist: str, spec: str, extra: str) -> Rule:
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


# --------------------------------------------------------------------------------------
# The backends: what each needs, where it runs, how to install and enable it
# --------------------------------------------------------------------------------------


class Backend(NamedTuple):
    """One optional backend: what it needs installed and where it runs."""

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


def install_command(dists: list) -> str:
    """One command line installing `dists`, e.g. 'pip install "trl[peft,quantization]"'."""
    extras = sorted({TRL_EXTRA_OF[d] for d in dists if d in TRL_EXTRA_OF})
    # TRL itself brings transformers and accelerate, and accelerate brings torch.
    rest = [d for d in dists if d not in TRL_EXTRA_OF and not (extras and d in TRL_BRINGS)]
    plain = [d for d in rest if d not in BUILD_FROM_SOURCE]
    commands = [f'pip install "trl[{",".join(extras)}]"'] if extras else []
    commands += [f"pip install {' '.join(plain)}"] if plain else []
    commands += [BUILD_FROM_SOURCE[d] for d in rest if d in BUILD_FROM_SOURCE]
    return " && ".join(commands)
