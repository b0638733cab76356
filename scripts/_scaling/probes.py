"""Probes that may hang: child processes (NVML, nvidia-smi, package imports) and HTTP GETs to a
vLLM server. Each has a total deadline; a child's whole process group is killed when it passes."""

from __future__ import annotations

import contextlib
import json
import os
import pkgutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from .metadata import DISTS

RESULT_MARK = "__CHECK_RESULT__ "
NVML_TIMEOUT_S = 15.0  # NVML or nvidia-smi
VLLM_TIMEOUT_S = 10.0  # every GET to a vLLM server together
# --imports starts the slowest imports first, so the wall time approaches
# max(slowest, sum / cores) instead of ending on a heavy straggler. Packages that import
# torch and more come first, then torch (its probe also reads the runtime), then the rest.
IMPORT_FIRST = (
    "unsloth", "vllm", "peft", "deepspeed", "liger-kernel", "liger-kernel-nightly",
    "bitsandbytes", "flash-attn", "flash-attn-3", "flash-attn-4", "xformers", "kernels",
    "torch", "accelerate", "datasets", "transformers",
)  # fmt: skip
IMPORT_RANK = {name: rank for rank, name in enumerate(IMPORT_FIRST)}


# --------------------------------------------------------------------------------------
# Child processes
# --------------------------------------------------------------------------------------


class Child:
    """A started child process with a deadline; `finish()` returns (status, out, err, seconds),
    status one of ok (exited), timeout, crashed (killed by a signal), error (could not start)."""

    def __init__(self, cmd: list, timeout: float, env: dict | None = None) -> None:
        self.timeout, self.start = timeout, time.perf_counter()
        self.proc: subprocess.Popen | None = None
        self.failure = ""
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=(os.name == "posix"),  # its own group: killed whole
            )
        except (OSError, ValueError) as exc:
            self.failure = f"cannot start {cmd[0]}: {exc}"

    def finish(self) -> tuple:
        if self.proc is None:
            return "error", b"", self.failure.encode(), 0.0
        remaining = max(0.0, self.timeout - (time.perf_counter() - self.start))
        try:
            out, err = self.proc.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            return "timeout", b"", b"", time.perf_counter() - self.start
        seconds = time.perf_counter() - self.start
        if self.proc.returncode < 0:
            return "crashed", out, err, seconds
        return "ok", out, err, seconds


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the child and everything it started (a hung driver call may have children)."""
    with contextlib.suppress(OSError):
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
        proc.communicate(timeout=2)


def start_python_probe(
    module: str, timeout: float, extra: dict | None = None, env: dict | None = None
) -> Child:
    """Run the source of `_scaling/<module>.py` in a child interpreter that sees our sys.path."""
    source = pkgutil.get_data(__package__, f"{module}.py")
    spec = dict(extra or {}, path=sys.path, mark=RESULT_MARK)
    cmd = [sys.executable, *(["-S"] if sys.flags.no_site else []), "-c", source.decode()]
    child_env = dict(os.environ, PYTHONWARNINGS="ignore", **(env or {}))
    return Child([*cmd, json.dumps(spec)], timeout, child_env)


def probe_result(child: Child) -> tuple:
    """(status, result dict or detail str, seconds) of a Python probe."""
    status, out, err, seconds = child.finish()
    if status == "timeout":
        return "timeout", f"no answer after {child.timeout:g} s", seconds
    if status == "crashed":
        return "crashed", f"killed by {_signal_name(-child.proc.returncode)}", seconds
    for line in reversed(out.decode("utf-8", "replace").splitlines()):
        if line.startswith(RESULT_MARK):
            with contextlib.suppress(ValueError):
                return "ok", json.loads(line[len(RESULT_MARK) :]), seconds
            break
    code = child.proc.returncode if child.proc else None
    return "error", last_line(err) or f"exit status {code}", seconds


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


# --------------------------------------------------------------------------------------
# GPUs: NVML in a child, nvidia-smi as the fallback
# --------------------------------------------------------------------------------------


def start_nvml(timeout: float) -> Child:
    return start_python_probe("nvml_probe", min(timeout, NVML_TIMEOUT_S))


def finish_nvml(child: Child) -> tuple:
    """(NVML facts or {"error", ...}, seconds). `timed_out` marks a hang, not an absence."""
    status, result, seconds = probe_result(child)
    if status != "ok":
        return {"error": f"NVML probe {status}: {result}", "timed_out": status != "error"}, seconds
    return result, seconds


SMI_FIELDS = (
    "index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,compute_cap,driver_version"
)


def probe_nvidia_smi(timeout: float) -> dict | None:
    """nvidia-smi's CSV query, bounded in time; None when nvidia-smi is not on PATH."""
    import shutil

    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    cmd = [exe, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"]
    timeout = min(timeout, NVML_TIMEOUT_S)
    status, out, err, _ = Child(cmd, timeout).finish()
    if status == "timeout":
        return {"error": f"nvidia-smi gave no answer after {timeout:g} s", "timed_out": True}
    if status != "ok":
        return {"error": f"nvidia-smi failed: {last_line(err) or status}"}
    if not out.strip() and err.strip():
        return {"error": f"nvidia-smi: {last_line(err)}"}
    devices, driver = [], None
    for row in out.decode("utf-8", "replace").splitlines():
        cols = [c.strip() for c in row.split(",")]
        if len(cols) != 9 or not cols[0].isdigit():
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
                "compute_capability": cols[7] if cols[7][:1].isdigit() else None,
                "mig_enabled": None,
                "processes": None,
            }
        )
    # nvidia-smi's query has no topology: unknown (None), which is not "no NVLink" ([]).
    return {"driver_version": driver, "cuda_driver_version": None, "devices": devices,
            "topology": None, "source": "nvidia-smi"}  # fmt: skip


