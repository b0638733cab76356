"""check_optional_backends.py against hostile inputs, run as a user runs it (a subprocess): HTTP
servers that drip, hang or answer odd JSON; malformed accelerate configs; credentials in URLs; a
hanging nvidia-smi with a child of its own; duplicate device ordinals; garbage facts files.

Every case ends within the limit --help states, exits 0, 1 or 2 as documented (never 3) and
prints no traceback."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fakeenv import PYTHON, SCRIPT, add_dist, add_fake_nvml, cuda_site, h100_node, run_check
from script_modules import load

probes = load("check_optional_backends").probes
# Interpreter start, metadata scan and report on a busy two-core machine, on top of a limit.
SLACK_S = 4.0
MODEL = "Qwen/Qwen3-0.6B"


def run_bounded(*args: str, limit: float = 0.0, code: int = 0, **kwargs):
    """Run the check; assert the documented exit code, no traceback, and the time limit."""
    start = time.monotonic()
    proc = run_check(*args, timeout=limit + SLACK_S + 60, **kwargs)
    elapsed = time.monotonic() - start
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert elapsed <= limit + SLACK_S, f"took {elapsed:.1f} s; limit {limit:g} s + {SLACK_S} s"
    if code == 2:
        assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    elif code == 0:
        assert proc.stderr == ""
    return proc


def report_of(proc) -> dict:
    return json.loads(proc.stdout)


# --------------------------------------------------------------------------------------
# A vLLM look-alike that misbehaves on demand
# --------------------------------------------------------------------------------------

HEALTHY = {
    "/health": (200, b""),
    "/v1/models": (200, {"object": "list", "data": [{"id": MODEL}]}),
    "/server_info": (
        200,
        {
            "vllm_config": {
                "model_config": {"model": MODEL, "logprobs_mode": "processed_logprobs"},
                "weight_transfer_config": {"backend": "nccl"},
            }
        },
    ),
    "/get_world_size": (200, {"world_size": 1}),
}


def drip(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """Headers, then one byte every 0.5 s: a socket timeout alone never fires."""
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    while not stop.wait(0.5):
        try:
            handler.wfile.write(b" ")
        except OSError:
            return


def hang(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    stop.wait(60)


@contextlib.contextmanager
def vllm_lookalike(overrides: dict | None = None):
    """A local HTTP server with HEALTHY's routes, some replaced (a path: (status, body) or a
    function of the handler). Yields its base URL and the (path, Authorization) it saw."""
    routes = dict(HEALTHY, **(overrides or {}))
    stop, seen = threading.Event(), []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server API)
            seen.append((self.path, self.headers.get("Authorization")))
            route = routes.get(self.path.split("?")[0], (404, {"detail": "Not Found"}))
            if callable(route):
                return route(self, stop)
            status, body = route
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def vllm_text(report: dict) -> str:
    verdict = report["backends"]["vllm"]
    return " | ".join(verdict["reasons"] + [verdict["next_step"] or ""])


@pytest.mark.parametrize("where", ["/health", "/v1/models", "/server_info"])
def test_dripping_server_is_cut_off_at_the_deadline(where):
    with vllm_lookalike({where: drip}) as (url, _):
        proc = run_bounded("--json", "--vllm-url", url, "--timeout", "2", limit=2)
    server = report_of(proc)["vllm_server"]
    assert server["timed_out"] == where
    assert server["seconds"] <= 2.5
    assert server["dev_mode"] is None  # unknown, never "off"
    assert f"GET {where} gave no complete answer within 2 s" in vllm_text(report_of(proc))
    assert "dev mode is off" not in vllm_text(report_of(proc))


def help_limits() -> dict:
    """The numbers --help's "time limits" paragraph states."""
    text = " ".join(run_check("--help").stdout.split("time limits")[1].split())
    text = text.split("statuses:")[0]
    gpu = re.search(r"the GPU probe \(NVML, or nvidia-smi[^;]*min\(--timeout, (\d+)\) s", text)
    vllm = re.search(r"--vllm-url's requests together get min\(--timeout, (\d+)\) s", text)
    default = re.search(r"--timeout defaults to (\d+) s", text)
    assert gpu and vllm and default, text
    return {"gpu": float(gpu[1]), "vllm": float(vllm[1]), "default": float(default[1])}


