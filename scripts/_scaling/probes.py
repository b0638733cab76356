"""Probes that may hang: child processes (NVML, nvidia-smi, package imports) and HTTP GETs to a
vLLM server. Each has a total deadline; a child's whole process group is killed when it passes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

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

    def __init__(
        self, cmd: list, timeout: float, env: dict | None = None, start: float | None = None
    ) -> None:
        self.timeout = timeout
        self.start = time.perf_counter() if start is None else start
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
    # This module's loader reads its sibling from a folder or a zipapp alike (what
    # pkgutil.get_data does, without importing pkgutil).
    source = __loader__.get_data(os.path.join(os.path.dirname(__file__), f"{module}.py"))
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


class GpuProbe:
    """NVML in a child, or nvidia-smi when nvidia-ml-py is absent: one deadline for both. It
    starts when made; `finish()` waits for its answer at most until the deadline."""

    def __init__(self, timeout: float) -> None:
        import importlib.util

        self.start = time.perf_counter()
        self.limit = min(timeout, NVML_TIMEOUT_S)
        self.finished = False
        self.nvml = self.smi = None
        if importlib.util.find_spec("pynvml") is not None:
            self.nvml = start_python_probe("nvml_probe", self.limit)
        else:  # an NVML child would only say that nvidia-ml-py is missing
            self.smi = self._start_smi()

    def retime(self, timeout: float) -> GpuProbe:
        """Apply the run's --timeout to a probe started before the options were read."""
        self.limit = min(timeout, NVML_TIMEOUT_S)
        for child in (self.nvml, self.smi):
            if child is not None:
                child.timeout = self.limit
        return self

    def _start_smi(self) -> Child | None:
        exe = which("nvidia-smi")
        cmd = [exe, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"]
        return Child(cmd, self.limit, start=self.start) if exe else None

    def finish(self, timings: dict) -> dict:
        """NVML facts (or nvidia-smi's, or {"error", ...}); `timed_out` marks a hang."""
        self.finished = True
        if self.nvml is not None:
            status, result, seconds = probe_result(self.nvml)
            timings["nvml"] = round(seconds, 3)
            if status != "ok":
                return {"error": f"NVML probe {status}: {result}", "timed_out": status != "error"}
            if not result.get("no_nvml"):
                return result
            self.smi = self._start_smi()  # nvidia-ml-py is there but does not import
        if self.smi is None:
            return {"error": "nvidia-ml-py not installed and nvidia-smi not found"}
        facts = nvidia_smi_facts(self.smi, self.limit)
        timings["nvidia_smi"] = round(time.perf_counter() - self.smi.start, 3)
        return facts

    def discard(self) -> None:
        """Kill what is still running when the program ends without asking for the answer."""
        for child in (self.nvml, self.smi):
            if not self.finished and child is not None and child.proc is not None:
                kill_group(child.proc)


_EARLY_GPU_PROBE: list = []


def start_gpu_probe_early() -> None:
    """Start the GPU probe before the rest of the program loads: it is the slowest fact. The
    collection adopts it (`gpu_probe`); an exit before that kills it."""
    import atexit

    probe = GpuProbe(NVML_TIMEOUT_S)
    _EARLY_GPU_PROBE.append(probe)
    atexit.register(probe.discard)


def gpu_probe(timeout: float) -> GpuProbe:
    """The probe started early, with the run's timeout, or a new one."""
    if _EARLY_GPU_PROBE:
        return _EARLY_GPU_PROBE.pop().retime(timeout)
    return GpuProbe(timeout)


def which(name: str) -> str | None:
    """shutil.which for a plain name on POSIX, without importing shutil (a few ms)."""
    if os.name != "posix":
        import shutil

        return shutil.which(name)
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


SMI_FIELDS = (
    "index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,compute_cap,driver_version"
)


def nvidia_smi_facts(child: Child, limit: float) -> dict:
    """The facts in nvidia-smi's CSV answer, or {"error", ...}; `limit` is the one it had."""
    status, out, err, _ = child.finish()
    if status == "timeout":
        return {"error": f"nvidia-smi gave no answer within {limit:g} s", "timed_out": True}
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
    from .metadata import DISTS

    targets: dict = {}
    for dist in sorted(DISTS, key=lambda d: IMPORT_RANK.get(d.name, len(IMPORT_RANK))):
        installed = (packages.get(dist.name) or {}).get("installed")
        if dist.module and installed and dist.module not in targets.values():
            targets[dist.name] = dist.module
    return targets


def run_import_probes(packages: dict, timeout: float, timings: dict) -> tuple:
    """Import each installed package in its own child; returns ({dist: outcome}, torch runtime
    view or None). One child per core, slowest first: oversubscribing slowed every import."""
    from concurrent.futures import ThreadPoolExecutor  # only here: it costs a default run 4 ms

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


class VllmProbe:
    """Read-only GETs against a running vLLM server in a daemon thread, all within one deadline;
    `finish()` never waits past it. A server that answers slowly or drips bytes is cut off and
    reported as such. Credentials in the URL are sent as HTTP basic auth, as TRL's client
    (requests) does, and never reported."""

    def __init__(self, url: str, timeout: float) -> None:
        from .environment import redact_url_credentials

        self.timeout, self.start = timeout, time.perf_counter()
        base, self.auth = split_credentials(url.rstrip("/"))
        self.report: dict = {"url": redact_url_credentials(url.rstrip("/"))}
        self.worker = threading.Thread(target=self._gets, args=(base,), daemon=True)
        self.worker.start()

    def finish(self) -> dict:
        self.worker.join(max(0.0, self.timeout - (time.perf_counter() - self.start)))
        snapshot = dict(self.report)  # the worker may still write to `report`
        if self.worker.is_alive():
            step = snapshot.get("pending") or "/health"
            snapshot["timed_out"] = step
            snapshot["error"] = (
                f"GET {step} gave no complete answer within {self.timeout:g} s in all"
            )
            # abandoned at the deadline, however late this is called
            snapshot["seconds"] = round(min(time.perf_counter() - self.start, self.timeout), 3)
        snapshot.pop("pending", None)
        snapshot.setdefault("health", None)
        snapshot.setdefault("dev_mode", None)
        return snapshot

    def _get(self, base: str, path: str) -> tuple:
        self.report["pending"] = path.split("?")[0]
        return http_get(base + path, self.start + self.timeout, self.auth)

    def _gets(self, base: str) -> None:
        report = self.report
        status, body = self._get(base, "/health")
        report["health"] = status
        if status is None:
            report["error"] = body  # urllib's reason: the URL it was given has no credentials
        elif status == 200:
            report.update(_models(*self._get(base, "/v1/models")))
            status, body = self._get(base, "/server_info?config_format=json")
            report["server_info_status"] = status
            report["dev_mode"] = _dev_mode(status, body, report)
            status, body = self._get(base, "/get_world_size")
            size = _json_dict(body).get("world_size") if status == 200 else None
            report["world_size"] = size if isinstance(size, int) and size > 0 else None
        report["pending"] = None
        report["seconds"] = round(time.perf_counter() - self.start, 3)


def split_credentials(url: str) -> tuple:
    """('http://host:port/...', 'Basic ...' or None) from 'http://user:password@host:port/...'."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return urlunsplit(parts._replace(netloc=hostport)), f"Basic {token}"


def _models(status: int | None, body: object) -> dict:
    data = _json_dict(body).get("data") if status == 200 else None
    if not isinstance(data, list):
        detail = f"answered {status} without a list of models" if status else str(body)
        return {"models": None, "models_error": f"/v1/models {detail}"}
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    return {"models": [i for i in ids if isinstance(i, str)]}


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


def http_get(url: str, deadline: float, auth: str | None = None) -> tuple:
    """(HTTP status, body bytes) or (None, reason); proxies ignored, never raises. The socket
    timeout bounds each read, not the whole answer: callers bound that (see VllmProbe)."""
    import urllib.error
    import urllib.request

    remaining = deadline - time.perf_counter()
    if remaining <= 0:
        return None, "no time left"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url)
    if auth:
        request.add_unredirected_header("Authorization", auth)  # not sent on to a redirect
    try:
        with opener.open(request, timeout=remaining) as resp:
            return resp.status, resp.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except Exception as exc:  # refused, DNS, timeout, TLS, garbage: all are facts
        return None, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"


def _json_dict(body: object) -> dict:
    try:
        value = json.loads(body)
    except (ValueError, TypeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
