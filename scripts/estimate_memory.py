#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Estimate per-GPU memory of a TRL fine-tuning run for each scaling strategy and recommend one.

Stdlib only, Python 3.9+. The arithmetic lives in _scaling/memory.py (model states after the ZeRO
paper, QLoRA storage after Dettmers et al., TRL 1.16.0 defaults); every assumption is listed in
the output.
"""

import os
import sys

PROG = "estimate_memory.py"
if sys.version_info < (3, 9):  # noqa: UP036 (the one line older Pythons get)
    sys.stderr.write(f"{PROG}: needs Python 3.9 or newer; this is {sys.version.split()[0]}\n")
    sys.exit(2)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under -I / PYTHONSAFEPATH

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402

from _scaling import cli, facts  # noqa: E402
from _scaling.files import read_text  # noqa: E402
from _scaling.memory import (  # noqa: E402
    DTYPE_BYTES,
    GB,
    OPTIMIZERS,
    TRAINERS,
    Settings,
    build_report,
)
from _scaling.model_shape import ModelShape, count_params, shape_from_params  # noqa: E402

COLUMNS = (
    ("weights_gb", "weights"),
    ("gradients_gb", "grads"),
    ("optimizer_gb", "optim"),
    ("gather_buffer_gb", "gather"),
    ("activations_gb", "activ"),
    ("reference_model_gb", "ref"),
    ("vllm_gb", "vllm"),
    ("total_gb", "total"),
)


def render_text(report: dict) -> str:
    inputs, model = report["inputs"], report["model"]
    lines = [
        f"Model: {model['params']:,} params ({model['source']}), trainable "
        f"{model['trainable_params']:,}",
        f"Run: {inputs['trainer']} {inputs['tuning']} {inputs['dtype']} {inputs['optimizer']}, "
        f"seq {inputs['seq_len']} x micro-batch {inputs['batch_size']}, gradient checkpointing "
        f"{'on' if inputs['gradient_checkpointing'] else 'off'}, {inputs['gpus']} GPU(s) x "
        f"{inputs['gpu_memory_gb']:g} GB, usable {report['usable_gb_per_gpu']:g} GB per GPU",
        "",
        "Per-GPU GB (1e9 bytes):",
    ]
    lines += _table(report["strategies"])
    rec = report["recommendation"]
    lines += ["", f"Recommendation: {rec['strategy'] or 'none fits'}"]
    lines += [f"  change: {change}" for change in rec["changes"]]
    lines += [f"  reason: {rec['reason']}", "", "Assumptions:"]
    lines += [f"  - {text}" for text in report["assumptions"]]
    return "\n".join(lines)


def _table(strategies: dict) -> list:
    """Right-aligned columns, each as wide as its widest cell plus a space: never merged."""
    cells = {name: [f"{row[key]:.2f}" for key, _ in COLUMNS] for name, row in strategies.items()}
    widths = [
        1 + max(len(title), *(len(c[i]) for c in cells.values()))
        for i, (_, title) in enumerate(COLUMNS)
    ]
    head = "strategy".ljust(14) + "".join(t.rjust(w) for (_, t), w in zip(COLUMNS, widths))
    lines = [head + "  fits"]
    for name, row in strategies.items():
        text = name.ljust(14) + "".join(c.rjust(w) for c, w in zip(cells[name], widths))
        extra = f"  (CPU {row['cpu_offload_gb']:.2f} GB)" if row["offload"] else ""
        lines.append(f"{text}  {'yes' if row['fits'] else 'no'}{extra}")
    return lines


EPILOG = """\
examples:
  estimate_memory.py --params 8e9 --trainer sft --gpus 1 --gpu-memory-gb 24
  estimate_memory.py --model-config ./Qwen3-8B/config.json --trainer grpo --tuning lora \\
      --vllm-mode colocate --gpus 8 --gpu-memory-gb 80 --json

Without --gpus/--gpu-memory-gb the visible GPUs are read like check_optional_backends.py does
(or from --facts FILE, facts recorded there with --json).
Gigabytes are 1e9 bytes. Every assumption is listed in the report.

exit codes:
  0  report made (whether or not anything fits)
  2  bad input: a one-line error names what was expected
  3  unexpected internal error (one line, no traceback)
