"""references/troubleshooting.md as data: every entry parses, its signatures find it first in a
log, its releases and check-script fields are real, and logs shaped like the ones users paste
(launcher noise, interleaved ranks, progress bars, colours, tracebacks) reach the right entry.

test_diagnose.py tests the parser and the ranking on a small fixture; this file holds the real
reference to the same shape and to the targets of issue 11 (80 entries, 60 threads)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import script_modules
from _scaling import diagnosis, environment, troubleshooting
from docs_oracle import (
    REPO,
    SITE_PACKAGES,
    IdentifierChecker,
    Oracle,
    heading_anchors,
    inline_code_spans,
    links,
    load_doc,
    load_script_info,
    script_json_samples,
)
from packaging.specifiers import InvalidSpecifier, SpecifierSet

REFERENCE = REPO / "references" / "troubleshooting.md"
CHECK_SCRIPT = script_modules.SCRIPTS / "check_optional_backends.py"
MIN_ENTRIES, MIN_THREADS = 80, 60
MIN_SIGNATURE_CHARS = 25
KNOWN_DISTRIBUTIONS = {
    "trl", "vllm", "deepspeed", "bitsandbytes", "transformers", "accelerate", "peft", "torch",
    "unsloth", "kernels", "flash-attn",
}  # fmt: skip
GENERIC_LINES = {
    "traceback (most recent call last):",
    "runtimeerror: cuda error",
    "killed",
    "valueerror:",
    "runtimeerror:",
}
CHECK_ROOTS = ("packages", "accelerators", "environment", "backends", "torch_build", "config",
               "platform", "python", "vllm_server", "warnings")  # fmt: skip
MUTATING = re.compile(r"\b(?:pip3? (?:install|uninstall)|rm -|kill\b|export |pkill|--force)")


@functools.lru_cache(maxsize=1)
def entries() -> tuple:
    return tuple(troubleshooting.parse_reference(REFERENCE.read_text(encoding="utf-8")))


def by_id(entry_id: str) -> troubleshooting.Entry:
    (entry,) = [e for e in entries() if e.id == entry_id]
    return entry


def ranked(text: str, versions: dict | None = None) -> list:
    log = diagnosis.clean_log(text)
    return [m.entry.id for m in diagnosis.diagnose(log, list(entries()), versions or {})]


# --------------------------------------------------------------------------------------
# Shape and targets
# --------------------------------------------------------------------------------------


def test_every_level_3_heading_is_a_well_formed_entry():
    text = REFERENCE.read_text(encoding="utf-8")
    headings = [
        line for line, body in load_doc("references/troubleshooting.md").prose
        if body.startswith("### ")
    ]  # fmt: skip
    assert [e.line for e in entries()] == headings
    assert all(e.section for e in entries()), "every entry sits under a ## section"
    assert "#### " not in text.replace("\n```", "")  # no deeper headings to hide entries under


def test_issue_targets_entries_and_distinct_threads():
    threads = {t for e in entries() for t in e.threads}
    assert len(entries()) >= MIN_ENTRIES, len(entries())
    assert len(threads) >= MIN_THREADS, len(threads)


def test_every_entry_has_all_fields_filled():
    for e in entries():
        for name in ("cause", "confirm", "fix", "upgrade"):
            assert len(getattr(e, name)) >= 10, (e.id, name)
        assert e.sources, e.id


def test_signatures_are_distinctive_fragments():
    for e in entries():
        assert 1 <= len(e.signatures) <= 4, e.id
        for sig in e.signatures:
            literal = troubleshooting.PLACEHOLDER.sub("", sig).strip()
            assert len(literal) >= MIN_SIGNATURE_CHARS, (e.id, sig)
            assert sig.strip().lower() not in GENERIC_LINES, (e.id, sig)
            elided = sig.startswith("...") or re.search(r"\s\.\.\.(\s|$)", sig)
            assert not elided, f"{e.id}: use a {{placeholder}} for elided text, not '...': {sig}"


def test_no_two_entries_claim_the_same_signature():
    owner: dict = {}
    for e in entries():
        for sig in e.signatures:
            key = troubleshooting.PLACEHOLDER.sub("{}", sig).lower()
            assert owner.setdefault(key, e.id) == e.id, f"{sig!r}: {owner[key]} and {e.id}"


def test_each_signature_puts_its_own_entry_first():
    wrong = []
    for e in entries():
        for sig in e.signatures:
            sample = troubleshooting.signature_sample(sig)
            top = ranked(f"step 12/400 loss=1.93\n{sample}\nshutting down\n")
            if not top or top[0] != e.id:
                wrong.append(f"{e.id}: {sig!r} -> {top[:2]}")
    assert not wrong, "\n".join(wrong)


def test_a_placeholder_glued_to_a_word_still_matches():
    # `FlashAttention{n}` must find `FlashAttention2`: the word glued to the placeholder is only
    # part of a log word, so it is not required as a whole word.
    e = by_id("flashattention2-has-been-toggled-on-but-it-cannot-be-used")
    line = (
        "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the "
        "following error: the package for FlashAttention2 doesn't seem to be installed."
    )
    assert ranked(line)[0] == e.id
    glibc = "version `GLIBC_2.34' not found (required by /x/libbitsandbytes_cuda126.so)"
    assert ranked(glibc)[0] == "bitsandbytes-needs-a-newer-glibc-glibc_234-not-found"


# --------------------------------------------------------------------------------------
# Releases, sources, confirm steps, anchors
# --------------------------------------------------------------------------------------


def test_releases_name_known_distributions_with_valid_specifiers():
    for e in entries():
        assert e.releases or e.releases_text.lower().startswith("any"), e.id
        for dist, spec in e.releases:
            assert dist in KNOWN_DISTRIBUTIONS, (e.id, dist)
            try:
                SpecifierSet(spec)
            except InvalidSpecifier:
                pytest.fail(f"{e.id}: {dist}{spec} is not a PEP 440 specifier")


def test_source_lines_exist_in_the_installed_packages():
    for e in entries():
        for src in e.sources:
            if e.threads and src in e.threads:
                continue
            path, _, line = src.rpartition(":")
            f = SITE_PACKAGES / path
            if path.split("/")[0] not in {"trl", "transformers", "accelerate", "peft", "torch"}:
                pytest.fail(f"{e.id}: {src} is not in a package of the pinned stack")
            assert f.is_file(), (e.id, src)
            n = len(f.read_text(encoding="utf-8", errors="replace").splitlines())
            assert 1 <= int(line) <= n, (e.id, src)


@functools.lru_cache(maxsize=1)
def check_script_reports() -> dict:
    """The check script's real --json report(s) by root key, and keys documented as optional."""
    oracle = Oracle()
    oracle.scripts = {"scripts/check_optional_backends.py": load_script_info(CHECK_SCRIPT)}
    oracle.json_samples, oracle.json_optional = script_json_samples(oracle.scripts)
    return {"oracle": oracle, "checker": IdentifierChecker(oracle, {}, {}, {})}


