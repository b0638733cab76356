"""The facts dict every script judges: collected on this machine (`collect_facts`) or loaded from
a file recorded elsewhere (`load_facts`: the check's own --json output, or a recorded fixture).

Collection starts the time-limited NVML child first and scans package metadata while it runs."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from typing import NamedTuple

from . import probes
from .accelerators import collect_accelerators
from .environment import collect_environment, default_accelerate_config_path
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
    # The probes that may hang start first; everything that does not need them is collected
    # while they run.
    gpu_probe = probes.gpu_probe(timeout)
    start = min(start, gpu_probe.start)  # it may have started before this call
    server_probe = vllm_url and probes.VllmProbe(vllm_url, min(timeout, probes.VLLM_TIMEOUT_S))
    packages = collect_packages(paths, warnings)
    timings["metadata"] = round(time.perf_counter() - start, 3)
    facts = {
        "schema_version": SCHEMA_VERSION,
        "python": python_facts(),
        "platform": platform_facts(),
        "host": host_memory(),
        "packages": packages,
        "torch_build": collect_torch_build(packages),
        "accelerators": None,
        "environment": collect_environment(environ),
        "config": collect_config(accelerate_config, environ),
    }
    nvml = gpu_probe.finish(timings)
    facts["accelerators"] = collect_accelerators(nvml, packages, facts["torch_build"], environ)
    if imports:
        outcomes, facts["torch_runtime"] = probes.run_import_probes(packages, timeout, timings)
        for name, outcome in outcomes.items():
            packages[name]["import"] = outcome
    if server_probe:
        facts["vllm_server"] = server_probe.finish()
    timings["total"] = round(time.perf_counter() - start, 3)
    facts["timings"] = timings
    facts["warnings"] = warnings
    return facts


def python_facts() -> dict:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "no_site": bool(sys.flags.no_site),
    }


def host_memory() -> dict:
    """Total and available RAM of this machine in bytes (None where unknown): /proc/meminfo on
    Linux, else sysconf (macOS and other Unix: physical pages x page size; no available figure)."""
    text = read_text("/proc/meminfo", 100_000)
    if text:
        values = {}
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            fields = rest.split()
            if name in ("MemTotal", "MemAvailable") and fields and fields[0].isdigit():
                values[name] = int(fields[0]) * 1024  # reported in kB (KiB)
        if "MemTotal" in values:
            return {
                "total_bytes": values["MemTotal"],
                "available_bytes": values.get("MemAvailable"),
                "source": "/proc/meminfo",
            }
    total = _sysconf_pages("SC_PHYS_PAGES")
    return {"total_bytes": total, "available_bytes": None, "source": "sysconf"}


def _sysconf_pages(name: str) -> int | None:
    try:
        pages, size = os.sysconf(name), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return None
    return pages * size if pages > 0 and size > 0 else None


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
    except RecursionError:
        raise FactsError(f"{path} is not JSON (nested too deeply); record it with --json") from None
    except ValueError as exc:
        raise FactsError(f"{path} is not JSON ({exc}); record it with --json") from None
    return normalize_facts(data, path)


class OrNone(NamedTuple):
    """In FACTS_SHAPE: null, or a value of this shape."""

    shape: object


TEXT, NUMBER, FLAG = OrNone(str), OrNone((int, float)), OrNone(bool)
PACKAGE = {
    "installed": FLAG, "version": TEXT, "broken": FLAG, "editable": FLAG, "location": TEXT,
    "requires": OrNone([{"name": TEXT, "specifier": TEXT, "extra": TEXT}]),
    "duplicates": OrNone([dict]),
    "import": OrNone({"status": TEXT, "detail": TEXT, "seconds": NUMBER, "module_version": TEXT,
                      "timeout_s": NUMBER}),
}  # fmt: skip
DEVICE = {
    "index": OrNone((int, str)), "name": TEXT, "uuid": TEXT, "compute_capability": TEXT,
    "memory_total_mib": NUMBER, "memory_free_mib": NUMBER, "mig_enabled": FLAG,
    "nvlink_active_links": NUMBER, "mig_devices": OrNone([{"uuid": TEXT}]),
}  # fmt: skip
# What the judge and the renderers read from a facts file, by type: a dict names an object's
# keys ("*": any other key), a list holds items of its one element's shape. Keys not named
# here are kept as they are.
FACTS_SHAPE = {
    "python": dict,
    "platform": {"system": TEXT, "mac_version": TEXT},
    "packages": {"*": PACKAGE},
    "torch_build": {"version": TEXT, "cuda": TEXT, "hip": TEXT, "xpu": TEXT, "variant": TEXT},
    "accelerators": {
        "kind": TEXT, "driver_version": TEXT, "cuda_driver_version": TEXT, "error": TEXT,
        "devices": OrNone([DEVICE]), "topology": OrNone([dict]), "physical_device_count": NUMBER,
        "visibility": OrNone({"problems": OrNone([str])}),
    },
    "environment": dict,
    "config": {"path": TEXT, "exists": FLAG, "values": OrNone(dict), "error": TEXT},
    "torch_runtime": OrNone(dict),
    "vllm_server": OrNone(dict),
    "timings": dict,
    "warnings": OrNone(list),
}  # fmt: skip


def shape_error(value: object, shape: object, where: str) -> str | None:
    """Where `value` departs from `shape` (see FACTS_SHAPE), as a phrase; None if it fits."""
    if isinstance(shape, OrNone):
        return None if value is None else shape_error(value, shape.shape, where)
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where} is {_json_kind(value)}, expected an object"
        for key, item in value.items():
            inner = shape.get(key, shape.get("*"))
            problem = inner is not None and shape_error(item, inner, f"{where}.{key}")
            if problem:
                return problem
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} is {_json_kind(value)}, expected a list"
        problems = (shape_error(item, shape[0], f"{where}[{i}]") for i, item in enumerate(value))
        return next((p for p in problems if p), None)
    if isinstance(value, shape) and not (isinstance(value, bool) and bool not in _types(shape)):
        return None
    expected = " or ".join(dict.fromkeys(map(_json_kind, _types(shape))))
    return f"{where} is {_json_kind(value)}, expected {expected}"


def _types(shape: object) -> tuple:
    return shape if isinstance(shape, tuple) else (shape,)


def _json_kind(value: object) -> str:
    kinds = {bool: "true/false", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "an object", type(None): "null"}  # fmt: skip
    return kinds.get(value if isinstance(value, type) else type(value), "a value")


def normalize_facts(data: object, origin: str = "<facts>") -> dict:
    """A facts dict with every section the judge and the renderers read, of the right type."""
    if not isinstance(data, dict) or not isinstance(data.get("packages"), dict):
        raise FactsError(
            f"{origin} holds no facts (expected the JSON object that "
            "check_optional_backends.py --json prints, with a 'packages' object)"
        )
    problem = shape_error(data, FACTS_SHAPE, "facts")
    if problem:
        raise FactsError(f"{origin}: {problem[len('facts.') :]}; record it again with --json")
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


def host_ram_bytes(facts: dict) -> int | None:
    """Total RAM of the machine the facts describe, in bytes; None when not recorded."""
    host = facts.get("host")
    total = host.get("total_bytes") if isinstance(host, dict) else None
    valid = isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0
    return int(total) if valid else None
