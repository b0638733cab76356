#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Per-GPU memory of a TRL 1.16.0 fine-tuning run for each scaling strategy (DDP, ZeRO-1/2/3,
FSDP2, offload), vLLM's share and host RAM checked, and the least invasive plan that fits.

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
import re  # noqa: E402

from _scaling import cli, facts  # noqa: E402
from _scaling.files import read_text  # noqa: E402
from _scaling.memory import (  # noqa: E402
    DTYPE_ALIASES,
    DTYPE_BYTES,
    GB,
    GIB,
    OPTIMIZERS,
    TRAINERS,
    Settings,
    build_report,
    card_gib,
)
from _scaling.model_shape import (  # noqa: E402
    MAX_PARAMS,
    ModelShape,
    count_params,
    shape_from_params,
)

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
    inputs, model, gpu = report["inputs"], report["model"], report["gpu"]
    lines = [
        f"Model: {model['params']:,} params ({model['source']}), trainable "
        f"{model['trainable_params']:,}",
        f"Run: {inputs['trainer']} {inputs['tuning']} {_dtypes(inputs)} {inputs['optimizer']}, "
        f"seq {inputs['seq_len']} x micro-batch {inputs['batch_size']}, gradient checkpointing "
        f"{'on' if inputs['gradient_checkpointing'] else 'off'}",
        f"GPUs: {inputs['gpus']} x {gpu['memory_gib']:g} GiB = {gpu['memory_gb']:.2f} GB "
        f"({gpu['source']}); usable {report['usable_gb_per_gpu']:g} GB per GPU",
        f"Host RAM: {_host_line(report['host'])}",
    ]
    if report["vllm"]:
        lines.append(_vllm_line(report["vllm"]))
    lines += ["", "Per-GPU GB (1e9 bytes):"]
    lines += _table(report["strategies"])
    rec = report["recommendation"]
    head = rec["strategy"] or "none fits"
    lines += ["", f"Recommendation: {head}{' (tight)' if rec['tight'] else ''}"]
    lines += [f"  change: {change}" for change in rec["changes"]]
    lines += [f"  reason: {rec['reason']}", "", "Assumptions:"]
    lines += [f"  - {text}" for text in report["assumptions"]]
    return "\n".join(lines)


def _dtypes(inputs: dict) -> str:
    compute = inputs["compute_dtype"]
    if compute and compute != inputs["dtype"]:
        return f"{inputs['dtype']} weights / {compute} compute"
    return inputs["dtype"]


def _host_line(host: dict) -> str:
    if host["ram_gb"] is None:
        return f"unknown ({host['source']}); offload plans not checked"
    return f"{host['ram_gb']:g} GB per node ({host['source']})"


def _vllm_line(v: dict) -> str:
    return (
        f"vLLM {v['mode']} (TP {v['tensor_parallel_size']}, utilization "
        f"{v['gpu_memory_utilization']:g}): needs {v['needed_gb']:.2f} GB per GPU "
        f"({v['weights_gb']:.2f} weights + {v['kv_cache_gb']:.2f} KV cache for "
        f"{v['kv_tokens']:,} tokens + {v['runtime_gb']:.2f} runtime) of a {v['share_gb']:.2f} GB "
        f"share: {'fits' if v['fits'] else 'does NOT fit'}"
    )


def _table(strategies: dict) -> list:
    """Right-aligned columns, each as wide as its widest cell plus a space: never merged."""
    cells = {name: [f"{row[key]:.2f}" for key, _ in COLUMNS] for name, row in strategies.items()}
    widths = [
        1 + max(len(title), *(len(c[i]) for c in cells.values()))
        for i, (_, title) in enumerate(COLUMNS)
    ]
    name_width = 2 + max(len("strategy"), *map(len, strategies))
    head = "strategy".ljust(name_width) + "".join(t.rjust(w) for (_, t), w in zip(COLUMNS, widths))
    lines = [head + "  fits"]
    for name, row in strategies.items():
        text = name.ljust(name_width) + "".join(c.rjust(w) for c, w in zip(cells[name], widths))
        fit = ("yes" if row["fits_with_margin"] else "tight") if row["fits"] else "no"
        extra = f"  (host RAM {row['host_ram_gb']:.2f} GB/node)" if row["offload"] else ""
        lines.append(f"{text}  {fit}{extra}")
    return lines


