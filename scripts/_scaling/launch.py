"""A planned launch resolved the way the libraries resolve it: the COMMAND split into its processes
(a trainer, perhaps a vLLM server), environment assignments, `trl <cmd>` arguments split between
TRL and `accelerate launch` (trl/cli/commands/training.py), `--accelerate_config NAME|PATH`
(trl/cli/accelerate_config.py), then accelerate's launch arguments merged with its config file
(accelerate 1.15.0 commands/launch.py _validate_launch_command), `torchrun` and plain `python`.

Nothing here judges: the result is what would run, in the form config_rules.Launch reads."""

from __future__ import annotations

import os
import re
import shlex
from typing import NamedTuple

from . import arg_parsers, launch_tables, trl_args
from .files import ConfigFileError, load_config_file

SEPARATORS = ("&&", "&", ";", "||", "|")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
PYTHON_OPTIONS_WITH_VALUE = ("-X", "-W", "-Q")
SERVER_PROGRAMS = "`trl vllm-serve` or `vllm serve`"
DEEPSPEED_FLAGS = (
    "zero_stage", "offload_optimizer_device", "offload_param_device", "offload_optimizer_nvme_path",
    "offload_param_nvme_path", "gradient_accumulation_steps", "gradient_clipping",
    "zero3_init_flag", "zero3_save_16bit_model", "deepspeed_config_file", "deepspeed_hostfile",
    "deepspeed_exclusion_filter", "deepspeed_inclusion_filter", "deepspeed_multinode_launcher",
    "deepspeed_moe_layer_cls_names",
)  # fmt: skip  # accelerate 1.15.0 commands/launch.py, the "DeepSpeed Arguments" group
# Top-level accelerate config keys a launch flag of the same name fills (when the flag is unset).
TOP_LEVEL = (
    "num_processes", "num_machines", "machine_rank", "gpu_ids", "main_process_ip",
    "main_process_port", "rdzv_backend", "same_network", "mixed_precision", "downcast_bf16",
)  # fmt: skip


class CommandError(Exception):
    """A COMMAND the preflight cannot resolve: one line for the user (usage error, exit 2)."""


class Part(NamedTuple):
    env: dict  # NAME=value assignments before the program
    argv: list  # the program and its arguments


class Server(NamedTuple):
    """A vLLM server started next to the trainer."""

    env: dict
    model: str | None
    tensor_parallel: int
    data_parallel: int
    host: str
    port: int
    gpu_memory_utilization: float


class Resolved(NamedTuple):
    """The trainer launch as it will run."""

    launcher: str  # trl, accelerate, torchrun, python
    trainer: str | None
    trainer_source: str  # how the trainer was told
    script_kind: str  # trl (the `trl` command), trl-script (TRL's script), user
    script: str | None
    env: dict  # the trainer's environment assignments (the recipe's env: included)
    parse: trl_args.TrlParse | None  # its TRL arguments
    command_args: list  # what TRL's parser gets first (`trl`: all after the subcommand)
    script_args: list  # the arguments TRL's config parser gets in each launched process
    values: dict  # accelerate config values after flags (config_rules.Launch.values)
    flags: dict  # accelerate launch flags given on the command line (dest -> value)
    config_source: str | None  # shipped:NAME, a path, default (the target's), or None
    failures: list  # (id, message): launch-stage refusals met while resolving
    world_size: int
    num_machines: int
    processes_per_node: int
    distributed_type: str
    gpu_ids: str | None  # accelerate's gpu_ids: replaces CUDA_VISIBLE_DEVICES in the children


# --------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------


def split_command(command: list) -> list:
    """Parts separated by `&`, `&&`, `;`; one quoted string is split like a shell would."""
    if not command:
        raise CommandError("no COMMAND after --; give the exact command you would run")
    tokens = list(command)
    if len(tokens) == 1 and any(c.isspace() for c in tokens[0]):
        try:
            lexer = shlex.shlex(tokens[0], posix=True, punctuation_chars="&;|")
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError as exc:
            raise CommandError(f"cannot split the COMMAND like a shell: {exc}") from None
    parts, current = [], []
    for token in tokens + [";"]:
        if token in SEPARATORS:
            if current:
                parts.append(_part(current))
            current = []
        else:
            current.append(token)
    if not parts:
        raise CommandError("no COMMAND after --; give the exact command you would run")
    return parts


