"""--vllm-url against a tiny local HTTP server emulating vLLM's read-only endpoints."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fakeenv import run_json

MODEL = "Qwen/Qwen3-0.6B"


def make_handler(dev_mode: bool, weight_transfer: bool, log: list):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server API)
            log.append((self.command, self.path))
            path = self.path.split("?")[0]
            if path == "/health":
                return self.reply(200, b"")
            if path == "/v1/models":
                return self.reply(200, {"object": "list", "data": [{"id": MODEL}]})
            if path == "/server_info" and dev_mode:
                config = {
                    "model_config": {"model": MODEL, "logprobs_mode": "processed_logprobs"},
                    "weight_transfer_config": {"backend": "nccl"} if weight_transfer else None,
                }
                return self.reply(200, {"vllm_config": config})
            if path == "/get_world_size":
                return self.reply(200, {"world_size": 1})
            return self.reply(404, {"detail": "Not Found"})

        def reply(self, code, body):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def vllm_server(request):
    dev_mode, weight_transfer = request.param
    log: list = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(dev_mode, weight_transfer, log))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", log
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("vllm_server", [(True, True)], indirect=True)
def test_dev_mode_server_with_weight_transfer(vllm_server):
    url, log = vllm_server
    report = run_json("--vllm-url", url)
    server = report["vllm_server"]
    assert server["health"] == 200 and server["models"] == [MODEL]
    assert server["dev_mode"] is True
    assert server["weight_transfer_config"] == {"backend": "nccl"}
    assert server["logprobs_mode"] == "processed_logprobs" and server["world_size"] == 1
    assert {method for method, _ in log} == {"GET"}  # read-only
    reasons = " ".join(report["backends"]["vllm"]["reasons"])
    assert "dev mode on, weight transfer configured" in reasons


@pytest.mark.parametrize("vllm_server", [(True, False)], indirect=True)
def test_server_without_weight_transfer_config(vllm_server):
    url, _ = vllm_server
    report = run_json("--vllm-url", url + "/")
    assert report["vllm_server"]["weight_transfer_config"] is None
    assert "has no weight_transfer_config" in " ".join(report["backends"]["vllm"]["reasons"])


@pytest.mark.parametrize("vllm_server", [(False, False)], indirect=True)
def test_server_without_dev_mode(vllm_server):
    url, _ = vllm_server
    report = run_json("--vllm-url", url)
    server = report["vllm_server"]
    assert server["server_info_status"] == 404 and server["dev_mode"] is False
    assert "dev mode is off" in " ".join(report["backends"]["vllm"]["reasons"])


def test_closed_port_is_reported_not_raised():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block exits
    report = run_json("--vllm-url", f"http://127.0.0.1:{port}", "--timeout", "3", timeout=30)
    server = report["vllm_server"]
    assert server["health"] is None
    assert "Connection refused" in server["error"] or "Errno" in server["error"]
    assert "unreachable" in " ".join(report["backends"]["vllm"]["reasons"])