def test_help_states_the_limits_a_hanging_gpu_and_a_dripping_server_meet(tmp_path):
    """No --timeout: a hanging NVML and a dripping server, probed side by side, each end at the
    limit --help states (measured, not just compared with the constants)."""
    limits = help_limits()
    assert limits == {
        "gpu": probes.NVML_TIMEOUT_S,
        "vllm": probes.VLLM_TIMEOUT_S,
        "default": load("check_optional_backends").facts.DEFAULT_TIMEOUT_S,
    }
    site = cuda_site(tmp_path, {"hang": True})
    with vllm_lookalike({"/health": drip}) as (url, _):
        proc = run_bounded(
            "--json", "--vllm-url", url, site=site, isolated=True, limit=max(limits.values())
        )
    report = report_of(proc)
    assert limits["gpu"] - 0.5 <= report["timings"]["nvml"] <= limits["gpu"] + 1.5
    assert limits["vllm"] - 0.5 <= report["vllm_server"]["seconds"] <= limits["vllm"] + 1.5
    assert report["accelerators"]["kind"] == "unknown"


ODD_ANSWERS = {
    "models not a list": (
        {"/v1/models": (200, {"data": 5})},
        {"models": None, "models_error": "/v1/models answered 200 without a list of models"},
        "dev mode on, weight transfer configured",
    ),
    "model ids not strings": (
        {"/v1/models": (200, {"data": [5, {"id": 7}, {"id": MODEL}, {"name": "x"}]})},
        {"models": [MODEL], "dev_mode": True},
        "dev mode on, weight transfer configured",
    ),
    "vllm_config a string": (
        {"/server_info": (200, {"vllm_config": "abc"})},
        {"dev_mode": None},
        "cannot tell whether dev mode is on",
    ),
    "model_config a list": (
        {
            "/server_info": (
                200,
                {"vllm_config": {"model_config": [1], "weight_transfer_config": {}}},
            )
        },
        {"dev_mode": True, "logprobs_mode": None, "weight_transfer_config": {}},
        "dev mode on, weight transfer configured",
    ),
    "garbage with 200": (
        {"/server_info": (200, b"<html>\xff\x00 not json")},
        {"dev_mode": None},
        "cannot tell whether dev mode is on",
    ),
    "JSON that is not an object": (
        {"/server_info": (200, b"[1, 2]"), "/health": (200, b"null")},
        {"dev_mode": None},
        "cannot tell whether dev mode is on",
    ),
    "server_info times out": (
        {"/server_info": hang},
        {"dev_mode": None, "timed_out": "/server_info"},
        "GET /server_info gave no complete answer within 2 s",
    ),
    "world size garbage": (
        {"/get_world_size": (200, {"world_size": "many"})},
        {"dev_mode": True, "world_size": None},
        "dev mode on, weight transfer configured",
    ),
}


@pytest.mark.parametrize("case", ODD_ANSWERS)
def test_odd_server_answers_become_findings(case):
    routes, facts, reason = ODD_ANSWERS[case]
    with vllm_lookalike(routes) as (url, _):
        report = report_of(run_bounded("--json", "--vllm-url", url, "--timeout", "2", limit=2))
        text = run_bounded("--vllm-url", url, "--timeout", "2", limit=2).stdout
    server = report["vllm_server"]
    for key, value in facts.items():
        assert server.get(key, "<absent>") == value, (key, server)
    assert reason in vllm_text(report)
    if facts.get("dev_mode", True) is not True:
        assert "dev mode on" not in vllm_text(report) and "dev mode is off" not in vllm_text(report)
    text = " ".join(text.split())
    assert f"vLLM server {url}" in text
    assert facts.get("models_error", "") in text