def _part(tokens: list) -> Part:
    env, index = {}, 0
    if tokens and tokens[0] == "env":
        index = 1
    while index < len(tokens):
        match = ASSIGNMENT.match(tokens[index])
        if not match:
            break
        env[match.group(1)] = match.group(2)
        index += 1
    if index >= len(tokens):
        raise CommandError("only environment assignments, no program to run")
    return Part(env, tokens[index:])


def classify(part: Part) -> tuple:
    """(kind, launcher, arguments): kind is trainer or server."""
    argv = part.argv
    name = os.path.basename(argv[0])
    if name == "trl":
        sub = argv[1] if len(argv) > 1 else None
        if sub == "vllm-serve":
            return "server", "trl vllm-serve", argv[2:]
        if sub in launch_tables.TRAINERS:
            return "trainer", "trl", argv[1:]
        known = ", ".join(launch_tables.TRAINERS)
        raise CommandError(f"trl {sub or ''}: not a training command of TRL (one of {known})")
    if name == "accelerate":
        if len(argv) > 1 and argv[1] == "launch":
            return "trainer", "accelerate", argv[2:]
        raise CommandError("accelerate: only `accelerate launch ...` starts training")
    if name == "torchrun":
        return "trainer", "torchrun", argv[1:]
    if name == "vllm":
        if len(argv) > 1 and argv[1] == "serve":
            return "server", "vllm serve", argv[2:]
        raise CommandError("vllm: only `vllm serve ...` is a server the trainer can use")
    if PYTHON.match(name):
        return _python(argv[1:])
    if name == "deepspeed":
        raise CommandError(
            "the deepspeed launcher is not resolved; plan it as `accelerate launch` with a "
            "DeepSpeed config (e.g. trl <cmd> --accelerate_config zero2)"
        )
    raise CommandError(
        f"{name}: not a launcher the preflight resolves (trl, accelerate launch, torchrun, "
        f"python, {SERVER_PROGRAMS})"
    )


def _python(args: list) -> tuple:
    index = 0
    while index < len(args) and args[index].startswith("-") and args[index] != "-m":
        index += 2 if args[index] in PYTHON_OPTIONS_WITH_VALUE else 1
    rest = args[index:]
    if not rest:
        raise CommandError("python without a script or -m module")
    if rest[0] == "-m":
        module = rest[1] if len(rest) > 1 else ""
        if module in ("torch.distributed.run", "torch.distributed.launch"):
            return "trainer", "torchrun", rest[2:]
        if module == "accelerate.commands.launch":
            return "trainer", "accelerate", rest[2:]
        if not module:
            raise CommandError("python -m without a module")
        return "trainer", "python", rest  # -m module args
    return "trainer", "python", rest


def split_plan(command: list) -> tuple:
    """(trainer part, its launcher, its arguments, server part or None) of the COMMAND."""
    trainers, servers = [], []
    for part in split_command(command):
        kind, launcher, args = classify(part)
        (trainers if kind == "trainer" else servers).append((part, launcher, args))
    if len(trainers) != 1:
        raise CommandError(
            f"the COMMAND holds {len(trainers)} training launches; give exactly one (and at most "
            f"one {SERVER_PROGRAMS}, separated by &)"
        )
    if len(servers) > 1:
        raise CommandError("more than one vLLM server in the COMMAND; give at most one")
    part, launcher, args = trainers[0]
    server = parse_server(*servers[0]) if servers else None
    return part, launcher, args, server


# --------------------------------------------------------------------------------------
# A vLLM server part
# --------------------------------------------------------------------------------------


def _option(args: list, names: tuple) -> str | None:
    value = None
    for index, token in enumerate(args):
        name, sep, inline = token.partition("=")
        if name in names:
            value = inline if sep else (args[index + 1] if index + 1 < len(args) else None)
    return value


def _number(text: str | None, kind: type, what: str, default: object) -> object:
    if text is None:
        return default
    try:
        return kind(text)
    except ValueError:
        raise CommandError(f"vLLM server {what}: {text!r} is not a number") from None