def check_field(path: str) -> list:
    """Problems with one backticked check-script path named in a Confirm step."""
    root, _, rest = path.partition(".")
    if root == "environment":
        name = rest.split(".")[0]
        collected = name.startswith(environment.ENV_PREFIXES) or name in environment.ENV_NAMES
        return [] if collected else [f"`{path}`: the check script does not collect {name}"]
    reports = check_script_reports()
    if root in ("platform", "python"):
        node = reports["oracle"].json_samples.get(root, [None])[0]
        for part in rest.split("."):
            if not isinstance(node, dict) or part not in node:
                return [f"`{path}`: no key {part!r} in the report"]
            node = node[part]
        return []
    return reports["checker"].check_json_path(path, "Confirm")


def confirm_fields(entry: troubleshooting.Entry) -> list:
    spans = inline_code_spans(entry.confirm)
    return [s for s in spans if re.match(r"(%s)(\.|\[|$)" % "|".join(CHECK_ROOTS), s)]


def test_confirm_fields_exist_in_the_check_scripts_report():
    problems = []
    named = 0
    for e in entries():
        for path in confirm_fields(e):
            named += 1
            problems += [f"{e.id}: {p}" for p in check_field(path)]
    assert named >= len(entries()) // 2, "most entries should point at a check-script field"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "path",
    [
        "packages.vllm.versoin",
        "accelerators.devices[].compute_capabilty",
        "environment.PATH",
        "platform.glibc",
        "backends.nosuch.status",
    ],
)
def test_the_field_check_rejects_fields_the_script_does_not_report(path):
    assert check_field(path)


