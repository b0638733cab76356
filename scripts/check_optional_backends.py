#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Report which optional TRL scaling backends this machine can use, and why not.

Reads package metadata, torch's build file, NVML (in a time-limited subprocess) and the
accelerate config without importing torch or any backend, then judges each backend
(vLLM, DeepSpeed, FSDP2, context/sequence parallelism, PEFT, QLoRA, Liger, Unsloth,
Hub kernels, FlashAttention, bf16, NCCL) against the rules of the installed TRL release.
With --facts, judges facts recorded on another machine instead.

Standalone: Python 3.9+, standard library only; pyyaml and nvidia-ml-py are used when
present. Never starts servers, trains, downloads, writes files or allocates GPU memory.
"""

import os
import sys

PROG = "check_optional_backends.py"
if sys.version_info < (3, 9):  # noqa: UP036 (the one line older Pythons get)
    sys.stderr.write(f"{PROG}: needs Python 3.9 or newer; this is {sys.version.split()[0]}\n")
    sys.exit(2)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under -I / PYTHONSAFEPATH

from _scaling import probes  # noqa: E402

if __name__ == "__main__" and not any(a.startswith(("-h", "--h", "--f")) for a in sys.argv[1:]):
    # A run that collects facts waits longest for the GPU probe: start it before the rest loads
    # (not for --help or --facts; the collection adopts it, an early exit kills it).
    probes.start_gpu_probe_early()

import argparse  # noqa: E402

from _scaling import cli, facts  # noqa: E402
from _scaling.backend_rules import BACKEND_NAMES, READY  # noqa: E402
from _scaling.check_report import build_report, render_json, render_text  # noqa: E402

EPILOG = f"""\
exit status:
  0  report made (an accelerate config that does not parse is a finding in it)
  1  a --require backend is not ready
  2  bad usage (unknown flag, a file that cannot be read, a facts file that is not this
     script's --json output, malformed URL, bad timeout): one line on stderr
  3  internal error (one line on stderr, never a traceback)

time limits (--timeout defaults to {facts.DEFAULT_TIMEOUT_S:g} s): the GPU probe (NVML, or
  nvidia-smi without nvidia-ml-py) gets min(--timeout, {probes.NVML_TIMEOUT_S:g}) s; all of --vllm-url's
  requests together get min(--timeout, {probes.VLLM_TIMEOUT_S:g}) s; both run while package metadata
  is read. Each --imports child gets --timeout, one child per CPU core at a time. A probe
  past its limit is killed and reported, never waited on.

statuses: ready | degraded (usable with caveats) | not_installed | unavailable (installing
the package alone will not help: hardware, broken import, wrong build)

--json prints one object (schema_version {facts.SCHEMA_VERSION}; keys are stable, new keys may
be added):
  python, platform            interpreter and OS facts
  packages.<dist>             {{installed, version, location, editable?, duplicates?, broken?,
                               requires?, import? = {{status: ok|error|timeout|crashed,
                               detail, seconds, module_version?}} (with --imports)}}
  torch_build                 {{version, cuda, hip, xpu, variant}} from torch/version.py
  accelerators                {{kind: cuda|rocm|mps|xpu|npu|cpu|unknown, driver_version,
                               cuda_driver_version, devices: [{{index, name, uuid,
                               memory_total_mib, memory_used_mib, memory_free_mib,
                               compute_capability, mig_enabled, processes}}],
                               physical_device_count, topology (null: unknown), visibility,
                               error}}
  environment                 backend-related variables that are set (secrets and URL
                               credentials redacted)
  config                      accelerate config {{path, source, exists, values, error?,
                               problems}}
  torch_runtime               (--imports) torch's own view, with PYTORCH_NVML_BASED_CUDA_CHECK=1
  vllm_server                 (--vllm-url) health, models, dev_mode (null: unknown),
                               weight_transfer_config, timed_out?, error?
  backends.<name>             {{status, reasons: [worst first; a rule's source in [..]],
                               next_step: one command or setting, or null}} for each of:
                               {", ".join(BACKEND_NAMES[:7])},
                               {", ".join(BACKEND_NAMES[7:])}
  origin                      (--facts) the file the facts were read from
  warnings, timings

Recorded facts: run `python3 {PROG} --json > node1.json` on the other machine (copy the
scripts/ folder there; it needs only Python 3.9+), then `python3 {PROG} --facts node1.json`.
"""


def _url(text: str) -> str:
    from urllib.parse import urlsplit

    from _scaling.environment import redact_url_credentials

    expected = f"expected an http(s)://host[:port] URL, got {redact_url_credentials(text)!r}"
    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        raise argparse.ArgumentTypeError(expected) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(expected)
    return text


def _readable_file(what: str):
    def check(text: str) -> str:
        if not os.path.isfile(text) or not os.access(text, os.R_OK):
            raise argparse.ArgumentTypeError(f"expected a readable {what} file, got {text!r}")
        return text

    return check


def _require(text: str) -> list:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKEND_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown backend {', '.join(unknown) or repr(text)}; expected some of "
            f"{','.join(BACKEND_NAMES)}"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = cli.OneLineParser(
        PROG,
        __doc__,
        EPILOG,
        usage_hint="expected: --json --imports --timeout S --vllm-url URL --require NAMES "
        "--accelerate-config PATH --facts FILE",
    )
    add = parser.add_argument
    add("--json", action="store_true", help="print one JSON object instead of text")
    add(
        "--imports",
        action="store_true",
        help="also import each installed package in its own subprocess (parallel, each bounded "
        "by --timeout); imports may initialise CUDA in those children, never in this process",
    )
    add(
        "--timeout",
        type=cli.number(0, 600, low_open=True, name="seconds"),
        default=facts.DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"upper limit for each probe (default {facts.DEFAULT_TIMEOUT_S:g}; see the "
        "time limits below)",
    )
    add(
        "--vllm-url",
        type=_url,
        metavar="URL",
        help="read-only probe of a running vLLM server (GET /health, /v1/models, /server_info)",
    )
    add(
        "--require",
        type=_require,
        metavar="NAME[,NAME...]",
        help="exit 1 unless each named backend is ready",
    )
    add(
        "--accelerate-config",
        type=_readable_file("accelerate config"),
        metavar="PATH",
        help="accelerate config to check (default: $HF_HOME/accelerate/default_config.yaml)",
    )
    add(
        "--facts",
        type=_readable_file("facts"),
        metavar="FILE",
        help="judge facts recorded elsewhere (this script's --json output) instead of this "
        "machine's",
    )
    return parser  # fmt: skip


def gather(args: argparse.Namespace) -> dict:
    if args.facts:
        if args.imports or args.vllm_url or args.accelerate_config:
            raise cli.UsageError("--facts judges recorded facts; it takes no probe options")
        try:
            return facts.load_facts(args.facts)
        except facts.FactsError as exc:
            raise cli.UsageError(str(exc)) from None
    return facts.collect_facts(
        accelerate_config=args.accelerate_config,
        imports=args.imports,
        vllm_url=args.vllm_url,
        timeout=args.timeout,
    )


def main(argv: "list | None" = None) -> int:
    args = build_parser().parse_args(argv)
    report = build_report(gather(args))
    if args.json:
        print(render_json(report))
    else:
        print(render_text(report, colour=cli.use_colour(), width=cli.text_width()))
    unmet = [n for n in args.require or [] if report["backends"][n]["status"] != READY]
    if unmet:
        detail = "; ".join(f"{n} is {report['backends'][n]['status']}" for n in unmet)
        sys.stderr.write(f"{PROG}: required backend not ready: {detail}\n")
        return cli.EXIT_FINDINGS
    return cli.EXIT_OK


def entry() -> None:
    """The command (also the entry point of a zipapp built from scripts/)."""
    cli.run(main, PROG)


if __name__ == "__main__":
    entry()