def parse_server(part: Part, launcher: str, args: list) -> Server:
    """The settings of `trl vllm-serve` (TRL 1.16.0 trl/scripts/vllm_serve.py: snake or kebab
    case, defaults port 8000, gpu_memory_utilization 0.9) or `vllm serve MODEL`."""

    def both(name: str, *short: str) -> tuple:
        return (f"--{name}", f"--{name.replace('_', '-')}", *short)

    if launcher == "vllm serve":
        model = args[0] if args and not args[0].startswith("-") else _option(args, ("--model",))
    else:
        model = _option(args, ("--model",))
    tp = _number(_option(args, both("tensor_parallel_size", "-tp")), int, "tensor parallel", 1)
    dp = _number(_option(args, both("data_parallel_size", "-dp")), int, "data parallel", 1)
    port = _number(_option(args, both("port")), int, "port", 8000)
    utilization = _number(
        _option(args, both("gpu_memory_utilization")), float, "gpu_memory_utilization", 0.9
    )
    host = _option(args, both("host")) or "0.0.0.0"
    return Server(part.env, model, tp, dp, host, port, utilization)


# --------------------------------------------------------------------------------------
# accelerate's config files
# --------------------------------------------------------------------------------------


def shipped_config(name: str) -> dict | None:
    """A config shipped in trl/accelerate_configs: the installed TRL's file when there is one,
    else the embedded copy of TRL 1.16.0's (launch_tables.SHIPPED_CONFIGS)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("trl")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "accelerate_configs", f"{name}.yaml")
        if os.path.isfile(path):
            try:
                values, _ = load_config_file(path)
            except ConfigFileError:
                break
            return values if isinstance(values, dict) else None
    values = launch_tables.SHIPPED_CONFIGS.get(name)
    return dict(values) if values is not None else None


def read_config(path: str) -> dict:
    if not os.path.isfile(path):
        raise CommandError(
            f"accelerate config {path} not found (accelerate raises FileNotFoundError for "
            "--config_file)"
        )
    try:
        values, _ = load_config_file(path)
    except ConfigFileError as exc:
        raise CommandError(str(exc)) from None
    if not isinstance(values, dict):
        raise CommandError(f"accelerate config {path} is not a mapping")
    return values


def resolve_accelerate_config(launch_args: list) -> tuple:
    """TRL 1.16.0 trl/cli/accelerate_config.py: `--accelerate_config NAME|PATH` becomes
    `--config_file`. Returns (launch args, config values or None, source, failure or None)."""
    if "--accelerate_config" not in launch_args:
        return launch_args, None, None, None
    index = launch_args.index("--accelerate_config")
    if index + 1 >= len(launch_args):
        return launch_args, None, None, "Expected a value after `--accelerate_config`."
    name = launch_args[index + 1]
    rest = launch_args[:index] + launch_args[index + 2 :]
    if os.path.isfile(name):
        return ["--config_file", name, *rest], read_config(name), name, None
    values = shipped_config(name)
    if values is None:
        return (
            rest,
            None,
            None,
            (
                f"Accelerate config {name} is neither a file nor a valid config in the `trl` "
                "package. Please provide a valid config name or a path to a config file."
            ),
        )
    return (
        ["--config_file", f"<trl>/accelerate_configs/{name}.yaml", *rest],
        values,
        (f"shipped:{name}"),
        None,
    )


# --------------------------------------------------------------------------------------
# accelerate launch: flags merged with the config file
# --------------------------------------------------------------------------------------


def parse_launch_args(args: list) -> tuple:
    """(flag values, given flags, script, script args, failure line or None)."""
    parser = arg_parsers.accelerate_launch_parser()
    try:
        namespace = parser.parse_args(args)
    except arg_parsers.ArgumentFailure as exc:
        return {}, set(), None, [], str(exc)
    values = arg_parsers.values(namespace)
    script, script_args = values.pop("training_script"), values.pop("training_script_args")
    given = arg_parsers.given(namespace) - {"training_script", "training_script_args"}
    return values, given, script, list(script_args or []), None


def _section(dest: str) -> str | None:
    if dest.startswith("fsdp_"):
        return "fsdp_config"
    if dest in DEEPSPEED_FLAGS:
        return "deepspeed_config"
    if dest.startswith("parallelism_config_"):
        return "parallelism_config"
    return None


def merge_launch(flags: dict, given: set, config: dict | None, device_count: int) -> dict:
    """The launch's accelerate values: flags beat the config file, as accelerate 1.15.0
    commands/launch.py _validate_launch_command merges them; without a config file,
    num_processes is the visible GPU count and several GPUs make it multi-GPU."""
    values = {k: (dict(v) if isinstance(v, dict) else v) for k, v in (config or {}).items()}
    for dest in given:
        section = _section(dest)
        if section:
            values.setdefault(section, {})
            if isinstance(values[section], dict):
                values[section][dest] = flags[dest]
        elif dest in TOP_LEVEL and flags.get(dest) is not None:
            values[dest] = flags[dest]
    values["distributed_type"] = _distributed_type(flags, values, config, device_count)
    if config is None:
        if flags.get("num_processes") is None:
            values["num_processes"] = device_count
        values.setdefault("num_machines", 1)
        if values["distributed_type"] == "FSDP":  # the flags' own defaults (fsdp_version 1)
            fsdp = values.setdefault("fsdp_config", {})
            for dest, default in _flag_defaults().items():
                if _section(dest) == "fsdp_config" and default is not None:
                    fsdp.setdefault(dest, default)
    values.setdefault("gpu_ids", "all")
    return values


def _flag_defaults() -> dict:
    return {spec[0]: spec[2] for spec in launch_tables.ACCELERATE_LAUNCH}


def _distributed_type(flags: dict, values: dict, config: dict | None, device_count: int) -> str:
    for flag, kind in (("use_deepspeed", "DEEPSPEED"), ("use_fsdp", "FSDP")):
        if flags.get(flag):
            return kind
    if flags.get("multi_gpu"):
        return "MULTI_GPU"
    if flags.get("cpu"):
        return "MULTI_CPU" if (values.get("num_processes") or 1) > 1 else "NO"
    if config is not None:
        return str(config.get("distributed_type") or "NO").upper()
    nproc = flags.get("num_processes") if flags.get("num_processes") is not None else device_count
    return "MULTI_GPU" if nproc > 1 and device_count > 1 else "NO"


def world_of(values: dict) -> tuple:
    """(world size, machines, processes per node) accelerate starts: the simple launcher of
    distributed_type NO starts one process whatever num_processes says."""
    kind = str(values.get("distributed_type") or "NO").upper()
    machines = values.get("num_machines") if isinstance(values.get("num_machines"), int) else 1
    machines = max(1, machines)
    nproc = values.get("num_processes")
    if kind == "NO" or not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        return 1, 1, 1
    return nproc, machines, max(1, nproc // machines)


# --------------------------------------------------------------------------------------
# The whole trainer launch
# --------------------------------------------------------------------------------------


def trl_script_trainer(script: str | None) -> str | None:
    """`.../trl/scripts/<name>.py` (or module trl.scripts.<name>): TRL's own training script."""
    if not script:
        return None
    norm = script.replace("\\", "/")
    match = re.search(r"(?:^|/)trl/scripts/(\w+)\.py$", norm) or re.fullmatch(
        r"trl\.scripts\.(\w+)", script
    )
    if match and match.group(1) in launch_tables.TRAINERS:
        return match.group(1)
    return None