EPILOG = """\
examples:
  estimate_memory.py --params 8e9 --trainer sft --gpus 1 --gpu-memory-gb 24
  estimate_memory.py --model-config ./Qwen3-8B/config.json --trainer grpo --tuning lora \\
      --vllm-mode colocate --gpus 8 --gpu-memory-gb 80 --json

units: --gpu-memory-gb is the size printed on the card (24, 48, 80), which counts GiB (2^30
bytes); a detected total within 1% below a whole GiB is read as that size (an H100 80GB reports
79.65 GiB: 80). Every other size, in the text and in JSON, is GB = 1e9 bytes.
Without --gpus/--gpu-memory-gb the visible GPUs are read like check_optional_backends.py does
(or from --facts FILE, facts recorded there with --json). Offload plans are checked against host
RAM: --cpu-memory-gb, else the --facts file's, else this machine's.

activations: counted per decoder layer from the model's own structure (attention and KV widths,
gated MLP, fp32 norm inputs, MoE router and each token's top-k experts, LoRA adapters on a frozen
base, autocast's weight copies over fp32 weights), as transformers 5.24 saves them for backward;
with gradient checkpointing each layer keeps its input and one layer is rebuilt at a time. The
loss head's backward and a layer's do not add up (the head's runs first).

recommendation: the first plan, least invasive first, that leaves 5% of the usable memory free
(a plan within that margin is "tight" and chosen only when none has more room). For the given
tuning, then LoRA, then QLoRA (on MoE models where all-linear adapts the expert stacks, each
followed by the same on the attention projections alone): the optimizer as given, then 8-bit
AdamW; vLLM as given, then changed (utilization, max_model_len, tensor parallel size, sleep
mode, server mode); DDP before ZeRO-1/2/3 and FSDP2; each as given, with gradient
checkpointing, then smaller micro-batches.
Last the offload ladder: optimizer offload before parameter offload.

JSON (--json), schema_version 1: inputs; model; gpu {memory_gb, memory_gib, source};
host {ram_gb, source}; usable_gb_per_gpu; margin_gb_per_gpu; vllm (null without --vllm-mode)
{mode, tensor_parallel_size, data_parallel_size, gpu_memory_utilization, max_model_len,
sequences, kv_tokens, weights_gb, kv_cache_gb, runtime_gb, needed_gb, share_gb, sleep_mode,
fits}; strategies.<name> {weights_gb, gradients_gb, optimizer_gb, model_states_gb,
gather_buffer_gb, activations_gb, reference_model_gb, vllm_gb, total_gb, cpu_offload_gb,
host_ram_gb, fits, fits_with_margin, offload}; recommendation {strategy, changes, reason, fits,
tight, total_gb (null when no vLLM setting can hold the model)}; assumptions.

exit codes:
  0  report made (whether or not anything fits)
  2  bad input: a one-line error names what was expected
  3  unexpected internal error (one line, no traceback)
"""

# Largest values accepted: far above any real run, low enough to catch a typo (1e12 tokens).
MAX_GPUS = 100_000
MAX_SEQ_LEN = 2**24
MAX_COUNT = 1_000_000  # batch sizes, accumulation steps, generations, LoRA rank
MAX_GIB = 100_000