def test_url_with_a_path_is_called_wrong_not_loading(tmp_path):
    site = cuda_site(tmp_path)  # a GPU box with vLLM: the server's finding decides the step
    add_dist(site, "vllm", "0.30.0", module="vllm")
    with vllm_lookalike() as (url, _):
        report = report_of(
            run_bounded("--json", "--vllm-url", url + "/v1", site=site, isolated=True)
        )
    server = report["vllm_server"]
    assert server["health"] == 404
    assert "not a vLLM server's base URL" in vllm_text(report)
    assert report["backends"]["vllm"]["next_step"] == f"use the base URL without a path: {url}"
    assert "wait for the server" not in vllm_text(report)


@pytest.mark.parametrize(
    "url",
    ["http://[::1", "http://user:hunter2@[::1", "http://host:99999", "http://user:hunter2@:80"],
)
def test_malformed_url_is_one_line_without_internals_or_secrets(url):
    proc = run_bounded("--vllm-url", url, code=2, flags=("-I",))
    assert "expected an http(s)://host[:port] URL" in proc.stderr
    assert "_url" not in proc.stderr and "hunter2" not in proc.stderr


# --------------------------------------------------------------------------------------
# Malformed accelerate configs
# --------------------------------------------------------------------------------------

# name -> (file content, what pyyaml's report says, what the built-in reader's report says)
BAD_CONFIGS = {
    "fsdp_config a string": (
        b"distributed_type: FSDP\nfsdp_config: abc\n",
        "fsdp_config: 'abc' is not a mapping",
        "fsdp_config: 'abc' is not a mapping",
    ),
    "fsdp_config a list": (
        b"distributed_type: FSDP\nfsdp_config:\n- fsdp_version\n- 2\n",
        "fsdp_config: ['fsdp_version', 2] is not a mapping",
        "fsdp_config: ['fsdp_version', 2] is not a mapping",
    ),
    "deepspeed_config a number": (
        b"distributed_type: DEEPSPEED\ndeepspeed_config: 5\n",
        "deepspeed_config: 5 is not a mapping",
        "deepspeed_config: 5 is not a mapping",
    ),
    "num_processes a word": (
        b"distributed_type: MULTI_GPU\nnum_processes: two\n",
        "num_processes: 'two' is not a whole number",
        "num_processes: 'two' is not a whole number",
    ),
    "top-level list": (
        b"- distributed_type: FSDP\n- num_processes: 2\n",
        "is a list, not a mapping",
        "cannot parse",
    ),
    "binary garbage": (
        bytes(range(256)) * 4,
        "is not a text file",
        "is not a text file",
    ),
    "empty file": (b"", "is empty", "is empty"),
    "deeply nested": (b"[" * 5000 + b"]" * 5000, "cannot parse", "cannot parse"),
    "circular alias": (
        b"a: &a [*a]\n",
        "circular or exploding YAML aliases",
        "anchors, aliases and tags need pyyaml",
    ),
    "exploding aliases": (
        b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + b"".join(
            b"%c: &%c [%s]\n" % (97 + i, 97 + i, b", ".join([b"*%c" % (96 + i)] * 10))
            for i in range(1, 9)
        ),
        "circular or exploding YAML aliases",
        "anchors, aliases and tags need pyyaml",
    ),
    "date keys and nan": (
        b"2024-01-01: 1\nnum_processes: .nan\n",
        "num_processes: 'nan' is not a whole number",
        "num_processes: '.nan' is not a whole number",
    ),
}


def config_findings(config: dict) -> str:
    return " | ".join([config.get("error") or ""] + (config.get("problems") or []))


