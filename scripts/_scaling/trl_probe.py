"""Parse a planned TRL command line with the installed TRL, in a child process (probes.py runs this
file's source with `python -c`), and report what TRL's own parser and config classes say.

argv[1] is JSON: {"path": sys.path, "mark": result prefix, "trainer": "grpo", "script": "trl" (the
`trl <cmd>` process, then each launched process) or "trl-script" (TRL's script run by a launcher)
or "user" (the user's script feeding the same dataclasses), "args": the arguments,
"world_sizes": [...], "target": {"bf16": bool, "tf32": bool, "cuda": bool}}.

The config is built once per world size, with `TrainingArguments.world_size` patched to it and
the device checks answered for the target machine, never for this one (the parent hides every GPU
from this process). Nothing is downloaded, launched or written."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import sys
import time
import traceback


def jsonable(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    enum_value = getattr(value, "value", None)
    if isinstance(enum_value, (str, int)):
        return enum_value
    return f"<{type(value).__name__}>"


def error_of(exc: BaseException, stderr: str) -> dict:
    if isinstance(exc, SystemExit):  # argparse: the message is the last line it printed
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        return {"type": "SystemExit", "message": lines[-1] if lines else f"exit {exc.code}"}
    text = traceback.format_exception_only(type(exc), exc)[-1].strip()
    message = text.split(": ", 1)[1] if ": " in text else text
    return {"type": type(exc).__name__, "message": message}


def patch_target(target: dict) -> None:
    """Device questions the config asks, answered for the target machine."""
    import transformers.training_args as training_args

    training_args.is_torch_bf16_gpu_available = lambda: bool(target.get("bf16"))
    training_args.is_torch_tf32_available = lambda: bool(target.get("tf32"))
    training_args.is_torch_cuda_available = lambda: bool(target.get("cuda"))


def set_world_size(size: int) -> None:
    from transformers import TrainingArguments

    TrainingArguments.world_size = property(lambda self: size)


def make_parser(trainer: str, script: str) -> object:
    import importlib

    module = importlib.import_module(f"trl.scripts.{trainer}")
    prog = f"trl {trainer}" if script == "trl" else f"{trainer}.py"
    return module.make_parser(prog=prog)


def parse_once(parser: object, args: list, script: str, parent: bool) -> dict:
    """One parse the way TRL does it: the `trl` process keeps unknown strings for accelerate;
    TRL's script refuses leftover command-line strings; a user's script is asked for them."""
    stderr = io.StringIO()
    outcome: dict = {"error": None}
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            if parent:
                *objs, config_rest, cli_rest = parser.parse_args_and_config(
                    list(args), return_remaining_strings=True, separate_remaining_strings=True
                )
                outcome.update(config_remaining=config_rest, cli_remaining=cli_rest)
            elif script == "user":
                *objs, rest = parser.parse_args_and_config(
                    list(args), return_remaining_strings=True
                )
                outcome["cli_remaining"] = rest
            else:
                objs = parser.parse_args_and_config(list(args), fail_with_unknown_args=False)
    except BaseException as exc:  # argparse exits; __post_init__ raises: both are the verdict
        outcome["error"] = error_of(exc, stderr.getvalue())
        return outcome
    outcome["config"] = {
        type(obj).__name__: {
            f.name: jsonable(getattr(obj, f.name, None)) for f in dataclasses.fields(obj) if f.init
        }
        for obj in objs
    }
    return outcome


def raw_values(parser: object, args: list) -> dict:
    """The parsed values before any __post_init__ (YAML defaults already applied)."""
    rest = list(args)
    if "--config" in rest:
        index = rest.index("--config")
        del rest[index : index + 2]
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            namespace, _ = parser.parse_known_args(rest)
        except BaseException:
            return {}
    return {k: jsonable(v) for k, v in vars(namespace).items()}


def run(spec: dict) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import warnings

    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    import trl

    script, args = spec["script"], spec["args"]
    make_parser(spec["trainer"], script)  # imports the config classes (transformers, torch)
    imported = time.perf_counter()
    patch_target(spec.get("target") or {})
    passes = []
    for index, size in enumerate(spec["world_sizes"]):
        set_world_size(size)
        parser = make_parser(spec["trainer"], script)
        parent = script == "trl" and index == 0
        outcome = parse_once(parser, args, script, parent)
        outcome.update(world_size=size, parent=parent)
        if index == 0:
            outcome["raw"] = raw_values(parser, args)
        passes.append(outcome)
        if parent and outcome["error"]:
            break  # the `trl` process stopped: nothing was launched
        if parent:  # what `trl` hands each launched process (trl/cli/commands/training.py)
            from trl.cli.commands.training import _subtract_subsequence

            args = _subtract_subsequence(args, outcome["cli_remaining"])
            outcome["script_args"] = args
    return {
        "trl_version": trl.__version__,
        "passes": passes,
        "import_s": round(imported - start, 3),
        "parse_s": round(time.perf_counter() - imported, 3),
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    sys.path[:] = spec["path"]
    try:
        result = run(spec)
    except BaseException as exc:  # a broken TRL is a fact for the parent, not a crash
        result = {"failed": error_of(exc, "")}
    print(spec["mark"] + json.dumps(result))


if __name__ == "__main__":
    main()