def test_confirm_steps_change_nothing():
    for e in entries():
        assert not MUTATING.search(e.confirm), f"{e.id}: Confirm must be read-only: {e.confirm}"


def test_links_into_the_reference_resolve():
    anchors = heading_anchors(load_doc("references/troubleshooting.md"))
    assert {e.id for e in entries()} <= anchors  # the ids diagnose.py prints are real anchors
    texts = [REPO / "SKILL.md", REPO / "README.md", *sorted((REPO / "references").glob("*.md"))]
    wanted = []
    for path in texts:
        for target in re.findall(r"\(([^)\s]*troubleshooting\.md#[^)\s]+)\)", path.read_text()):
            wanted.append((path.name, target.partition("#")[2]))
    evals = json.loads((REPO / "evals" / "evals.json").read_text())
    for hit in re.findall(r"troubleshooting\.md#([\w-]+)", json.dumps(evals)):
        wanted.append(("evals.json", hit))
    missing = [(where, a) for where, a in wanted if a not in anchors]
    assert not missing, missing
    internal = [t for _, _, t in links(load_doc("references/troubleshooting.md"))]
    assert all(t.partition("#")[2] in anchors for t in internal if t.startswith("#"))


# Anchors that readers, evals and other skills may hold: the sections and the entries that
# existed before the reference took its parsed shape. Renaming one breaks their links.
STABLE_ANCHORS = (
    "triage-in-60-seconds", "failed-imports-of-installed-packages", "missing-extras",
    "cuda-unavailable", "bf16-on-pre-ampere-gpus", "flashattention-and-compute-capability",
    "vllm-server-unreachable", "vllm-server-started-without-what-trl-needs",
    "nccl-during-weight-sync", "vllm-outside-the-supported-window", "out-of-memory",
    "parallel-size-mismatches", "launch-and-accelerate-config-errors",
    "peft-and-quantization-errors", "fsdp2-option-errors", "deepspeed-zero-3-with-peft",
    "context-and-sequence-parallelism", "liger-and-kernels-hub", "warnings-that-are-not-errors",
    "no-completions-were-generated", "service-constraints-on-shared-machines",
    "cannot-open-shared-object-file", "undefined-symbol-flash-attn-after-a-torch-upgrade",
    "unsloth-cannot-find-any-torch-accelerator",
    "vllm-is-not-available-and-use_vllm-is-set-to-true",
    "you-passed-peft_config-but-the-peft-library-is-not-installed", "kernels-are-not-available",
    "bitsandbytes-missing-or-too-old", "your-setup-doesnt-support-bf16gpu",
    "your-installed-torch-does-not-include-kernels-for-this-gpu",
    "the-vllm-server-cant-be-reached", "does-not-expose-its-development-endpoints",
    "has-no-weight-transfer-engine", "does-not-serve-v1chatcompletionsrender",
    "the-vllm-server-runs-with---logprobs-mode", "weight-synchronization-needs-a-cuda-device",
    "must-divide-world-size-evenly", "generation_batch_size-must-be-divisible",
    "parallelismconfig-total_size-does-not-match-num_processes", "nndataparallel",
    "you-need-to-use-at-least-2-processes-to-use---multi_gpu",
    "when-using-deepspeed_config_file-the-following-accelerate-config-variables-will-be-ignored",
    "you-cant-train-a-model-that-has-been-loaded-with-device_mapauto-in-any-distributed-mode",
    "accelerate-config-is-neither-a-file-nor-a-valid-config",
    "quantization_config-set-in-two-places", "applying-a-peft-adapter-to-lm_head-is-not-supported",
    "activation-checkpointing-set-twice", "forward_prefetch-is-not-yet-implemented-in-fsdp2",
    "reshard_after_forward-must-be-a-bool", "packing-is-not-compatible-with-context-parallelism",
    "grpotrainer-does-not-support-sequence-dim-parallelism",
    "liger_kernel_config-fused_linear_cross_entropy-is-not-supported",
    "use_kernelstrue-requires-a-newer-transformers",
)  # fmt: skip


