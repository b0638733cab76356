"""The knowledge tables of scripts/_scaling/launch_tables.py, read from the installed TRL and
accelerate. A test compares the committed module with `render_module()`; to refresh it after a
pinned-release change, run `python tests/launch_tables_source.py > scripts/_scaling/launch_tables.py`
and review the diff."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.metadata
import importlib.resources
import pprint

TRAINERS = ("sft", "dpo", "grpo", "rloo", "kto", "reward", "distillation")


def _value(value: object) -> object:
    """A default or choice as a plain literal (enums by value, other objects by name)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_value(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{type(value).__name__}>"


def _kind(action) -> str:
    """How argparse converts the argument, in the table's words (see launch_tables.py)."""
    name = type(action).__name__
    if name in ("_StoreFalseAction",):
        return "store_false"
    if name in ("_StoreTrueAction",):
        return "store_true"
    if name == "_StoreConstAction":  # accelerate's own store actions
        return "store_true" if action.const is True else "store_false"
    if name == "_HelpAction":
        return "help"
    if name == "check_env" or (name != "_StoreAction" and action.nargs == 0):
        return "store_true"  # torchrun's flags read from PET_* variables too
    if name == "_AppendAction":
        return "append:" + action.type.__name__
    convert = action.type
    if convert is None:
        kind = "str"
    else:
        qual = getattr(convert, "__qualname__", "")
        if qual.startswith("_accept_none"):
            kind = convert.__name__ + "|none"
        elif qual.startswith("make_choice_type_function"):
            kind = "choice"
        elif qual == "<lambda>":
            kind = "lambda"
        else:
            kind = convert.__name__
    if action.nargs == "?":
        kind += "?"
    elif action.nargs == "+":
        kind = "list:" + kind
    elif action.nargs == "...":
        kind = "remainder"
    return kind


def action_spec(action, derived_options: tuple) -> tuple:
    """(dest, kind, default, choices, option strings or None when derived from dest)."""
    options = tuple(action.option_strings)
    choices = _value(list(action.choices)) if action.choices is not None else None
    return (
        action.dest,
        _kind(action),
        _value(action.default),
        choices,
        None if options and options == derived_options else options,
    )


def hf_options(dest: str) -> tuple:
    """The option strings HfArgumentParser gives a dataclass field."""
    return (f"--{dest}", f"--{dest.replace('_', '-')}") if "_" in dest else (f"--{dest}",)


def trl_parser_specs() -> tuple:
    """(common specs, {trainer: its other specs}) of each `trl <cmd>` parser."""
    per_trainer = {}
    for name in TRAINERS:
        parser = importlib.import_module(f"trl.scripts.{name}").make_parser(prog=f"trl {name}")
        specs = []
        for action in parser._actions:
            if action.dest == "help":
                continue
            derived = hf_options(action.dest)
            if type(action).__name__ == "_StoreFalseAction":
                derived = (f"--no_{action.dest}", f"--no-{action.dest.replace('_', '-')}")
            specs.append(action_spec(action, derived))
        per_trainer[name] = specs
    common = [s for s in per_trainer[TRAINERS[0]] if all(s in per_trainer[t] for t in TRAINERS)]
    others = {t: tuple(s for s in specs if s not in common) for t, specs in per_trainer.items()}
    return tuple(common), others


def config_classes() -> dict:
    """{trainer: the config class its `trl <cmd>` parser builds}."""
    return {
        name: importlib.import_module(f"trl.scripts.{name}")
        .make_parser()
        .dataclass_types[1]
        .__name__
        for name in TRAINERS
    }


def json_fields() -> dict:
    """{trainer: fields its config reads as JSON when given as text starting with '{'}."""
    import trl

    return {t: tuple(getattr(trl, c)._VALID_DICT_FIELDS) for t, c in config_classes().items()}


def accelerate_launch_specs() -> tuple:
    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()
    specs = []
    for action in parser._actions:
        if action.dest == "help":
            continue
        derived = hf_options(action.dest) if action.option_strings else ()
        specs.append(action_spec(action, derived))
    return tuple(specs)


def torchrun_specs() -> tuple:
    from torch.distributed.run import get_args_parser

    specs = []
    for action in get_args_parser()._actions:
        if action.dest == "help":
            continue
        specs.append(action_spec(action, ()))  # option strings kept as torchrun spells them
    return tuple(specs)


def accelerate_config_keys() -> tuple:
    from accelerate.commands.config.config_args import ClusterConfig

    return tuple(f.name for f in dataclasses.fields(ClusterConfig))


def shipped_configs() -> dict:
    import yaml

    folder = importlib.resources.files("trl.accelerate_configs")
    configs = {}
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            configs[entry.name[: -len(".yaml")]] = yaml.safe_load(entry.read_text())
    return configs


HEADER = '''"""Knowledge: the command lines the preflight resolves, read from TRL {trl} and accelerate
{accelerate} (generated by tests/launch_tables_source.py; tests/test_preflight_tables.py checks it
against the installed packages).

- TRL_ARGUMENTS: each `trl <cmd>` parser (trl/scripts/<cmd>.py make_parser: ScriptArguments,
  the trainer's config, ModelConfig, DatasetMixtureConfig) as argparse sees it. A spec is
  (dest, kind, default, choices, option strings or None for HfArgumentParser's own: --name and
  --name-with-dashes; --no_name for a store_false complement).
- TRL_CONFIG_CLASSES: the config class each `trl <cmd>` parser builds.
- TRL_JSON_FIELDS: each config's _VALID_DICT_FIELDS (transformers training_args.py:1525 parses
  a text value starting with '{{' as JSON in __post_init__).
- ACCELERATE_LAUNCH: accelerate/commands/launch.py launch_command_parser, the same way.
- TORCHRUN: torch/distributed/run.py get_args_parser (torch {torch}), the same way.
- ACCELERATE_CONFIG_KEYS: accelerate/commands/config/config_args.py ClusterConfig fields (a
  config file with another top-level key is refused).
- SHIPPED_CONFIGS: trl/accelerate_configs/*.yaml, the files `--accelerate_config NAME` picks.

Kinds: str, int, float, bool (argparse's bool(): any non-empty text is True), string_to_bool /
str_to_bool (yes/no words), `X|none` (also accepts none/null), choice, `list:X` (one or more),
a trailing `?` (the value may be left out: const True), store_true, store_false,
`append:X`, remainder, lambda (a converter of its own), or a class name (that class is called
with the text).
"""

# fmt: off
'''


def render_module() -> str:
    trl = importlib.metadata.version("trl")
    accelerate = importlib.metadata.version("accelerate")
    common, others = trl_parser_specs()
    width = 100
    parts = [
        HEADER.format(trl=trl, accelerate=accelerate, torch=importlib.metadata.version("torch")),
        f'TRL_RELEASE = "{trl}"\n',
        f'ACCELERATE_RELEASE = "{accelerate}"\n',
        f"TRAINERS = {TRAINERS!r}\n\n",
        "TRL_COMMON_ARGUMENTS = " + pprint.pformat(common, width=width, compact=True) + "\n\n",
        "TRL_TRAINER_ARGUMENTS = " + pprint.pformat(others, width=width, compact=True) + "\n\n",
        "TRL_CONFIG_CLASSES = "
        + pprint.pformat(config_classes(), width=width, compact=True)
        + "\n\n",
        "TRL_JSON_FIELDS = " + pprint.pformat(json_fields(), width=width, compact=True) + "\n\n",
        "ACCELERATE_LAUNCH = "
        + pprint.pformat(accelerate_launch_specs(), width=width, compact=True)
        + "\n\n",
        "TORCHRUN = " + pprint.pformat(torchrun_specs(), width=width, compact=True) + "\n\n",
        "ACCELERATE_CONFIG_KEYS = "
        + pprint.pformat(accelerate_config_keys(), width=width, compact=True)
        + "\n\n",
        "SHIPPED_CONFIGS = " + pprint.pformat(shipped_configs(), width=width, compact=True) + "\n",
        "# fmt: on\n",
    ]
    return "".join(parts)


if __name__ == "__main__":
    print(render_module(), end="")