# --------------------------------------------------------------------------------------
# --imports: each installed package imported in its own child, in parallel
# --------------------------------------------------------------------------------------


def import_probe_targets(packages: dict) -> dict:
    """{dist: module} for installed dists, slowest imports first (see IMPORT_FIRST)."""
    targets: dict = {}
    for dist in sorted(DISTS, key=lambda d: IMPORT_RANK.get(d.name, len(IMPORT_RANK))):
        installed = (packages.get(dist.name) or {}).get("installed")
        if dist.module and installed and dist.module not in targets.values():
            targets[dist.name] = dist.module
    return targets


def run_import_probes(packages: dict, timeout: float, timings: dict) -> tuple:
    """Import each installed package in its own child; returns ({dist: outcome}, torch runtime
    view or None). One child per core, slowest first: oversubscribing slowed every import."""
    targets = import_probe_targets(packages)
    env = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    workers = max(1, min(len(targets), os.cpu_count() or 2))
    start = time.perf_counter()

    def one(module: str) -> tuple:
        return probe_result(start_python_probe("import_probe", timeout, {"module": module}, env))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(one, module) for name, module in targets.items()}
        results = {name: f.result() for name, f in futures.items()}
    timings["imports_wall"] = round(time.perf_counter() - start, 3)
    timings["imports_workers"] = workers
    outcomes, runtime = {}, None
    for name, (status, payload, seconds) in results.items():
        outcome = {"status": status, "detail": None, "seconds": round(seconds, 3)}
        if status != "ok":
            outcome["detail"] = payload
        elif payload.get("error"):
            outcome.update(status="error", detail=payload["error"])
        else:
            outcome["module_version"] = payload.get("module_version")
        if status == "timeout":
            outcome["timeout_s"] = timeout
        outcomes[name] = outcome
        if name == "torch":
            failed = {"error": f"import torch {outcome['status']}: {outcome['detail']}"}
            runtime = payload.get("torch_runtime") if outcome["status"] == "ok" else failed
    return outcomes, runtime


# --------------------------------------------------------------------------------------
# --vllm-url: read-only GETs against a running server, all within one deadline
# --------------------------------------------------------------------------------------

MAX_BODY = 4_000_000


def probe_vllm_server(url: str, timeout: float) -> dict:
    """Facts from a running vLLM server; never raises, never runs past `timeout` in all.
    A server that answers slowly or drips bytes is cut off and reported as such."""
    report: dict = {"url": url.rstrip("/")}
    start = time.perf_counter()
    worker = threading.Thread(target=_vllm_gets, args=(report, start + timeout), daemon=True)
    worker.start()
    worker.join(timeout)
    snapshot = dict(report)  # the worker may still write to `report`
    if worker.is_alive():
        step = snapshot.get("pending", "/health")
        snapshot["timed_out"] = step
        snapshot.setdefault(
            "error", f"GET {step} gave no complete answer within {timeout:g} s in all"
        )
    snapshot.pop("pending", None)
    snapshot["seconds"] = round(time.perf_counter() - start, 3)
    return snapshot


def _vllm_gets(report: dict, deadline: float) -> None:
    base = report["url"]
    report["pending"] = "/health"
    status, body = _get(base + "/health", deadline)
    report["health"] = status
    if status is None:
        report["error"] = body
        return
    if status != 200:
        return
    report["pending"] = "/v1/models"
    status, body = _get(base + "/v1/models", deadline)
    data = _json_dict(body).get("data") if status == 200 else None
    report["models"] = [
        m["id"]
        for m in (data if isinstance(data, list) else [])
        if isinstance(m, dict) and "id" in m
    ]
    report["pending"] = "/server_info"
    status, body = _get(base + "/server_info?config_format=json", deadline)
    report["server_info_status"] = status
    report["dev_mode"] = _dev_mode(status, body, report)
    report["pending"] = "/get_world_size"
    status, body = _get(base + "/get_world_size", deadline)
    if status == 200:
        report["world_size"] = _json_dict(body).get("world_size")
    report["pending"] = None


def _dev_mode(status: int | None, body: object, report: dict) -> bool | None:
    """True only for a JSON answer with a vllm_config; False for 404; None when unknown."""
    if status == 404:
        return False
    config = _json_dict(body).get("vllm_config") if status == 200 else None
    if not isinstance(config, dict):
        if status == 200:
            report["server_info_error"] = "/server_info answered 200 without a vllm_config object"
        return None
    model_config = config.get("model_config")
    report["weight_transfer_config"] = config.get("weight_transfer_config")
    report["logprobs_mode"] = (
        model_config.get("logprobs_mode") if isinstance(model_config, dict) else None
    )
    return True


def _get(url: str, deadline: float) -> tuple:
    """(HTTP status, body bytes) or (None, reason); proxies ignored, never raises."""
    import urllib.error
    import urllib.request

    remaining = deadline - time.perf_counter()
    if remaining <= 0:
        return None, "no time left"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=remaining) as resp:
            return resp.status, resp.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except Exception as exc:  # refused, DNS, timeout, TLS, garbage: all are facts
        return None, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"


def _json_dict(body: object) -> dict:
    try:
        value = json.loads(body)
    except (ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}
