"""scripts/diagnose.py and the pieces under it (_scaling/troubleshooting.py parses the reference,
_scaling/diagnosis.py ranks entries for a log), on a small fixture reference in the real shape.
The real reference is held to the same shape in test_troubleshooting.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import script_modules
from _scaling import diagnosis, troubleshooting

FIXTURES = Path(__file__).parent / "fixtures" / "diagnose"
REFERENCE = FIXTURES / "reference.md"
SCRIPT = script_modules.SCRIPTS / "diagnose.py"
FACTS = Path(__file__).parent / "fixtures" / "check_facts"


def entries() -> list:
    return troubleshooting.parse_reference(REFERENCE.read_text())


def run(*args: str, stdin: str | bytes | None = None) -> subprocess.CompletedProcess:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--reference", str(REFERENCE), *args],
        input=data,
        capture_output=True,
        timeout=60,
    )


def top(text: str, versions: dict | None = None) -> list:
    log = diagnosis.clean_log(text)
    return [m.entry.id for m in diagnosis.diagnose(log, entries(), versions or {})]


# --------------------------------------------------------------------------------------
# The reference's shape
# --------------------------------------------------------------------------------------


def test_fixture_reference_parses_into_entries():
    parsed = entries()
    assert [e.id for e in parsed] == [
        "the-vllm-server-cant-be-reached",
        "old-client-against-a-new-server",
        "cuda-out-of-memory",
        "nccl-watchdog-timeout",
    ]
    first = parsed[0]
    assert first.section == "vLLM server" and first.releases == (("trl", ">=0.17"),)
    assert first.sources == ("huggingface/trl#1234", "trl/generation/vllm_client.py:289")
    assert first.threads == ("huggingface/trl#1234",)
    assert parsed[2].releases == () and parsed[1].releases == (("trl", "<0.25"), ("vllm", ">=0.22"))


ENTRY = """## S