def test_anchors_that_existed_before_still_resolve():
    anchors = heading_anchors(load_doc("references/troubleshooting.md"))
    assert not [a for a in STABLE_ANCHORS if a not in anchors]


# --------------------------------------------------------------------------------------
# Logs shaped like the ones users paste
# --------------------------------------------------------------------------------------

ANSI_RED, ANSI_YELLOW, ANSI_OFF = "\x1b[31m", "\x1b[33m", "\x1b[0m"


def torchrun_banner(nproc: int) -> str:
    stamp = "W1130 10:02:11.482000 140211 torch/distributed/run.py:793]"
    return (
        f"{stamp} \n{stamp} *****************************************\n"
        f"{stamp} Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
        "default, to avoid your system being overloaded, please further tune the variable for "
        "optimal performance in your application as needed.\n"
        f"{stamp} *****************************************\n"
        + "".join(f"[rank{r}]: INFO: process {r} of {nproc} started\n" for r in range(nproc))
    )


def accelerate_defaults_notice() -> str:
    return (
        "The following values were not passed to `accelerate launch` and had defaults used "
        "instead:\n\t`--num_processes` was set to a value of `4`\n\t\tMore than one GPU was "
        "found, enabling multi-GPU training.\n\t`--num_machines` was set to a value of `1`\n"
        "\t`--mixed_precision` was set to a value of `'no'`\nTo avoid this warning pass in "
        "values for each of the problematic parameters or run `accelerate config`.\n"
    )


def warnings_noise() -> str:
    return (
        f"{ANSI_YELLOW}/opt/conda/lib/python3.11/site-packages/transformers/training_args.py:1541:"
        f" FutureWarning: `gradient_checkpointing` is deprecated and will be removed in v6. Use "
        f"`activation_checkpointing` instead.{ANSI_OFF}\n  warnings.warn(\n"
        "Loading checkpoint shards: 100%|██████████| 4/4 [00:03<00:00,  1.21it/s]\n"
        "wandb: Tracking run with wandb version 0.19.1\n"
    )


def progress(steps: int, total: int = 500) -> str:
    bars = "".join(
        f"\r {s * 100 // total:3d}%|{'█' * (s * 10 // total):<10}| {s}/{total} "
        f"[{s // 6:02d}:{s % 60:02d}<1:10:00,  7.2s/it]"
        for s in range(1, steps + 1)
    )
    return bars + "\n{'loss': 1.8342, 'grad_norm': 3.1, 'learning_rate': 1e-05, 'epoch': 0.01}\n"


def traceback(frames: list, last: str, rank: int | None = None) -> str:
    prefix = f"[rank{rank}]: " if rank is not None else ""
    lines = ["Traceback (most recent call last):"]
    for path, n, fn in frames:
        lines += [f'  File "{path}", line {n}, in {fn}', "    ..."]
    lines.append(last)
    return "".join(f"{prefix}{line}\n" for line in lines)


def elastic_failure(exitcode: int, rank: int = 1) -> str:
    return (
        f"E1130 10:41:07.220000 140211 torch/distributed/elastic/multiprocessing/api.py:869] "
        f"failed (exitcode: {exitcode}) local_rank: {rank} (pid: 2213) of binary: "
        "/opt/conda/bin/python3.11\nTraceback (most recent call last):\n"
        '  File "/opt/conda/bin/torchrun", line 8, in <module>\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\ntrain.py FAILED\n"
        "------------------------------------------------------------\nFailures:\n"
        "  <NO_OTHER_FAILURES>\nRoot Cause (first observed failure):\n[0]:\n"
        f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {exitcode} (pid: 2213)\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n"
    )