"""


def _positive(kind: type):
    def parse(text):
        try:
            value = kind(float(text)) if kind is int and "e" in text.lower() else kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number")
        return value

    return parse


DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}


def _dtype(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPE_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of bf16, fp16, fp32")
    return name


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 1)")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(
        prog="estimate_memory.py",
        description="Per-GPU memory per scaling strategy (DDP, ZeRO-1/2/3, FSDP2, offload) for a "
        "TRL 1.16.0 fine-tuning run, and a recommendation.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--params", type=_positive(float), help="parameter count, e.g. 7.5e9")
    src.add_argument("--model-config", help="local Hugging Face config.json of a causal LM")
    p.add_argument("--vocab-size", type=_positive(int), default=32000, help="with --params")
    p.add_argument("--trainer", choices=TRAINERS, default="sft")
    p.add_argument("--tuning", choices=("full", "lora", "qlora"), default="full")
    p.add_argument("--lora-r", type=_positive(int), default=16, help="ModelConfig.lora_r default")
    p.add_argument(
        "--lora-targets", default="all-linear", help="all-linear or a comma list of module names"
    )
    p.add_argument("--no-double-quant", action="store_true", help="QLoRA without nested quant")
    p.add_argument(
        "--dtype", type=_dtype, default="bf16", help="bf16, fp16 or fp32 (torch names accepted)"
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument("--master-weights", choices=("fp32", "none"), default="fp32")
    p.add_argument("--seq-len", type=_positive(int), default=1024, help="tokens per sequence")
    p.add_argument("--batch-size", type=_positive(int), default=8, help="per-device micro-batch")
    p.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="TRL configs default to True",
    )
    p.add_argument("--attention", choices=("sdpa", "flash", "eager"), default="sdpa")
    p.add_argument(
        "--fused-loss",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="TRL 1.16.0 fused LM head (sft, dpo, kto, grpo, rloo)",
    )
    p.add_argument("--beta", type=float, help="KL coefficient for grpo/rloo (default: TRL's)")
    p.add_argument("--precompute-ref-log-probs", action="store_true", help="dpo/kto")
    p.add_argument("--num-generations", type=_positive(int), help="grpo/rloo (informational)")
    p.add_argument("--gpus", type=_positive(int), help="default: the visible GPUs")
    p.add_argument(
        "--gpu-memory-gb", type=_positive(float), help="default: the smallest visible GPU"
    )
    p.add_argument("--vllm-mode", choices=("none", "colocate", "server"), default="none")
    p.add_argument("--vllm-gpu-memory-utilization", type=_fraction, default=0.3)
    p.add_argument("--headroom", type=_fraction, default=0.1, help="fraction kept free")
    p.add_argument(
        "--cpu-memory-gb", type=_positive(float), help="CPU RAM per node, checked for offload"
    )
    p.add_argument(
        "--facts", metavar="FILE", help="GPUs from facts recorded with check_optional_backends.py"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def detect_gpus(recorded: "str | None" = None) -> tuple:
    """(count, smallest total memory in GB) of the GPUs this process sees, or that `recorded`
    facts saw."""
    hint = "pass --gpus and --gpu-memory-gb"
    try:
        seen = facts.load_facts(recorded) if recorded else facts.collect_facts()
    except facts.FactsError as exc:
        raise cli.UsageError(str(exc)) from None
    memories = facts.gpu_memories_mib(seen)
    if not memories:
        kind = seen["accelerators"].get("kind")
        raise cli.UsageError(f"no GPU with a known memory size visible ({kind}); {hint}")
    return len(memories), min(memories) * 2**20 / GB


def load_config(path: str) -> dict:
    text = read_text(path)
    if text is None:
        raise cli.UsageError(f"cannot read {path}")
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise cli.UsageError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise cli.UsageError(f"{path} is not a config.json object")
    return config


def model_shape(params: "float | None", config_path: "str | None", vocab: int) -> ModelShape:
    if params is None and config_path is None:
        raise cli.UsageError("pass one of --params or --model-config")
    if params is not None:
        return shape_from_params(params, vocab)
    config = load_config(config_path)
    try:
        return count_params(config)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise cli.UsageError(f"{config_path}: missing or bad field {exc}") from None


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The parsed command line as Settings; --gpus and --gpu-memory-gb must be filled in."""
    if args.vllm_mode != "none" and args.trainer not in ("grpo", "rloo"):
        raise cli.UsageError("--vllm-mode applies to --trainer grpo or rloo only")
    return Settings(
        trainer=args.trainer,
        tuning=args.tuning,
        lora_r=args.lora_r,
        lora_targets=args.lora_targets,
        dtype=args.dtype,
        optimizer=args.optimizer,
        master_weights=args.master_weights,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        gradient_checkpointing=args.gradient_checkpointing,
        gpus=args.gpus,
        gpu_memory_gb=args.gpu_memory_gb,
        vllm_mode=args.vllm_mode,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        attention=args.attention,
        fused_loss=args.fused_loss,
        headroom=args.headroom,
        cpu_memory_gb=args.cpu_memory_gb,
        double_quant=not args.no_double_quant,
        beta=args.beta,
        precompute_ref_log_probs=args.precompute_ref_log_probs,
    )


def main(argv: "list | None" = None) -> int:
    args = build_parser().parse_args(argv)
    shape = model_shape(args.params, args.model_config, args.vocab_size)
    if args.gpus is None or args.gpu_memory_gb is None:
        gpus, memory = detect_gpus(args.facts)
        args.gpus, args.gpu_memory_gb = args.gpus or gpus, args.gpu_memory_gb or memory
    report = build_report(shape, settings_from_args(args))
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    return cli.EXIT_OK


def entry() -> None:
    """The command (also the entry point of a zipapp built from scripts/)."""
    cli.run(main, PROG)


if __name__ == "__main__":
    entry()
