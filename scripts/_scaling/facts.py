"""The facts dict every script judges: collected on this machine (`collect_facts`) or loaded from
a file recorded elsewhere (`load_facts`: the check's own --json output, or a recorded fixture).

Collection starts the time-limited NVML child first and scans package metadata while it runs."""

from __future__ import annotations

import json
import os
import platform
import sys
import time

from . import probes
from .accelerators import collect_accelerators
from .environment import collect_environment, default_accelerate_config_path, redact_url_credentials
from .files import ConfigFileError, load_config_file, read_text
from .metadata import DISTS, collect_packages, collect_torch_build

SCHEMA_VERSION = 1
DEFAULT_TIMEOUT_S = 20.0
# Keys a report adds to the facts; a recorded report is re-judged, so they are dropped on load.
JUDGED_KEYS = ("backends",)
MAX_FACTS_BYTES = 50_000_000


class FactsError(Exception):
    """A facts file that cannot be used; the message is one line for the user."""


def collect_facts(
    accelerate_config: str | None = None,
    imports: bool = False,
    vllm_url: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    environ: dict | None = None,
    paths: list | None = None,
) -> dict:
    """Facts of this machine. Never imports a backend in this process."""
    environ = dict(os.environ if environ is None else environ)
    paths = list(sys.path if paths is None else paths)
    start = time.perf_counter()
    timings: dict = {}
    warnings: list = []
    nvml_child = probes.start_nvml(timeout)  # runs while the metadata is scanned
    packages = collect_packages(paths, warnings)
    timings["metadata"] = round(time.perf_counter() - start, 3)
    torch_build = collect_torch_build(packages)
    nvml = _gpu_facts(nvml_child, timeout, timings)
    facts = {
        "schema_version": SCHEMA_VERSION,
        "python": python_facts(),
        "platform": platform_facts(),
        "packages": packages,
        "torch_build": torch_build,
        "accelerators": collect_accelerators(nvml, packages, torch_build, environ),
        "environment": collect_environment(environ),
        "config": collect_config(accelerate_config, environ),
    }
    if imports:
        outcomes, facts["torch_runtime"] = probes.run_import_probes(packages, timeout, timings)
        for name, outcome in outcomes.items():
            packages[name]["import"] = outcome
    if vllm_url:
        server = probes.probe_vllm_server(vllm_url, min(timeout, probes.VLLM_TIMEOUT_S))
        server["url"] = redact_url_credentials(server["url"])
        facts["vllm_server"] = server
    timings["total"] = round(time.perf_counter() - start, 3)
    facts["timings"] = timings
    facts["warnings"] = warnings
    return facts


def _gpu_facts(nvml_child: probes.Child, timeout: float, timings: dict) -> dict:
    nvml, timings["nvml"] = probes.finish_nvml(nvml_child)
    if nvml.get("no_nvml"):  # nvidia-ml-py absent: nvidia-smi, if there is one
        start = time.perf_counter()
        smi = probes.probe_nvidia_smi(timeout)
        timings["nvidia_smi"] = round(time.perf_counter() - start, 3)
        nvml = smi or {"error": "nvidia-ml-py not installed and nvidia-smi not found"}
    return nvml


def python_facts() -> dict:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "no_site": bool(sys.flags.no_site),
    }


def platform_facts() -> dict:
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "mac_version": platform.mac_ver()[0] or None,
    }


def collect_config(path: str | None, environ: dict) -> dict:
    """The accelerate config as a fact: its path, whether it exists, its values or its error."""
    source = "--accelerate-config" if path else "default"
    path = path or default_accelerate_config_path(environ)
    config = {"path": path, "source": source, "exists": os.path.isfile(path), "values": None}
    if not config["exists"]:
        return config
    try:
        values, config["parser"] = load_config_file(path)
    except ConfigFileError as exc:
        config["error"] = str(exc)
        return config
    if isinstance(values, dict):
        config["values"] = values
    else:
        kind = "empty" if values is None else f"a {type(values).__name__}, not a mapping"
        config["error"] = f"{path} is {kind}"
    return config


# --------------------------------------------------------------------------------------
# Recorded facts
# --------------------------------------------------------------------------------------


def load_facts(path: str) -> dict:
    """Facts recorded elsewhere, ready to judge; raises FactsError with one line."""
    text = read_text(path, MAX_FACTS_BYTES + 1) if not os.path.isdir(path) else None
    if text is None:
        raise FactsError(f"cannot read facts file {path}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise FactsError(f"{path} is not JSON ({exc}); record it with --json") from None
    return normalize_facts(data, path)


def normalize_facts(data: object, origin: str = "<facts>") -> dict:
    """A facts dict with every section the judge and the renderers read, of the right type."""
    if not isinstance(data, dict) or not isinstance(data.get("packages"), dict):
        raise FactsError(
            f"{origin} holds no facts (expected the JSON object that "
            "check_optional_backends.py --json prints, with a 'packages' object)"
        )
    facts = {k: v for k, v in data.items() if k not in JUDGED_KEYS}
    sections = {
        "python": {"version": None, "implementation": None, "executable": None},
        "platform": {"system": None, "machine": None, "platform": None, "mac_version": None},
        "torch_build": {"version": None, "cuda": None, "hip": None, "xpu": None},
        "accelerators": {"kind": "cpu", "devices": [], "topology": [], "visibility": {}},
        "environment": {},
        "config": {"path": None, "source": "recorded", "exists": False, "values": None},
        "timings": {},
    }
    for key, default in sections.items():
        value = facts.get(key)
        facts[key] = dict(default, **value) if isinstance(value, dict) else dict(default)
    facts["packages"] = {
        name: pkg if isinstance(pkg, dict) else {"installed": False}
        for name, pkg in facts["packages"].items()
    }
    for dist in DISTS:  # a recording from an older check may lack newer entries
        facts["packages"].setdefault(dist.name, {"installed": False, "version": None})
    facts["config"].pop("problems", None)
    facts["warnings"] = [w for w in facts.get("warnings") or [] if isinstance(w, str)]
    facts["origin"] = {"facts_file": origin}
    return facts


def gpu_memories_mib(facts: dict) -> list:
    """Total memory (MiB) of each GPU the facts say this process sees, where it is known."""
    acc = facts.get("accelerators") or {}
    if acc.get("kind") in ("cpu", "unknown"):
        return []
    devices = [d for d in acc.get("devices") or [] if isinstance(d, dict)]
    return [d["memory_total_mib"] for d in devices if isinstance(d.get("memory_total_mib"), int)]
