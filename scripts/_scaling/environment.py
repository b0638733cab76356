"""Facts from the environment: the variables that steer the backends (secrets redacted) and where
accelerate looks for its default config."""

from __future__ import annotations

import os
import re

ENV_PREFIXES = (
    "NCCL_", "VLLM_", "ACCELERATE_", "TORCH_", "PYTORCH_", "CUDA_", "HF_", "TRANSFORMERS_",
    "DS_", "FSDP_", "PARALLELISM_CONFIG_", "NVIDIA_", "TORCHINDUCTOR_", "TRITON_", "BNB_",
    "KERNELS_",
)  # fmt: skip
ENV_NAMES = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "NODE_RANK", "OMP_NUM_THREADS", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK", "ASCEND_RT_VISIBLE_DEVICES", "TOKENIZERS_PARALLELISM", "XDG_CACHE_HOME",
    "LD_LIBRARY_PATH", "WANDB_MODE",
    # Builds of DeepSpeed ops and flash-attn, bitsandbytes' library search, Hub kernels.
    "MAX_JOBS", "CONDA_PREFIX", "LOCAL_KERNELS",
    # A proxy between the trainer and its vLLM server (TRL's client uses requests) breaks HTTP.
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    "http_proxy", "https_proxy", "all_proxy", "no_proxy",
)  # fmt: skip
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL")
REDACTED = "<redacted>"
# scheme://user:password@host -> scheme://<redacted>@host, anywhere in a value; up to the last
# "@" before the path, since an unquoted password may hold "@" itself.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s]+@")
# user:password@host without a scheme (requests and curl accept a proxy written so), as an item
# of a value (start, or after a comma or space).
_BARE_USERINFO = re.compile(r"(^|[\s,;])(?![a-z][a-z0-9+.-]*://)[^\s,;/]*:[^\s,;/]*@")


def collect_environment(environ: dict) -> dict:
    """The backend-related variables that are set; secrets and URL credentials redacted."""
    picked = {}
    for key in sorted(environ):
        if key.startswith(ENV_PREFIXES) or key in ENV_NAMES:
            picked[key] = redact(key, environ[key])
    return picked


def redact(key: str, value: str) -> str:
    if any(marker in key.upper() for marker in SECRET_MARKERS):
        return REDACTED
    return redact_url_credentials(value)


def redact_url_credentials(text: str) -> str:
    """'http://user:pw@proxy:3128' -> 'http://<redacted>@proxy:3128'; also 'user:pw@proxy:3128'."""
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _BARE_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def default_accelerate_config_path(environ: dict) -> str:
    # accelerate/commands/config/config_args.py: $HF_HOME, else $XDG_CACHE_HOME/huggingface
    cache = environ.get("XDG_CACHE_HOME", "~/.cache")
    hf_home = environ.get("HF_HOME", os.path.join(cache, "huggingface"))
    return os.path.expanduser(os.path.join(hf_home, "accelerate", "default_config.yaml"))
