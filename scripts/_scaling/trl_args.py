"""A TRL command line's arguments as TRL parses them: with the parser rebuilt from
launch_tables.py (no import), and, when TRL is installed, with TRL itself in a time-limited child
(trl_probe.py) that also builds the config classes at the planned world size.

`parse_trl_args` follows TRL 1.16.0 trl/scripts/utils.py TrlParser.parse_args_and_config: a
`--config` recipe's keys become the parser's defaults (command-line values win), its `env:`
mapping is exported, and keys the parser does not know come back as `--key value` strings."""

from __future__ import annotations

import importlib.util
import os
from typing import NamedTuple

from . import arg_parsers, probes
from .files import ConfigFileError, load_config_file

PROBE_TIMEOUT_S = 90.0  # importing TRL takes 3-10 s; a hung import is cut off


class RecipeError(Exception):
    """A `--config` recipe TRL cannot read: one line for the user (usage error)."""


class TrlParse(NamedTuple):
    values: dict  # every destination of the parser, defaults included (before __post_init__)
    given: frozenset  # destinations set by the recipe or the command line
    config_remaining: list  # recipe keys the parser does not know, as --key value
    cli_remaining: list  # command-line strings the parser does not know
    failure: str | None  # argparse's error line when it refuses the command line
    recipe: str | None  # the --config path
    recipe_env: dict  # the recipe's env: mapping (exported before launching)
    type_errors: tuple = ()  # recipe values of a type the field cannot hold, as sentences


def split_recipe(args: list) -> tuple:
    """(args without `--config PATH`, PATH or None), as TrlParser takes it out."""
    rest = list(args)
    if "--config" not in rest:
        return rest, None
    index = rest.index("--config")
    if index + 1 >= len(rest):
        raise RecipeError("--config needs a recipe file after it")
    path = rest[index + 1]
    del rest[index : index + 2]
    return rest, path


def load_recipe(path: str) -> tuple:
    """(values, env) of a TRL recipe YAML; RecipeError with TRL's own wording where it has one."""
    if not os.path.isfile(path):
        raise RecipeError(f"recipe {path} not found (--config reads it in the `trl` process)")
    try:
        data, _ = load_config_file(path)
    except ConfigFileError as exc:
        raise RecipeError(str(exc)) from None
    if not isinstance(data, dict):
        raise RecipeError(f"Config file {path} must contain a YAML mapping.")
    data = dict(data)
    env = data.pop("env", {}) if "env" in data else {}
    if not isinstance(env, dict):
        raise RecipeError("`env` field should be a dict in the YAML file.")
    return data, {str(k): str(v) for k, v in env.items()}


def parse_trl_args(trainer: str, args: list, prog: str) -> TrlParse:
    """Parse like `trl <trainer>` (or TRL's script) does; argparse's refusal is `failure`."""
    rest, recipe = split_recipe(args)
    recipe_values, recipe_env = load_recipe(recipe) if recipe else ({}, {})
    parser = arg_parsers.trl_parser(trainer, prog)
    known = {a.dest for a in parser._actions}
    used = {k: v for k, v in recipe_values.items() if k in known}
    parser.set_defaults(**used)
    config_remaining = [
        item for k, v in recipe_values.items() if k not in known for item in (f"--{k}", str(v))
    ]
    try:
        namespace, cli_remaining = parser.parse_known_args(rest)
    except arg_parsers.ArgumentFailure as exc:
        defaults: dict = {}
        for action in parser._actions:  # the first action of a destination sets its default
            defaults.setdefault(action.dest, action.default)
        return TrlParse(
            defaults, frozenset(used), config_remaining, [], str(exc), recipe, recipe_env
        )
    given = frozenset(used) | arg_parsers.given(namespace)
    values = arg_parsers.values(namespace)
    wrong = tuple(recipe_type_errors(trainer, used, arg_parsers.given(namespace)))
    return TrlParse(values, given, config_remaining, cli_remaining, None, recipe, recipe_env, wrong)


def recipe_type_errors(trainer: str, used: dict, overridden: set) -> list:
    """Recipe values argparse does not convert (it converts only text defaults) and the field
    cannot hold: TRL builds the config with them as they are."""
    kinds = {spec[0]: spec[1] for spec in arg_parsers.trl_specs(trainer)}
    wrong = []
    for key, value in used.items():
        if key in overridden or isinstance(value, str) or value is None:
            continue
        kind = kinds.get(key, "").rstrip("?").replace("|none", "")
        if not _holds(kind, value):
            wrong.append(f"{key}: {value!r} from the recipe is not {_KIND_WORDS.get(kind, kind)}")
    return wrong


_KIND_WORDS = {"int": "a whole number", "float": "a number", "string_to_bool": "true or false"}


def _holds(kind: str, value: object) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string_to_bool":
        return isinstance(value, bool)
    if kind.startswith("list:"):
        return isinstance(value, list)
    return True  # text, choices and classes: TRL's own checks decide


def suggest(name: str, trainer: str) -> str | None:
    """The closest TRL option to a misspelt one, e.g. --learnig_rate -> --learning_rate."""
    import difflib

    options = {o for spec in arg_parsers.trl_specs(trainer) for o in arg_parsers.spec_options(spec)}
    close = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.8)
    return close[0] if close else None


# --------------------------------------------------------------------------------------
# TRL itself, in a child process
# --------------------------------------------------------------------------------------


def trl_importable() -> bool:
    try:
        return importlib.util.find_spec("trl") is not None
    except (ImportError, ValueError):
        return False


def local_trl_version() -> str | None:
    """The TRL this Python would import, from its metadata (nothing imported)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("trl")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def start_probe(
    trainer: str, script: str, args: list, world_sizes: list, target: dict, timeout: float
) -> probes.Child:
    """Start trl_probe.py; GPUs hidden from the child, nothing downloaded."""
    spec = {
        "trainer": trainer,
        "script": script,
        "args": list(args),
        "world_sizes": list(world_sizes),
        "target": target,
    }
    hidden = {
        "CUDA_VISIBLE_DEVICES": "",
        "HIP_VISIBLE_DEVICES": "",
        "ROCR_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    return probes.start_python_probe("trl_probe", timeout, spec, hidden)


def finish_probe(child: probes.Child) -> dict:
    """The probe's report, or {"unavailable": reason} when it failed, crashed or timed out."""
    status, result, seconds = probes.probe_result(child)
    if status != "ok":
        return {"unavailable": f"TRL's parser did not answer ({status}: {result})"}
    if result.get("failed"):
        failed = result["failed"]
        return {"unavailable": f"TRL failed to load: {failed['type']}: {failed['message']}"}
    result["seconds"] = round(seconds, 3)
    return result