def trainer_from_source(script: str | None) -> str | None:
    """The one TRL config or trainer class a user's script names (None if none or several)."""
    from .files import read_text

    text = read_text(script, 2_000_000) if script and os.path.isfile(script) else None
    if not text:
        return None
    by_prefix = {c[: -len("Config")]: t for t, c in launch_tables.TRL_CONFIG_CLASSES.items()}
    pattern = r"\b(" + "|".join(by_prefix) + r")(?:Config|Trainer)\b"
    found = {by_prefix[m] for m in re.findall(pattern, text)}
    return found.pop() if len(found) == 1 else None


def resolve(
    launcher: str,
    args: list,
    env: dict,
    trainer_hint: str | None,
    default_config: dict | None,
    device_count: int,
) -> Resolved:
    """The trainer launch as the libraries will run it. `device_count` is the number of GPUs
    the launch sees on a node (accelerate's fallback for num_processes); `default_config` the
    target's default accelerate config, if it has one."""
    if launcher == "trl":
        return _resolve_trl(args, env, default_config, device_count)
    if launcher == "accelerate":
        flags, given, script, script_args, failure = parse_launch_args(args)
        if failure:
            raise CommandError(f"accelerate launch refuses the command: {failure}")
        return _resolve_accelerate_script(
            flags, given, script, script_args, env, trainer_hint, default_config, device_count
        )
    if launcher == "torchrun":
        return _resolve_torchrun(args, env, trainer_hint, device_count)
    return _resolve_python(args, env, trainer_hint)