@pytest.mark.parametrize("builtin_yaml", [False, True], ids=["pyyaml", "builtin-yaml"])
@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_malformed_config_is_a_finding_by_flag_and_by_default_location(
    tmp_path, case, builtin_yaml
):
    content, with_pyyaml, with_builtin = BAD_CONFIGS[case]
    named = tmp_path / "bad.yaml"
    named.write_bytes(content)
    home = tmp_path / "hf"
    (home / "accelerate").mkdir(parents=True)
    (home / "accelerate" / "default_config.yaml").write_bytes(content)
    expected = with_builtin if builtin_yaml else with_pyyaml
    for args, env, source in (
        (("--accelerate-config", str(named)), {}, "--accelerate-config"),
        ((), {"HF_HOME": str(home)}, "default"),
    ):
        proc = run_bounded("--json", *args, env=env, isolated=builtin_yaml)
        config = report_of(proc)["config"]
        assert config["source"] == source and config["exists"] is True
        assert expected in config_findings(config), config
        text = run_bounded(*args, env=env, isolated=builtin_yaml).stdout
        section = " ".join(text.split("Accelerate config")[1].split("Backends:")[0].split())
        assert expected.split(": ")[0] in section
        assert "(empty)" not in section and "(no keys set)" not in section


def test_wrapped_config_problems_are_indented_under_their_mark(tmp_path):
    path = tmp_path / "fsdp2.yaml"
    path.write_text(
        "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_version: 2\n"
        "  fsdp_activation_checkpointing: true\n  fsdp_forward_prefetch: true\n"
        "  fsdp_reshard_after_forward: FULL_SHARD\n"
    )
    problems = report_of(run_bounded("--json", "--accelerate-config", str(path)))["config"]
    proc = run_bounded("--accelerate-config", str(path), env={"COLUMNS": "72"})
    section = proc.stdout.split("Accelerate config")[1].split("\n\n")[0].splitlines()
    lines = section[next(i for i, line in enumerate(section) if line.startswith("  ! ")) :]
    marks = [line for line in lines if line.startswith("  ! ")]
    assert len(marks) == len(problems["problems"]) >= 4
    assert all(line.startswith(("  ! ", "      ")) for line in lines), lines
    assert len(lines) > len(marks)  # at 72 columns some problems do wrap


# --------------------------------------------------------------------------------------
# Credentials in URLs
# --------------------------------------------------------------------------------------

SECRETS = ("hfuser", "hfpass", "proxypass", "p@ss", "plainpass", "sockspass", "vllmpass", "vuser")


def test_credentials_in_urls_are_redacted_in_text_and_json():
    env = {
        "HF_ENDPOINT": "https://hfuser:hfpass@hub.example.com",
        "HTTPS_PROXY": "http://me:proxypass@proxy.example.com:3128",
        "http_proxy": "http://me:p@ss@proxy.example.com:3128",  # '@' in an unquoted password
        "https_proxy": "me:plainpass@proxy.example.com:3128",  # no scheme: requests accepts it
        "ALL_PROXY": "socks5h://me:sockspass@socks.example.com:1080",
        "VLLM_SERVER_URL": "http://vuser:vllmpass@10.0.0.2:8000/v1",
        "NO_PROXY": "localhost,127.0.0.1",
    }
    with vllm_lookalike() as (url, seen):
        with_auth = url.replace("http://", "http://vuser:vllmpass@")
        text = run_bounded("--vllm-url", with_auth, env=env, limit=0).stdout
        proc = run_bounded("--json", "--vllm-url", with_auth, env=env, flags=("-I",), limit=0)
    for secret in SECRETS:
        assert secret not in text and secret not in proc.stdout, secret
    report = report_of(proc)
    environment = report["environment"]
    assert environment["HTTPS_PROXY"] == "http://<redacted>@proxy.example.com:3128"
    assert environment["http_proxy"] == "http://<redacted>@proxy.example.com:3128"
    assert environment["https_proxy"] == "<redacted>@proxy.example.com:3128"
    assert environment["VLLM_SERVER_URL"] == "http://<redacted>@10.0.0.2:8000/v1"
    assert environment["NO_PROXY"] == "localhost,127.0.0.1"
    assert report["vllm_server"]["url"] == url.replace("http://", "http://<redacted>@")
    # The probe logs in as the URL says (TRL's client, requests, does the same) ...
    token = base64.b64encode(b"vuser:vllmpass").decode()
    assert seen and all(auth == f"Basic {token}" for _, auth in seen)
    assert report["vllm_server"]["dev_mode"] is True  # ... and so reaches the server