SITE = "/opt/conda/lib/python3.11/site-packages/"
TRAINER = SITE + "transformers/trainer.py"
ACCEL = SITE + "accelerate/accelerator.py"

REAL_SHAPED_LOGS = {
    "nccl-watchdog-collective-operation-timeout": (
        torchrun_banner(4)
        + warnings_noise()
        + "[rank0]: INFO 11-30 10:05:01 vllm_client.py:300] Server is not up yet. Retrying in 2.0 seconds...\n"
        * 3
        + progress(12)
        + "".join(
            f"[rank{r}]:[E1130 10:35:03.101 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=88, OpType=BROADCAST, NumelIn=1, "
            f"NumelOut=1, Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out.\n"
            for r in (1, 3, 2)
        )
        + "[rank2]:[E1130 10:35:03.300 ProcessGroupNCCL.cpp:1785] [PG 0 Rank 2] Exception (either "
        "an error or timeout) detected by watchdog at work: 88, last enqueued NCCL work: 88.\n"
        + elastic_failure(-6)
    ),
    "a-rank-was-killed-with-exitcode--9-host-out-of-memory": (
        torchrun_banner(8)
        + "Loading checkpoint shards:  50%|█████     | 2/4 [01:12<01:12, 36.1s/it]\r"
        + "W1130 10:12:44.001000 140211 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 2214 closing signal SIGTERM\n"
        + elastic_failure(-9, rank=3)
        + "Signal 9 (SIGKILL) received by PID 2216\n"
    ),
    "deepspeed-cannot-find-cuda_home-or-nvcc": (
        accelerate_defaults_notice()
        + "[2026-11-30 10:00:03,120] [INFO] [real_accelerator.py:254:get_accelerator] Setting "
        "ds_accelerator to cuda (auto detect)\n"
        + traceback(
            [
                ("/work/train.py", 3, "<module>"),
                (SITE + "deepspeed/__init__.py", 25, "<module>"),
                (SITE + "deepspeed/ops/op_builder/builder.py", 52, "installed_cuda_version"),
            ],
            "deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, "
            "unable to compile CUDA op(s)",
        )
        + "E1130 10:00:04.500000 140211 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: 1) local_rank: 0 (pid: 3001) of binary: /opt/conda/bin/python\n"
    ),
    "bitsandbytes-was-compiled-without-gpu-support": (
        f"{ANSI_YELLOW}/opt/conda/lib/python3.11/site-packages/bitsandbytes/cextension.py:34: "
        "UserWarning: The installed version of bitsandbytes was compiled without GPU support. "
        f"8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable.{ANSI_OFF}\n"
        '  warn("The installed version of bitsandbytes was compiled without GPU support. "\n'
        + traceback(
            [("/work/sft.py", 41, "<module>"), (TRAINER, 2240, "train")],
            "AttributeError: 'NoneType' object has no attribute 'cadam32bit_grad_fp32'",
        )
    ),
    "fsdp-cannot-flatten-integer-dtype-tensors-qlora": (
        torchrun_banner(2)
        + accelerate_defaults_notice()
        + "".join(
            traceback(
                [
                    ("/work/qlora.py", 88, "<module>"),
                    (TRAINER, 2365, "_inner_training_loop"),
                    (ACCEL, 1480, "prepare_model"),
                    (
                        SITE + "torch/distributed/fsdp/_flat_param.py",
                        811,
                        "_validate_tensors_to_flatten",
                    ),
                ],
                "ValueError: Cannot flatten integer dtype tensors",
                rank=r,
            )
            for r in (0, 1)
        )
        + elastic_failure(1, rank=0)
    ),
    "ddp-expected-to-mark-a-variable-ready-only-once": (
        torchrun_banner(2)
        + progress(3)
        + traceback(
            [
                ("/work/dpo.py", 120, "<module>"),
                (TRAINER, 3800, "training_step"),
                (SITE + "torch/autograd/graph.py", 823, "_engine_run_backward"),
            ],
            "RuntimeError: Expected to mark a variable ready only once. This error is caused by "
            "one of the following reasons: 1) Use of a module parameter outside the `forward` "
            "function. Parameter at index 191 with name "
            "base_model.model.model.layers.31.mlp.down_proj.lora_B.default.weight has been marked "
            "as ready twice. This means that multiple autograd engine  hooks have fired for this "
            "particular parameter during this iteration.",
            rank=1,
        )
        + elastic_failure(1)
    ),
    "the-vllm-server-cant-be-reached": (
        warnings_noise()
        + "INFO 11-30 10:00:00 vllm_client.py:300] Server is not up yet. Retrying in 2.0 seconds...\n"
        * 5
        + traceback(
            [
                ("/work/grpo.py", 60, "<module>"),
                (SITE + "trl/generation/vllm_client.py", 289, "check_server"),
            ],
            "ConnectionError: The vLLM server can't be reached at http://0.0.0.0:8000 after 240.0 "
            "seconds. Make sure the server is running by running `vllm serve`.",
        )
    ),
    "request-failed-404-detailnot-found-client-and-server-speak-different-protocols": (
        torchrun_banner(2)
        + traceback(
            [
                ("/work/grpo.py", 70, "<module>"),
                (SITE + "trl/extras/vllm_client.py", 195, "init_communicator"),
            ],
            'Exception: Request failed: 404, {"detail":"Not Found"}',
            rank=0,
        )
        + "[rank1]:[W1130 10:03:00 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group "
        "has NOT been destroyed before we destruct ProcessGroupNCCL.\n"
    ),
    "cannot-import-name-guideddecodingparams-from-vllmsampling_params": (
        "INFO 11-30 10:00:00 [__init__.py:239] Automatically detected platform cuda.\n"
        + traceback(
            [("/work/grpo.py", 2, "<module>"), (SITE + "trl/import_utils.py", 140, "_get_module")],
            "RuntimeError: Failed to import trl.trainer.grpo_trainer because of the following "
            "error (look up to see its traceback):\ncannot import name 'GuidedDecodingParams' "
            "from 'vllm.sampling_params' (/opt/conda/lib/python3.11/site-packages/vllm/"
            "sampling_params.py)",
        )
    ),
    "free-memory-on-device-is-less-than-desired-gpu-memory-utilization": (
        "INFO 11-30 10:00:03 [gpu_model_runner.py:1770] Model loading took 14.25 GiB and "
        "4.1 seconds\n"
        + "(EngineCore_0 pid=4411) ERROR 11-30 10:00:05 [core.py:700] EngineCore failed to "
        "start.\n"
        + "(EngineCore_0 pid=4411) ERROR 11-30 10:00:05 [core.py:700] ValueError: Free memory on "
        "device (31.2/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, "
        "71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
        "processes.\n"
        + "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}\n"
    ),
    "cuda-out-of-memory-during-training": (
        torchrun_banner(4)
        + warnings_noise()
        + progress(40)
        + traceback(
            [("/work/sft.py", 55, "<module>"), (TRAINER, 3801, "training_step")],
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a "
            "total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, "
            "this process has 78.16 GiB memory in use.",
            rank=0,
        )
        + elastic_failure(1, rank=0)
    ),
    "nndataparallel": (
        warnings_noise()
        + traceback(
            [
                ("/work/sft.py", 30, "<module>"),
                (SITE + "trl/trainer/sft_trainer.py", 1120, "__init__"),
            ],
            "ValueError: SFTTrainer does not support `nn.DataParallel`, which `Trainer` uses when "
            "several GPUs are visible to a single process. Launch the script with `accelerate "
            "launch` or `torchrun`, or make a single GPU visible with `CUDA_VISIBLE_DEVICES`.",
        )
    ),
    "cuda-error-invalid-device-ordinal-more-processes-than-visible-gpus": (
        torchrun_banner(8)
        + "".join(
            traceback(
                [
                    ("/work/train.py", 9, "<module>"),
                    (SITE + "accelerate/state.py", 280, "__init__"),
                    (SITE + "torch/cuda/__init__.py", 567, "set_device"),
                ],
                "torch.AcceleratorError: CUDA error: invalid device ordinal\nCUDA kernel errors "
                "might be asynchronously reported at some other API call, so the stacktrace below "
                "might be incorrect.\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
                "assertions.",
                rank=r,
            )
            for r in (5, 4, 7, 6)
        )
        + elastic_failure(1, rank=4)
    ),
    "the-server-socket-has-failed-to-listen-on-any-local-network-address-port-in-use": (
        "[W1130 10:00:01.000000 socket.cpp:755] [c10d] The server socket has failed to listen on "
        "any local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, "
        "message: address already in use\n"
        + traceback(
            [
                ("/opt/conda/bin/accelerate", 8, "<module>"),
                (SITE + "torch/distributed/rendezvous.py", 198, "_create_c10d_store"),
            ],
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, "
            "message: address already in use",
        )
    ),
    "unsloth-currently-does-not-support-multi-gpu-setups": (
        "🦥 Unsloth: Will patch your computer to enable 2x faster free finetuning.\n"
        "==((====))==  Unsloth 2024.11.7: Fast Llama patching. Transformers:4.46.2.\n"
        + accelerate_defaults_notice()
        + traceback(
            [("/work/train.py", 80, "<module>"), ("<string>", 157, "train")],
            "RuntimeError: Unsloth currently does not support multi GPU setups - but we are "
            "working on it!",
            rank=0,
        )
    ),
    "the-global-train-batch-size-must-be-evenly-divisible-by-the-number-of-generations-trl-015019": (
        accelerate_defaults_notice()
        + traceback(
            [
                ("/work/grpo.py", 40, "<module>"),
                (SITE + "trl/trainer/grpo_trainer.py", 402, "__init__"),
            ],
            "ValueError: The global train batch size (3 x 4) must be evenly divisible by the "
            "number of generations per prompt (8). Given the current train batch size, the valid "
            "values for the number of generations are: [2, 3, 4, 6, 12].",
            rank=2,
        )
    ),
    "flash-attn-build-no-module-named-torch": (
        "Collecting flash-attn\n  Downloading flash_attn-2.8.3.tar.gz (8.4 MB)\n"
        "     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 8.4/8.4 MB 52.1 MB/s eta 0:00:00\n"
        "  Installing build dependencies ... done\n"
        f"  Getting requirements to build wheel ... {ANSI_RED}error{ANSI_OFF}\n"
        f"  {ANSI_RED}error{ANSI_OFF}: subprocess-exited-with-error\n"
        "  × Getting requirements to build wheel did not run successfully.\n"
        "  │ exit code: 1\n  ╰─> [20 lines of output]\n"
        "      Traceback (most recent call last):\n"
        '        File "<string>", line 19, in <module>\n'
        "      ModuleNotFoundError: No module named 'torch'\n      [end of output]\n"
        "error: subprocess-exited-with-error\n"
    ),
    "hub-kernel-cannot-find-a-build-variant-for-this-system": (
        warnings_noise()
        + traceback(
            [
                ("/work/sft.py", 12, "<module>"),
                (
                    SITE + "transformers/integrations/hub_kernels.py",
                    873,
                    "load_and_register_attn_kernel",
                ),
            ],
            "ValueError: An error occurred while trying to load from 'kernels-community/flash-attn2': "
            "Cannot find a build variant for this system in kernels-community/flash-attn2 "
            "(revision: main). Available variants: torch27-cxx11-cu126-x86_64-linux.",
        )
    ),
    "bfloat16-is-only-supported-on-gpus-with-compute-capability-of-at-least-80": (
        "INFO 11-30 10:00:00 [api_server.py:1000] vLLM API server version 0.8.5\n"
        "WARNING 11-30 10:00:01 [config.py:2972] Casting torch.float16 to torch.bfloat16.\n"
        + traceback(
            [("/opt/conda/bin/vllm", 8, "<module>")],
            "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least "
            "8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 instead by "
            "explicitly setting the `dtype` flag in CLI, for example: --dtype=half.",
        )
    ),
    "zero-3-weight-must-be-2-d": (
        torchrun_banner(4)
        + "[2026-11-30 10:00:08,100] [INFO] [partition_parameters.py:348:__exit__] finished "
        "initializing model - num_params = 291, num_elems = 7.62B\n"
        + progress(1)
        + traceback(
            [
                ("/work/distill.py", 140, "compute_loss"),
                (SITE + "torch/nn/functional.py", 2551, "embedding"),
            ],
            "RuntimeError: 'weight' must be 2-D",
            rank=3,
        )
        + elastic_failure(1, rank=3)
    ),
    "nccl-unhandled-system-error": (
        torchrun_banner(2)
        + traceback(
            [
                ("/work/train.py", 20, "<module>"),
                (SITE + "torch/distributed/distributed_c10d.py", 2501, "all_reduce"),
            ],
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:275, unhandled system error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.21.5\nncclSystemError: System call (e.g. socket, malloc) or external "
            "library call failed or device error. \nLast error:\nError while creating shared "
            "memory segment /dev/shm/nccl-vzIpS6 (size 9637888)",
            rank=0,
        )
    ),
}