def _trainer_of(script: str | None, hint: str | None, script_args: list = ()) -> tuple:
    own = trl_script_trainer(script)
    if own:
        return own, "trl-script", f"TRL's script {own}.py"
    if hint:
        return hint, "user", "--trainer"
    named = _option(list(script_args), ("--trainer",))
    if named in launch_tables.TRAINERS:
        return named, "user", "the script's --trainer argument"
    inferred = trainer_from_source(script)
    if inferred:
        return inferred, "user", f"the {inferred.upper()} config/trainer class {script} names"
    return None, "user", "unknown (pass --trainer NAME)"


def _parse_script_args(trainer: str | None, kind: str, args: list) -> trl_args.TrlParse | None:
    if trainer is None:
        return None
    prog = f"{trainer}.py"
    try:
        return trl_args.parse_trl_args(trainer, args, prog)
    except trl_args.RecipeError as exc:
        raise CommandError(str(exc)) from None


def _parse_failures(parse: trl_args.TrlParse | None) -> list:
    """A launched script's refusals: argparse exits (TRL's parser runs in each process)."""
    if parse is None:
        return []
    failures = [("script-rejects-argument", parse.failure)] if parse.failure else []
    return failures + [("recipe-value-type", wrong) for wrong in parse.type_errors]


def _resolve_trl(args: list, env: dict, default_config: dict | None, device_count: int) -> Resolved:
    trainer, all_args = args[0], args[1:]
    try:
        parse = trl_args.parse_trl_args(trainer, all_args, f"trl {trainer}")
    except trl_args.RecipeError as exc:
        raise CommandError(str(exc)) from None
    failures = []
    if parse.failure:
        failures.append(("trl-rejects-argument", parse.failure))
    failures += [("recipe-value-type", wrong) for wrong in parse.type_errors]
    launch_args = parse.config_remaining + parse.cli_remaining
    launch_args, config, source, failure = resolve_accelerate_config(launch_args)
    if failure:
        failures.append(("accelerate-config-name", failure))
    script_args = _subtract(all_args, parse.cli_remaining)
    flags, given, _, _, accel_failure = parse_launch_args(
        [*launch_args, f"trl/scripts/{trainer}.py", *script_args]
    )
    if accel_failure:
        failures.append(("accelerate-rejects-argument", accel_failure))
    if config is None and "config_file" in given and flags.get("config_file"):
        config, source = read_config(flags["config_file"]), flags["config_file"]
    if config is None and default_config is not None and not flags.get("cpu"):
        config, source = default_config, "default"
    values = merge_launch(flags, given, config, device_count)
    world, machines, per_node = world_of(values)
    return Resolved(
        "trl", trainer, "the trl command", "trl", f"trl/scripts/{trainer}.py",
        dict(env, **parse.recipe_env), parse, all_args, script_args, values,
        {k: flags[k] for k in given}, source, failures, world, machines, per_node,
        values["distributed_type"], values.get("gpu_ids"),
    )  # fmt: skip


def _subtract(items: list, ordered: list) -> list:
    """`items` without the ordered subsequence `ordered` (trl/cli/commands/training.py)."""
    rest, it = [], iter(ordered)
    current = next(it, None)
    for item in items:
        if current is not None and item == current:
            current = next(it, None)
        else:
            rest.append(item)
    return rest