# --------------------------------------------------------------------------------------
# nvidia-smi, NVML and device ordinals
# --------------------------------------------------------------------------------------

SMI_ROWS = (
    "0, NVIDIA A100-SXM4-80GB, GPU-11111111-aaaa-bbbb-cccc-dddddddddddd, 00000000:07:00.0, "
    "81920, 5, 81915, 8.0, 550.54.15\n"
    "1, NVIDIA A100-SXM4-80GB, GPU-22222222-aaaa-bbbb-cccc-dddddddddddd, 00000000:0F:00.0, "
    "81920, 5, 81915, 8.0, 550.54.15\n"
)


def fake_nvidia_smi(bin_dir: Path, body: str) -> dict:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody has reaped yet (it runs nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return False


def test_hanging_nvidia_smi_and_its_child_are_killed(tmp_path):
    pids = tmp_path / "pids"
    env = fake_nvidia_smi(
        tmp_path / "bin",
        f"echo $$ >> {pids}\nsleep 300 &\necho $! >> {pids}\nwait\n",
    )
    # -S: no nvidia-ml-py, so the check falls back to nvidia-smi.
    proc = run_bounded("--json", "--timeout", "2", env=env, isolated=True, limit=2)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    deadline = time.monotonic() + 3  # the kill is sent; give the kernel a moment to reap
    while not all(gone(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in started if not gone(p)] == []
    report = report_of(proc)
    acc = report["accelerators"]
    assert acc["kind"] == "unknown" and acc["topology"] is None
    assert acc["error"] == "nvidia-smi gave no answer within 2 s"
    assert "NVLink" not in json.dumps(report["backends"])
    text = run_bounded("--timeout", "2", env=env, isolated=True, limit=2).stdout
    assert "Accelerator: unknown (the GPU probe did not finish)" in text
    assert "Accelerator: cpu" not in text and "NVLink" not in text


def test_answering_nvidia_smi_has_unknown_topology(tmp_path):
    env = fake_nvidia_smi(tmp_path / "bin", f"cat <<'EOF'\n{SMI_ROWS}EOF\n")
    report = report_of(run_bounded("--json", env=env, isolated=True))
    acc = report["accelerators"]
    assert acc["kind"] == "cuda" and acc["source"] == "nvidia-smi"
    assert [d["uuid"][:12] for d in acc["devices"]] == ["GPU-11111111", "GPU-22222222"]
    assert acc["topology"] is None and acc["cuda_driver_version"] is None
    assert "NVLink" not in json.dumps(report["backends"])
    text = run_bounded(env=env, isolated=True).stdout
    assert "Accelerator: cuda, driver 550.54.15\n" in text
    assert "CUDA None" not in text and "None" not in text.split("Backends:")[0]
    assert "2x NVIDIA A100-SXM4-80GB [GPU 0,1], CC 8.0, 80.0 GiB" in text


def test_failing_nvidia_smi_is_a_fact(tmp_path):
    env = fake_nvidia_smi(
        tmp_path / "bin",
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
        "driver.' >&2\nexit 9\n",
    )
    acc = report_of(run_bounded("--json", env=env, isolated=True))["accelerators"]
    assert acc["kind"] == "cpu"
    assert "could not communicate with the NVIDIA driver" in acc["error"]


@pytest.mark.parametrize("value", ["0,0", "1,GPU-00000001", "+1,1gpu"])
def test_repeated_device_leaves_none_visible(tmp_path, value):
    site = cuda_site(tmp_path, h100_node(count=2))
    env = {"CUDA_VISIBLE_DEVICES": value}
    report = report_of(run_bounded("--json", site=site, isolated=True, env=env))
    acc = report["accelerators"]
    assert acc["devices"] == [] and acc["physical_device_count"] == 2
    assert any("twice: the runtime then sees no device at all" in w for w in report["warnings"])
    assert report["backends"]["nccl"]["status"] == "unavailable"
    assert "CUDA_VISIBLE_DEVICES" in report["backends"]["nccl"]["next_step"]
    text = run_bounded(site=site, isolated=True, env=env).stdout
    assert "no cuda device visible (2 hidden)" in text
    assert "lists device" in " ".join(text.split("Warnings:")[1].split())


# --------------------------------------------------------------------------------------
# --imports, a bare interpreter, recorded facts
# --------------------------------------------------------------------------------------


def test_import_timeouts_are_advised_a_longer_timeout():
    targets = probes.import_probe_targets(report_of(run_check("--json"))["packages"])
    cores = os.cpu_count() or 1
    limit = math.ceil(len(targets) / cores) * 0.5 + 2  # one child per core, each 0.5 s at most
    report = report_of(run_bounded("--json", "--imports", "--timeout", "0.5", limit=limit))
    timed_out = {n for n, p in report["packages"].items() if p.get("import", {}).get("status")
                 == "timeout"}  # fmt: skip
    assert "torch" in timed_out  # torch cannot import in 0.5 s
    for name in ("peft", "bf16", "kernels"):
        verdict = report["backends"][name]
        if verdict["status"] == "unavailable":
            assert "did not finish within 0.5 s" in " ".join(verdict["reasons"])
            assert "--timeout" in verdict["next_step"]
            assert "--force-reinstall" not in verdict["next_step"]


def test_bare_python_without_trl_says_trl_is_missing():
    proc = run_bounded(isolated=True)
    warnings = " ".join(proc.stdout.split("Warnings:")[1].split())
    assert "trl is not installed in this interpreter" in warnings


def test_tiny_site_with_only_vllm(tmp_path):
    add_dist(tmp_path, "vllm", "0.30.0", module="vllm")
    add_fake_nvml(tmp_path, {"error": "Driver Not Loaded"})
    report = report_of(run_bounded("--json", site=tmp_path, isolated=True))
    assert report["packages"]["vllm"]["installed"] is True
    assert any("trl is not installed" in w for w in report["warnings"])


BAD_FACTS = {
    "binary": bytes(range(256)),
    "empty": b"",
    "a list": b"[]",
    "packages a number": b'{"packages": 5}',
    "deeply nested": b"[" * 100_000,
    "devices a number": b'{"packages": {}, "accelerators": {"kind": "cuda", "devices": 5}}',
    "device name a list": b'{"packages": {}, "accelerators": {"devices": [{"name": []}]}}',
    "topology a number": b'{"packages": {}, "accelerators": {"topology": 5}}',
    "visibility a number": b'{"packages": {}, "accelerators": {"visibility": 5}}',
    "problems not strings": b'{"packages": {}, "accelerators": {"visibility": {"problems": [5]}}}',
    "requires a number": b'{"packages": {"trl": {"installed": true, "requires": 5}}}',
    "requirement name a list": (
        b'{"packages": {"torch": {"installed": true, "version": "2.0", "requires": '
        b'[{"name": [], "specifier": ">=1"}]}}}'
    ),
    "specifier a number": (
        b'{"packages": {"transformers": {"installed": true, "version": "5.0", "requires": '
        b'[{"name": "torch", "specifier": 5}]}}}'
    ),
    "config values a number": b'{"packages": {}, "config": {"exists": true, "values": 5}}',
    "warnings a number": b'{"packages": {}, "warnings": 5}',
    "torch_runtime a number": b'{"packages": {}, "torch_runtime": 5}',
    "vllm_server a list": b'{"packages": {}, "vllm_server": [1]}',
    "version a number": b'{"packages": {"trl": {"installed": true, "version": 1.16}}}',
}


@pytest.mark.parametrize("case", BAD_FACTS)
def test_unusable_facts_file_is_one_line_exit_2(tmp_path, case):
    path = tmp_path / "node1.json"
    path.write_bytes(BAD_FACTS[case])
    proc = run_bounded("--facts", str(path), code=2)
    assert str(path) in proc.stderr


def test_recorded_facts_with_odd_but_valid_values_are_judged(tmp_path):
    facts = json.loads(run_check("--json").stdout)
    facts["accelerators"].update(kind="martian", devices=[{"index": 0}], topology=None)
    facts["packages"]["trl"]["version"] = "not.a.version"
    facts["vllm_server"] = {"url": "http://h:1", "health": 200, "dev_mode": None}
    path = tmp_path / "node1.json"
    path.write_text(json.dumps(facts))
    for args in (("--facts", str(path)), ("--facts", str(path), "--json")):
        run_bounded(*args)


def test_long_paths_wrap_between_their_parts(tmp_path):
    """A deep checkout, interpreter and HF_HOME: every line fits the terminal, and each path
    breaks only after a "/" (so it reads back whole)."""
    deep = tmp_path.joinpath(*[f"directory-level-{i:02d}" for i in range(12)])
    deep.mkdir(parents=True)
    python = deep / "python3"
    python.symlink_to(PYTHON)  # -S: the symlink runs as a bare interpreter
    config = deep / "accelerate" / "default_config.yaml"
    config.parent.mkdir()
    config.write_text("distributed_type: MULTI_GPU\nnum_processes: two\n")
    env = {"HF_HOME": str(deep), "COLUMNS": "80"}
    proc = subprocess.run(
        [str(python), "-S", str(SCRIPT)],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, **env),
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert max(map(len, proc.stdout.splitlines())) <= 80
    rejoined = re.sub(r"/\n +", "/", proc.stdout)
    assert f"({python})" in rejoined and f"{config}:" in rejoined


def test_control_characters_are_shown_escaped_not_sent_to_the_terminal(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text('mixed_precision: "\\e[2J\\e[31mbf16"\nnum_processes: "\\b\\b1"\n')
    env = {"NCCL_DEBUG": "\x1b]0;pwned\x07INFO", "COLUMNS": "100"}
    proc = run_bounded("--accelerate-config", str(config), env=env)
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout and "\b" not in proc.stdout
    assert "NCCL_DEBUG=\\x1b]0;pwned\\x07INFO" in proc.stdout
    assert "mixed_precision=\\x1b[2J\\x1b[31mbf16" in proc.stdout
    raw = report_of(run_bounded("--json", "--accelerate-config", str(config), env=env))
    assert raw["environment"]["NCCL_DEBUG"] == env["NCCL_DEBUG"]  # --json keeps the fact as is


def processes_mentioning(text: str) -> list:
    """Pids of live processes whose command line holds `text` (a probe child's holds the
    sys.path it was given)."""
    pids = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and text in (entry / "cmdline").read_text(errors="replace"):
                pids.append(int(entry.name))
    return [p for p in pids if not gone(p)]


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
@pytest.mark.parametrize("args", [("--timeout", "soon"), ("--require", "warp_drive")])
def test_usage_error_kills_the_gpu_probe_started_early(tmp_path, args):
    """A collecting run starts the GPU probe before reading its options; bad options end the run
    at once, and the probe with it (here a probe that would hang for ever)."""
    site = cuda_site(tmp_path / "site", {"hang": True})
    run_bounded(*args, site=site, isolated=True, code=2)
    deadline = time.monotonic() + 3
    while processes_mentioning(str(site)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_mentioning(str(site)) == []


def test_the_gpu_probe_starts_before_the_options_are_read(tmp_path):
    pidfile = tmp_path / "nvml.pids"
    site = cuda_site(tmp_path / "site", dict(h100_node(count=1), pidfile=str(pidfile)))
    report = report_of(run_bounded("--json", "--timeout", "3", site=site, isolated=True))
    assert report["accelerators"]["kind"] == "cuda" and len(pidfile.read_text().split()) == 1
    assert report["timings"]["total"] >= report["timings"]["nvml"]
    for args in (("--help",), ("--facts", str(tmp_path / "missing.json"))):
        run_bounded(*args, site=site, isolated=True, code=0 if args == ("--help",) else 2)
    assert len(pidfile.read_text().split()) == 1  # --help and --facts start no probe
