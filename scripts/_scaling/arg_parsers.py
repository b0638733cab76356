"""TRL's and accelerate's command-line parsers rebuilt with the standard library from the specs in
launch_tables.py, so a command is parsed the way the libraries parse it without importing them:
the same option names and abbreviations, the same conversions, the same error lines.

A parse failure raises ArgumentFailure with the line argparse would print after `error:`."""

from __future__ import annotations

import argparse

from . import launch_tables

TRL_TRUE = ("yes", "true", "t", "y", "1")
TRL_FALSE = ("no", "false", "f", "n", "0")
# Classes HfArgumentParser calls with the text: these two cannot be built from one string.
REJECTING_CLASSES = ("dict", "ParallelismConfig")


class ArgumentFailure(Exception):
    """argparse's error line (`<prog>: error: <message>`) for a command line it refuses."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(f"{prog}: error: {message}")
        self.prog, self.detail = prog, message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit 2
        raise ArgumentFailure(self.prog, message)


# Actions that also note which destinations the command line set (accelerate's `nondefault`).
def _note(namespace: argparse.Namespace, dest: str) -> None:
    given = getattr(namespace, "_given", None)
    if given is None:
        given = set()
        namespace._given = given
    given.add(dest)


class _Store(argparse._StoreAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _note(namespace, self.dest)


class _StoreConst(argparse._StoreConstAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _note(namespace, self.dest)


class _Append(argparse._AppendAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _note(namespace, self.dest)


# --------------------------------------------------------------------------------------
# Converters, named as argparse names them in its messages
# --------------------------------------------------------------------------------------


def string_to_bool(text: object) -> bool:
    """TRL 1.16.0 trl/scripts/_hf_argparser.py string_to_bool."""
    if isinstance(text, bool):
        return text
    if str(text).lower() in TRL_TRUE:
        return True
    if str(text).lower() in TRL_FALSE:
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {text} but expected one of yes/no, true/false, t/f, y/n, "
        "1/0 (case insensitive)."
    )


def str_to_bool(text: str) -> int:
    """accelerate 1.15.0 utils/environment.py str_to_bool (returns 1 or 0)."""
    value = text.lower()
    if value in ("y", "yes", "t", "true", "on", "1"):
        return 1
    if value in ("n", "no", "f", "false", "off", "0"):
        return 0
    raise ValueError(f"invalid truth value {value}")


def _rejecting(name: str):
    def convert(text: str) -> object:
        raise ValueError(f"{name} cannot be built from {text!r}")

    convert.__name__ = name
    return convert


def _accept_none(inner):
    def parse(text: str) -> object:
        return None if text.lower() in ("none", "null") else inner(text)

    parse.__name__ = getattr(inner, "__name__", "value")
    return parse


def _choice(choices: list):
    by_text = {str(c): c for c in choices}

    def convert(text: str) -> object:
        return by_text.get(text, text)

    return convert


def _converter(kind: str, choices: list | None):
    if kind == "choice":
        return _choice(choices or [])
    if kind.endswith("|none"):
        return _accept_none(_converter(kind[: -len("|none")], choices))
    simple = {"str": None, "int": int, "float": float, "bool": bool, "lambda": None}
    if kind in simple:
        return simple[kind]
    if kind == "string_to_bool":
        return string_to_bool
    if kind == "str_to_bool":
        return str_to_bool
    if kind in REJECTING_CLASSES:
        return _rejecting(kind)
    return None  # another class: built from any text (DatasetConfig(path), tuple(text), ...)


def _options(dest: str, kind: str, options: tuple | None) -> tuple:
    if options is not None:
        return tuple(options)
    dashed = dest.replace("_", "-")
    if kind == "store_false":  # HfArgumentParser's complement of a bool that defaults to True
        return (f"--no_{dest}", f"--no-{dashed}")
    return (f"--{dest}", f"--{dashed}") if "_" in dest else (f"--{dest}",)


def spec_options(spec: tuple) -> tuple:
    """The option strings of a table spec (none for a positional)."""
    dest, kind, _, _, options = spec
    return tuple(options) if options is not None else _options(dest, kind, None)


def add_spec(parser: argparse.ArgumentParser, spec: tuple) -> None:
    """Add one table spec (dest, kind, default, choices, options) to `parser`."""
    dest, kind, default, choices, options = spec
    flags = _options(dest, kind, options) if options != () else ()
    if kind == "help":
        return
    kwargs: dict = {"default": default}
    if flags:
        kwargs["dest"] = dest
    else:
        flags = (dest,)
    if kind in ("store_true", "store_false"):
        parser.add_argument(*flags, action=_StoreConst, const=kind == "store_true", **kwargs)
        return
    if kind.startswith("append:"):
        parser.add_argument(*flags, action=_Append, type=_converter(kind[7:], None), **kwargs)
        return
    if kind == "remainder":
        parser.add_argument(*flags, nargs=argparse.REMAINDER, **kwargs)
        return
    if kind.startswith("list:"):
        kind, kwargs["nargs"] = kind[5:], "+"
    if kind.endswith("?"):
        kind, kwargs["nargs"], kwargs["const"] = kind[:-1], "?", True
    if choices is not None:
        kwargs["choices"] = choices
    parser.add_argument(*flags, action=_Store, type=_converter(kind, choices), **kwargs)


def build_parser(specs: tuple, prog: str, allow_abbrev: bool = True) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, add_help=False, allow_abbrev=allow_abbrev)
    for spec in specs:
        add_spec(parser, spec)
    return parser


def trl_specs(trainer: str) -> tuple:
    return launch_tables.TRL_COMMON_ARGUMENTS + launch_tables.TRL_TRAINER_ARGUMENTS[trainer]


def trl_default(trainer: str | None, dest: str) -> object:
    """TRL 1.16.0's default of a `trl <trainer>` argument (None if unknown)."""
    if trainer not in launch_tables.TRL_TRAINER_ARGUMENTS:
        return None
    return next((spec[2] for spec in trl_specs(trainer) if spec[0] == dest), None)


def trl_parser(trainer: str, prog: str) -> argparse.ArgumentParser:
    """The parser of `trl <trainer>` (HfArgumentParser keeps argparse's abbreviations)."""
    return build_parser(trl_specs(trainer), prog)


def accelerate_launch_parser() -> argparse.ArgumentParser:
    """accelerate 1.15.0 launch_command_parser (prog 'Accelerate launch command', no abbrev)."""
    return build_parser(launch_tables.ACCELERATE_LAUNCH, "Accelerate launch command", False)


def given(namespace: argparse.Namespace) -> set:
    """Destinations the command line set (the defaults are everything else)."""
    return set(getattr(namespace, "_given", set()))


def values(namespace: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(namespace).items() if k != "_given"}