def _resolve_accelerate_script(
    flags: dict,
    given: set,
    script: str | None,
    script_args: list,
    env: dict,
    hint: str | None,
    default_config: dict | None,
    device_count: int,
) -> Resolved:
    config, source = None, None
    if flags.get("config_file"):
        config, source = read_config(flags["config_file"]), flags["config_file"]
    elif default_config is not None and not flags.get("cpu"):
        config, source = default_config, "default"
    values = merge_launch(flags, given, config, device_count)
    world, machines, per_node = world_of(values)
    trainer, kind, told = _trainer_of(script, hint, script_args)
    parse = _parse_script_args(trainer, kind, script_args)
    return Resolved(
        "accelerate", trainer, told, kind, script, dict(env, **(parse.recipe_env if parse else {})),
        parse, script_args, script_args, values, {k: flags[k] for k in given}, source,
        _parse_failures(parse), world, machines,
        per_node, values["distributed_type"], values.get("gpu_ids"),
    )  # fmt: skip


def _resolve_torchrun(args: list, env: dict, hint: str | None, device_count: int) -> Resolved:
    parser = arg_parsers.build_parser(launch_tables.TORCHRUN, "torchrun")
    try:
        namespace = parser.parse_args(args)
    except arg_parsers.ArgumentFailure as exc:
        raise CommandError(f"torchrun refuses the command: {exc}") from None
    flags = arg_parsers.values(namespace)
    script, script_args = flags.pop("training_script"), list(flags.pop("training_script_args"))
    nproc = str(flags.get("nproc_per_node") or "1")
    nnodes = str(flags.get("nnodes") or "1").split(":")[-1]
    if not nproc.isdigit() and nproc not in ("gpu", "auto", "cpu", "xpu"):
        raise CommandError(f"torchrun --nproc-per-node {nproc}: not a number or gpu/auto")
    if not nnodes.isdigit():
        raise CommandError(f"torchrun --nnodes {flags.get('nnodes')}: not a number or MIN:MAX")
    trainer, kind, told = _trainer_of(script, hint, script_args)
    parse = _parse_script_args(trainer, kind, script_args)
    # torch/distributed/run.py: "gpu"/"auto" start one process per visible GPU.
    per_node = int(nproc) if nproc.isdigit() else max(1, device_count)
    machines = int(nnodes)
    values = _trl_launch_values(parse, per_node * machines, machines)
    positional = {"training_script", "training_script_args"}
    given = {k: flags[k] for k in arg_parsers.given(namespace) - positional}
    return Resolved(
        "torchrun", trainer, told, kind, script, env, parse, script_args, script_args, values,
        given, None, _parse_failures(parse), per_node * machines, machines, per_node, values["distributed_type"], None,
    )  # fmt: skip


def _resolve_python(args: list, env: dict, hint: str | None) -> Resolved:
    script = args[0] if args[0] != "-m" else args[1]
    script_args = args[1:] if args[0] != "-m" else args[2:]
    trainer, kind, told = _trainer_of(script, hint, script_args)
    parse = _parse_script_args(trainer, kind, script_args)
    values = _trl_launch_values(parse, 1, 1)
    values["distributed_type"] = "NO"
    return Resolved(
        "python", trainer, told, kind, script, env, parse, script_args, script_args, values, {},
        None, _parse_failures(parse),
        1, 1, 1, "NO", None,
    )  # fmt: skip


def _trl_launch_values(parse: trl_args.TrlParse | None, nproc: int, machines: int) -> dict:
    """Without accelerate launch, transformers builds the accelerate plugin from TRL's own
    `deepspeed` (a JSON path) and `fsdp` arguments."""
    trl = parse.values if parse else {}
    values: dict = {"num_processes": nproc, "num_machines": machines, "gpu_ids": "all"}
    if trl.get("deepspeed"):
        values["distributed_type"] = "DEEPSPEED"
        values["deepspeed_config"] = {"deepspeed_config_file": trl["deepspeed"]}
    elif trl.get("fsdp"):
        values["distributed_type"] = "FSDP"
        values["fsdp_config"] = {"fsdp_version": 2}
    else:
        values["distributed_type"] = "MULTI_GPU" if nproc != 1 else "NO"
    return values