### Title
```text
Some distinctive error text here
```
- **Releases**: any
- **Cause**: c
- **Confirm**: k
- **Fix**: f
- **Upgrade**: u
- **Source**: `a/b#1`
"""


@pytest.mark.parametrize(
    ("broken", "complaint"),
    [
        (ENTRY.replace("```text\nSome distinctive error text here\n```\n", ""), "```text"),
        (ENTRY.replace("Some distinctive error text here\n", ""), "empty"),
        (ENTRY.replace("- **Cause**: c\n", ""), "**Cause**"),
        (
            ENTRY.replace("- **Fix**: f\n- **Upgrade**: u\n", "- **Upgrade**: u\n- **Fix**: f\n"),
            "Fix",
        ),
        (ENTRY.replace("any", "trl 0.19"), "Releases"),
        (ENTRY.replace("`trl", "`").replace("any", "`>=1`"), "requirement"),
        (ENTRY.replace("`a/b#1`", "the forum"), "Source"),
        (ENTRY.replace("`a/b#1`", "`https://github.com/a/b/issues/1`"), "Source"),
        (ENTRY + ENTRY.replace("## S\n", ""), "anchor"),
    ],
)
def test_malformed_entries_are_rejected_with_their_line(broken, complaint):
    with pytest.raises(troubleshooting.ReferenceError) as info:
        troubleshooting.parse_reference(broken)
    assert complaint in str(info.value) and "line " in str(info.value)


def test_a_well_formed_entry_parses():
    (entry,) = troubleshooting.parse_reference(ENTRY)
    assert (
        entry.title == "Title"
        and entry.fix == "f"
        and entry.signatures == ("Some distinctive error text here",)
    )


def test_headings_inside_code_blocks_are_not_entries():
    text = ENTRY + "\n```bash\n### not a heading\n```\n"
    assert len(troubleshooting.parse_reference(text)) == 1


@pytest.mark.parametrize(
    ("title", "anchor"),
    [
        ("The vLLM server can't be reached", "the-vllm-server-cant-be-reached"),
        ("`vllm_mode` typo: 'colocated'", "vllm_mode-typo-colocated"),
        ("nn.DataParallel", "nndataparallel"),
        (
            "Cannot flatten integer dtype tensors (FSDP1 + QLoRA)",
            "cannot-flatten-integer-dtype-tensors-fsdp1--qlora",
        ),
    ],
)
def test_anchors_follow_github(title, anchor):
    assert troubleshooting.slug(title) == anchor


def test_signature_patterns_treat_placeholders_and_space_loosely():
    pattern = troubleshooting.signature_pattern("can't be reached at {url} after {s} seconds.")
    assert pattern.search("The vLLM server can't be reached at http://h:8000 after 240.0  seconds.")
    assert pattern.search("CAN'T BE REACHED AT x AFTER 1 SECONDS.")
    assert not pattern.search("can't be reached at x after 1 minutes.")
    sample = troubleshooting.signature_sample("Tried to allocate {size} on {device}")
    assert "{" not in sample and troubleshooting.signature_pattern(
        "Tried to allocate {size}"
    ).search(sample)


# --------------------------------------------------------------------------------------
# Cleaning and ranking
# --------------------------------------------------------------------------------------


def test_cleaning_strips_colours_bars_and_rank_prefixes():
    raw = (
        "\x1b[31m[rank3]: RuntimeError: boom\x1b[0m\n"
        " 10%|█         | 1/10\r 20%|██        | 2/10\r100%|██████████| 10/10\n"
        "[default1]:[rank1]: Traceback (most recent call last):\n"
        "2026-11-30 10:00:01,123 - ERROR - rank0: ValueError: x\n"
        "[1,0]<stderr>:torch.OutOfMemoryError: CUDA out of memory\n"
    )
    log = diagnosis.clean_log(raw)
    assert log.lines[0] == "RuntimeError: boom"
    assert log.lines[1] == "100%|██████████| 10/10"
    assert log.lines[2] == "Traceback (most recent call last):"
    assert log.lines[4] == "torch.OutOfMemoryError: CUDA out of memory"
    assert log.final_error == 4


def test_each_fixture_entry_ranks_first_for_its_own_sample():
    for entry in entries():
        for signature in entry.signatures:
            sample = troubleshooting.signature_sample(signature)
            assert top(f"noise\n{sample}\nmore noise")[0] == entry.id, signature


def test_the_line_that_ended_the_run_outranks_an_earlier_match():
    log = (
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE\n"
        + "step\n" * 200
        + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n"
    )
    assert top(log)[:2] == ["cuda-out-of-memory", "nccl-watchdog-timeout"]
    swapped = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n"
        + "step\n" * 200
        + "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE\n"
    )
    assert top(swapped)[:2] == ["nccl-watchdog-timeout", "cuda-out-of-memory"]


def test_installed_versions_in_range_rank_higher():
    # The old client's 404 ended the run, just after a retry message of the newer client.
    both = (
        "ConnectionError: The vLLM server can't be reached at http://x:8000 after 240 seconds.\n"
        "Request failed: 404, Not Found\n"
    )
    old = {"trl": "0.19.1", "vllm": "0.22.0"}
    new = {"trl": "1.16.0", "vllm": "0.22.0"}
    assert top(both, old)[0] == "old-client-against-a-new-server"
    assert top(both, new)[0] == "the-vllm-server-cant-be-reached"
    (entry,) = [e for e in entries() if e.id == "old-client-against-a-new-server"]
    assert diagnosis.release_verdict(entry, old) is True
    assert diagnosis.release_verdict(entry, new) is False
    assert diagnosis.release_verdict(entry, {}) is None


def test_unmatched_log_names_the_closest_entries():
    log = diagnosis.clean_log("loading\nRuntimeError: NCCL timeout in collective operation\n")
    assert diagnosis.diagnose(log, entries(), {}) == []
    assert diagnosis.closest(log, entries())[0].id == "nccl-watchdog-timeout"


# --------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------


def test_text_report_gives_cause_confirm_fix_and_the_matched_line():
    proc = run(str(FIXTURES / "oom.log"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert "1. CUDA out of memory" in out and "matched line 5:" in out
    for label in ("cause:", "confirm:", "fix:", "upgrade:", "releases:", "source:"):
        assert label in out


def test_json_report_and_stdin():
    proc = run("--json", "-", stdin=(FIXTURES / "oom.log").read_text())
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    best = report["matches"][0]
    assert best["id"] == "cuda-out-of-memory" and best["matched"]["line"] == 5
    assert set(best) >= {"title", "cause", "confirm", "fix", "upgrade", "releases", "sources"}
    assert report["log"]["final_error_line"] == 5


def test_recorded_facts_steer_the_ranking(tmp_path):
    facts = json.loads((FACTS / "h100_8x_nvlink.json").read_text())
    facts["packages"]["trl"]["version"] = "0.19.1"
    path = tmp_path / "node.json"
    path.write_text(json.dumps(facts))
    log = "Request failed: 404, Not Found\n"
    report = json.loads(run("--json", "--facts", str(path), "-", stdin=log).stdout)
    assert report["versions"]["trl"] == "0.19.1" and report["versions_source"] == str(path)
    assert report["matches"][0]["release_match"] is True


def test_no_match_exits_1_and_never_prints_an_empty_screen():
    proc = run("-", stdin="all good\nRuntimeError: NCCL timeout in collective\n")
    assert proc.returncode == 1
    out = proc.stdout.decode()
    assert "No entry" in out and "nccl-watchdog-timeout" in out


@pytest.mark.parametrize(
    "args",
    [["/nonexistent.log"], ["--top", "0", "-"], ["--facts", "/nonexistent.json", "-"], ["--bogus"]],
)
def test_bad_usage_is_one_line_and_exit_2(args):
    proc = run(*args, stdin="x\n")
    assert proc.returncode == 2 and proc.stdout == b""
    assert len(proc.stderr.decode().strip().splitlines()) == 1


def test_directory_and_binary_logs(tmp_path):
    assert run(str(tmp_path)).returncode == 2
    binary = tmp_path / "core"
    binary.write_bytes(
        b"\x00\xff\xfe" * 1000
        + b"\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n"
    )
    proc = run("--json", str(binary))
    assert (
        proc.returncode == 0 and json.loads(proc.stdout)["matches"][0]["id"] == "cuda-out-of-memory"
    )


def test_nothing_in_the_log_is_run(tmp_path):
    marker = tmp_path / "ran"
    log = f"$(touch {marker})\n`touch {marker}`\n__import__('os').system('touch {marker}')\n"
    run("-", stdin=log)
    assert not marker.exists()


def test_a_long_log_is_read_from_its_end_from_a_file_or_a_pipe(monkeypatch):
    """Runs fail at the end: past the size limit only the last bytes are read, from a seekable
    file and from a pipe alike, and the report says so."""
    import io

    command = script_modules.load("diagnose")
    monkeypatch.setattr(command, "MAX_LOG_BYTES", 10)
    data = b"0123456789abcdefghij"

    class Pipe(io.RawIOBase):
        def __init__(self):
            self.rest = data

        def readable(self):
            return True

        def read(self, n=-1):
            chunk, self.rest = self.rest[:3], self.rest[3:]
            return chunk

    assert command._tail(io.BytesIO(data)) == (b"abcdefghij", True)
    assert command._tail(Pipe()) == (b"abcdefghij", True)
    assert command._tail(io.BytesIO(data[:10])) == (data[:10], False)