def _dtype(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPE_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of bf16, fp16, fp32")
    return name


# argparse reads "-7e9" as an option, not a (negative) value, unless it looks like a number.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def build_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(PROG, __doc__, EPILOG)
    p._negative_number_matcher = NEGATIVE_NUMBER  # the value's own check then names the problem
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--params",
        type=cli.number(1, MAX_PARAMS, whole=True),
        help="parameter count, a whole number: 7.5e9",
    )
    src.add_argument("--model-config", help="local Hugging Face config.json of a causal LM")
    p.add_argument(
        "--vocab-size", type=cli.number(1, 10**8, whole=True), default=32000, help="with --params"
    )
    p.add_argument("--trainer", choices=TRAINERS, default="sft")
    p.add_argument("--tuning", choices=("full", "lora", "qlora"), default="full")
    p.add_argument(
        "--lora-r",
        type=cli.number(1, MAX_COUNT, whole=True),
        default=16,
        help="ModelConfig.lora_r default",
    )
    p.add_argument(
        "--lora-targets", default="all-linear", help="all-linear or a comma list of module names"
    )
    p.add_argument(
        "--lora-dropout",
        type=cli.number(0, 1, high_open=True),
        default=0.05,
        help="ModelConfig.lora_dropout default; each adapter then keeps a dropout mask and output",
    )
    p.add_argument(
        "--double-quant",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="QLoRA nested quantization (use_bnb_nested_quant; TRL's default is off)",
    )
    p.add_argument(
        "--dtype",
        type=_dtype,
        default="bf16",
        help="weights as loaded: bf16, fp16 or fp32 (torch names accepted; TRL's CLI loads fp32)",
    )
    p.add_argument(
        "--compute-dtype",
        type=_dtype,
        help="autocast dtype (bf16=True / fp16=True); default: --dtype. TRL's CLI default is "
        "--dtype fp32 --compute-dtype bf16",
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument("--master-weights", choices=("fp32", "none"), default="fp32")
    p.add_argument(
        "--seq-len",
        type=cli.number(1, MAX_SEQ_LEN, whole=True),
        default=1024,
        help="tokens per sequence",
    )
    p.add_argument(
        "--batch-size",
        type=cli.number(1, MAX_COUNT, whole=True),
        default=8,
        help="per-device micro-batch",
    )
    p.add_argument(
        "--gradient-accumulation-steps", type=cli.number(1, MAX_COUNT, whole=True), default=1
    )
    p.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="TRL configs default to True",
    )
    p.add_argument(
        "--attention",
        choices=("sdpa", "flash", "eager"),
        default="sdpa",
        help="sdpa: transformers' default; flash: counted as SDPA's fused kernels without a mask "
        "(not measured here); eager keeps the s x s scores",
    )
    p.add_argument(
        "--fused-loss",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="TRL 1.16.0 fused LM head (sft, dpo, kto, grpo, rloo)",
    )
    p.add_argument("--beta", type=float, help="KL coefficient for grpo/rloo (default: TRL's)")
    p.add_argument("--precompute-ref-log-probs", action="store_true", help="dpo/kto")
    p.add_argument(
        "--num-generations",
        type=cli.number(1, MAX_COUNT, whole=True),
        help="grpo/rloo (default: TRL's, 8 and 2); must divide the generation batch",
    )
    p.add_argument(
        "--steps-per-generation",
        type=cli.number(1, MAX_COUNT, whole=True),
        help="grpo/rloo (default: --gradient-accumulation-steps, as in TRL)",
    )
    p.add_argument(
        "--gpus", type=cli.number(1, MAX_GPUS, whole=True), help="default: the visible GPUs"
    )
    p.add_argument(
        "--gpu-memory-gb",
        type=cli.number(0, MAX_GIB, low_open=True),
        help="the size printed on the card (24, 48, 80), read as GiB; "
        "default: the smallest visible GPU",
    )
    p.add_argument("--vllm-mode", choices=("none", "colocate", "server"), default="none")
    p.add_argument(
        "--vllm-gpu-memory-utilization",
        type=cli.number(0, 1, low_open=True),
        help="default: TRL's, 0.3 in colocate mode, 0.9 for trl vllm-serve",
    )
    p.add_argument(
        "--vllm-tensor-parallel-size",
        type=cli.number(1, 1024, whole=True),
        default=1,
        help="vllm_tensor_parallel_size (colocate) or the server's --tensor_parallel_size",
    )
    p.add_argument(
        "--vllm-data-parallel-size",
        type=cli.number(1, 1024, whole=True),
        default=1,
        help="server mode: trl vllm-serve --data_parallel_size",
    )
    p.add_argument(
        "--vllm-max-model-length",
        type=cli.number(1, 10**9, whole=True),
        help="vllm_max_model_length (default: the config's max_position_embeddings, as vLLM)",
    )
    p.add_argument(
        "--vllm-enable-sleep-mode",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="colocate: vllm_enable_sleep_mode",
    )
    p.add_argument(
        "--headroom", type=cli.number(0, 1, high_open=True), default=0.1, help="fraction kept free"
    )
    p.add_argument(
        "--cpu-memory-gb",
        type=cli.number(0, 10**8, low_open=True),
        help="host RAM per node in GB, checked for offload (default: the --facts file's, else "
        "this machine's)",
    )
    p.add_argument(
        "--facts",
        metavar="FILE",
        help="GPUs and host RAM from facts recorded with check_optional_backends.py --json",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def read_facts(recorded: "str | None") -> dict:
    """Facts recorded in a file, or collected here."""
    try:
        return facts.load_facts(recorded) if recorded else facts.collect_facts()
    except facts.FactsError as exc:
        raise cli.UsageError(str(exc)) from None


def detect_gpus(seen: dict) -> tuple:
    """(count, card size in GiB, where it came from) of the GPUs the facts saw."""
    memories = facts.gpu_memories_mib(seen)
    if not memories:
        kind = seen["accelerators"].get("kind")
        raise cli.UsageError(
            f"no GPU with a known memory size visible ({kind}); pass --gpus and --gpu-memory-gb"
        )
    mib = min(memories)
    size = card_gib(mib / 1024)
    where = seen.get("origin", {}).get("facts_file") or "this machine"
    source = f"detected on {where}: {mib:,} MiB = {mib / 1024:.2f} GiB, read as {size:g} GiB"
    return len(memories), size, source


def host_ram(seen: "dict | None", recorded: "str | None") -> tuple:
    """(host RAM per node in GB or None, where it came from)."""
    host = (seen or {}).get("host") if recorded else facts.host_memory()
    where = recorded or "this machine"
    total = facts.host_ram_bytes({"host": host})
    if total is None:
        return None, f"not recorded in {where}"
    return round(total / GB, 2), f"total RAM of {where}, {host.get('source') or 'recorded'}"


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
    """The parsed command line as Settings; args.gpus and args.gpu_memory_gb (the card size in
    GiB), args.cpu_memory_gb and both sources must be filled in. What TRL would refuse is
    checked with the arithmetic (memory.check_settings)."""
    return Settings(
        trainer=args.trainer,
        tuning=args.tuning,
        lora_r=args.lora_r,
        lora_targets=args.lora_targets,
        lora_dropout=args.lora_dropout,
        dtype=args.dtype,
        optimizer=args.optimizer,
        master_weights=args.master_weights,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        gradient_checkpointing=args.gradient_checkpointing,
        gpus=args.gpus,
        gpu_memory_gb=args.gpu_memory_gb * GIB / GB,
        vllm_mode=args.vllm_mode,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        attention=args.attention,
        fused_loss=args.fused_loss,
        headroom=args.headroom,
        cpu_memory_gb=args.cpu_memory_gb,
        double_quant=args.double_quant,
        beta=args.beta,
        precompute_ref_log_probs=args.precompute_ref_log_probs,
        compute_dtype=args.compute_dtype,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        steps_per_generation=args.steps_per_generation,
        num_generations=args.num_generations,
        vllm_tensor_parallel_size=args.vllm_tensor_parallel_size,
        vllm_data_parallel_size=args.vllm_data_parallel_size,
        vllm_max_model_length=args.vllm_max_model_length,
        vllm_enable_sleep_mode=args.vllm_enable_sleep_mode,
        gpu_memory_source=getattr(args, "gpu_memory_source", None) or _typed_gpu(args),
        cpu_memory_source=getattr(args, "cpu_memory_source", None) or "--cpu-memory-gb",
    )


def _typed_gpu(args: argparse.Namespace) -> str:
    return f"--gpu-memory-gb {args.gpu_memory_gb:g}, read as GiB"


def fill_machine(args: argparse.Namespace) -> None:
    """GPUs and host RAM the command line left out, from --facts or this machine."""
    seen = None
    args.gpu_memory_source = args.cpu_memory_source = None
    if args.gpus is None or args.gpu_memory_gb is None:
        seen = read_facts(args.facts)
        gpus, size, source = detect_gpus(seen)
        if args.gpu_memory_gb is None:
            args.gpu_memory_gb, args.gpu_memory_source = size, source
        args.gpus = args.gpus or gpus
    if args.cpu_memory_gb is not None:
        return
    if args.facts and seen is None:
        seen = read_facts(args.facts)
    args.cpu_memory_gb, args.cpu_memory_source = host_ram(seen, args.facts)


def main(argv: "list | None" = None) -> int:
    args = build_parser().parse_args(argv)
    shape = model_shape(args.params, args.model_config, args.vocab_size)
    fill_machine(args)
    report = build_report(shape, settings_from_args(args))
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    return cli.EXIT_OK


def entry() -> None:
    """The command (also the entry point of a zipapp built from scripts/)."""
    cli.run(main, PROG)


if __name__ == "__main__":
    entry()
