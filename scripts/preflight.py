#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Judge a planned TRL launch against the machine(s) it will run on, before it spends a GPU-hour.

Give the exact command after --: environment assignments, then `trl <cmd> ...`, `accelerate
launch ...`, `torchrun ...` or `python script.py ...` (and, separated by &, the `vllm serve` /
`trl vllm-serve` it talks to). The launch is resolved the way TRL and accelerate resolve it, the
TRL arguments are parsed with TRL itself when it is installed (in a time-limited child, at the
planned world size) or with an embedded table of TRL 1.16.0, and every rule is judged.

Never launches, downloads, opens a GPU or writes a file.
"""

import os
import sys

PROG = "preflight.py"
if sys.version_info < (3, 9):  # noqa: UP036 (the one line older Pythons get)
    sys.stderr.write(f"{PROG}: needs Python 3.9 or newer; this is {sys.version.split()[0]}\n")
    sys.exit(2)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under -I / PYTHONSAFEPATH

import argparse  # noqa: E402

from _scaling import cli, facts, launch, plan, trl_args  # noqa: E402
from _scaling.launch_tables import TRAINERS  # noqa: E402
from _scaling.plan_report import render_json, render_text  # noqa: E402

EPILOG = f"""\
examples (each judged on recorded facts; drop --facts to judge this machine):
  {PROG} --facts a100x4.json -- trl sft --model_name_or_path Qwen/Qwen3-0.6B \\
      --dataset_name trl-lib/Capybara --accelerate_config zero2 --num_processes 4
  {PROG} --facts h100x8.json -- trl grpo --config grpo.yaml --use_vllm \\
      --vllm_mode colocate --vllm_tensor_parallel_size 2
  {PROG} --facts h100x8.json -- 'CUDA_VISIBLE_DEVICES=6,7 trl vllm-serve --model M \\
      --tensor_parallel_size 2 & CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 trl grpo ... \\
      --use_vllm --vllm_mode server --num_processes 6'
  {PROG} --facts node0.json --facts node1.json -- accelerate launch --num_machines 2 \\
      --num_processes 16 --machine_rank 0 --main_process_ip 10.0.0.1 train.py ...
  {PROG} --trainer dpo -- torchrun --nproc-per-node 2 my_dpo.py --beta 0.1

exit status:
  0  no error finding      1  at least one error finding (the launch would fail or not fit)
  2  bad usage: an unreadable COMMAND, facts, recipe or config file (one line on stderr)
  3  internal error (one line, never a traceback)

--json prints one object (schema_version {plan.SCHEMA_VERSION}):
  plan      launcher, trainer, world_size, processes_per_node, nodes (the GPUs each uses),
            distributed_type, vllm, precision, peft, trl values, memory, trl_parser
  findings  [{{id, severity: error|warning|info, stage, message (the library's own text where
            it has one), why, fix, source, confirmed_by? (TRL itself raised it here)}}]
  stages:   {", ".join(plan.STAGES)}

Facts: `python3 check_optional_backends.py --json > node.json` on the target machine (copy the
scripts/ folder there), once per node for a multi-node plan, in machine_rank order.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = cli.OneLineParser(
        PROG,
        __doc__,
        EPILOG,
        usage=f"{PROG} [--facts FILE ...] [--model-config PATH] [--trainer NAME] [--json] "
        "-- COMMAND ...",
        usage_hint=f"usage: {PROG} [options] -- COMMAND ...; see --help",
    )
    add = parser.add_argument
    add("--facts", action="append", metavar="FILE",
        help="facts of a machine the command runs on (check_optional_backends.py --json); once "
        "per node; default: this machine")  # fmt: skip
    add("--model-config", metavar="PATH",
        help="the model's config.json (default: the model's local folder or the local Hugging "
        "Face cache; never downloaded)")  # fmt: skip
    add(
        "--trainer",
        choices=TRAINERS,
        help="the TRL config a script of your own feeds (default: read from the script)",
    )
    add("--trl", choices=("auto", "yes", "no"), default="auto",
        help="parse with the installed TRL in a child process (auto: when importable) or only "
        "with the embedded TRL 1.16.0 table (no)")  # fmt: skip
    add(
        "--timeout",
        type=cli.number(0, 600, low_open=True, name="seconds"),
        default=trl_args.PROBE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"limit for TRL's child (default {trl_args.PROBE_TIMEOUT_S:g})",
    )
    add("--json", action="store_true", help="print one JSON object instead of text")
    return parser


def split_argv(argv: list) -> tuple:
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            return argv, []
        raise cli.UsageError("put the COMMAND after -- (e.g. preflight.py -- trl sft ...)")
    index = argv.index("--")
    return argv[:index], argv[index + 1 :]


def load_nodes(paths: "list | None") -> list:
    if not paths:
        return [("this machine", facts.collect_facts())]
    nodes = []
    for path in paths:
        try:
            nodes.append((path, facts.load_facts(path)))
        except facts.FactsError as exc:
            raise cli.UsageError(str(exc)) from None
    return nodes


def main(argv: "list | None" = None) -> int:
    own, command = split_argv(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(own)
    nodes = load_nodes(args.facts)
    try:
        collected = plan.collect_plan(
            command, nodes, args.trainer, args.model_config, args.trl, args.timeout
        )
    except launch.CommandError as exc:
        raise cli.UsageError(str(exc)) from None
    report = plan.judge_plan(collected)
    if args.json:
        print(render_json(report))
    else:
        print(render_text(report, colour=cli.use_colour(), width=cli.text_width()))
    return cli.EXIT_FINDINGS if report["summary"]["error"] else cli.EXIT_OK


def entry() -> None:
    """The command (also the entry point of a zipapp built from scripts/)."""
    cli.run(main, PROG)


if __name__ == "__main__":
    entry()