def test_real_shaped_logs_cover_many_sections():
    sections = {by_id(entry_id).section for entry_id in REAL_SHAPED_LOGS}
    assert len(REAL_SHAPED_LOGS) >= 15 and len(sections) >= 10, sections


@pytest.mark.parametrize("expected", sorted(REAL_SHAPED_LOGS))
def test_real_shaped_log_puts_the_right_entry_first(expected):
    top = ranked(REAL_SHAPED_LOGS[expected])
    assert top and top[0] == expected, top


def test_progress_bar_redrawn_on_the_error_line_is_not_the_error():
    # A rank's error printed right after another rank's tqdm redraw lands on the bar's line.
    log = (
        progress(30).rstrip("\n").rsplit("\n", 1)[0]
        + "[rank1]:[E1130 10:35:03.101 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600093 milliseconds before timing out.\n"
        + accelerate_defaults_notice()
    )
    cleaned = diagnosis.clean_log(log)
    assert cleaned.final_error is not None
    assert "Watchdog caught" in cleaned.lines[cleaned.final_error]
    assert ranked(log)[0] == "nccl-watchdog-collective-operation-timeout"


def test_a_message_wrapped_over_two_lines_is_found():
    # pip/uv indent and wrap build output; issue pastes are often hard-wrapped.
    log = (
        "      ValueError: SFTTrainer does not support `nn.DataParallel`, which `Trainer` uses\n"
        "      when several GPUs are visible to a single process. Launch the script with\n"
        "      `accelerate launch` or `torchrun`.\nerror: subprocess-exited-with-error\n"
    )
    cleaned = diagnosis.clean_log(log)
    (best,) = diagnosis.diagnose(cleaned, list(entries()), {}, limit=1)
    assert best.entry.id == "nndataparallel" and best.line_index == 0


def test_installed_versions_outside_an_entrys_releases_rank_it_lower():
    # The same 404 line: the old-client entry for TRL 0.19, still found (not hidden) for 1.16.
    line = 'Exception: Request failed: 404, {"detail":"Not Found"}\n'
    entry = by_id("request-failed-404-detailnot-found-client-and-server-speak-different-protocols")
    assert diagnosis.release_verdict(entry, {"trl": "0.19.1"}) is True
    assert diagnosis.release_verdict(entry, {"trl": "0.15.2"}) is False
    assert ranked(line, {"trl": "0.15.2"})[0] == entry.id


def test_the_cli_reads_the_real_reference():
    log = REAL_SHAPED_LOGS["nndataparallel"]
    proc = subprocess.run(
        [sys.executable, str(script_modules.SCRIPTS / "diagnose.py"), "--json", "-"],
        input=log.encode(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    best = json.loads(proc.stdout)["matches"][0]
    assert best["id"] == "nndataparallel" and best["release_match"] is True
    assert Path(json.loads(proc.stdout)["reference"]).name == "troubleshooting.md"
