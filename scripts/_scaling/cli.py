"""What every entry script shares on the command line: exit codes, the one-line argument parser,
the wrapper that turns any failure into one line and an exit code, and terminal text helpers."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import textwrap
from typing import Callable, NoReturn, TextIO

# Exit codes of every script (each script's --help says what 1 means for it).
EXIT_OK = 0
EXIT_FINDINGS = 1  # a --require backend is not ready; an error finding; ...
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a UsageError instead of usage + exit."""

    def __init__(
        self,
        prog: str,
        doc: str = "",
        epilog: str = "",
        *,
        usage_hint: str = "see --help",
        **kwargs,
    ) -> None:
        """`doc`'s first paragraph is the description (an entry script passes its __doc__);
        the epilog keeps its line breaks."""
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        description = kwargs.pop("description", None) or doc.split("\n\n")[0].strip() or None
        super().__init__(prog=prog, description=description, epilog=epilog or None, **kwargs)
        self.usage_hint = usage_hint

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} ({self.usage_hint})")


def run(main: Callable[[list | None], int], prog: str, argv: list | None = None) -> NoReturn:
    """Run `main(argv)` and exit with its code; never print a traceback."""
    try:
        code = main(argv)
        sys.stdout.flush()  # a closed pipe shows up here, inside the handlers below
    except SystemExit:
        raise
    except UsageError as exc:
        code = _fail(prog, f"error: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        code = _fail(prog, "interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader (`| head`) left; stop quietly, and keep Python's exit flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    except BaseException as exc:
        code = _fail(prog, f"internal error: {type(exc).__name__}: {exc}", EXIT_INTERNAL)
    sys.exit(code)


def _fail(prog: str, message: str, code: int) -> int:
    lines = str(message).splitlines() or [""]
    sys.stderr.write(f"{prog}: {lines[0]}\n")
    return code


def use_colour(stream: TextIO | None = None) -> bool:
    """ANSI colour only on a terminal, and never with NO_COLOR or TERM=dumb."""
    stream = stream or sys.stdout
    isatty = getattr(stream, "isatty", lambda: False)
    return bool(isatty()) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def text_width() -> int:
    """Terminal width ($COLUMNS, else the terminal's, else 88), clamped to 72..100 columns.
    What shutil.get_terminal_size does, without importing shutil (a few ms)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return max(72, min(100, columns or 88))


def wrap(text: str, indent: str, width: int, hang: str = "  ") -> str:
    """Fill to `width`, continuation lines indented by `hang` more; a no-break space (\\xa0)
    keeps "name version" together, and a word longer than the line is broken (after a "/" where
    it has one: paths and URLs), never overflows."""
    filled = _PathWrapper(
        width,
        initial_indent=indent,
        subsequent_indent=" " * len(indent) + hang,
        break_long_words=True,
        break_on_hyphens=False,
    ).fill(text)
    return filled.replace("\xa0", " ")


class _PathWrapper(textwrap.TextWrapper):
    """A TextWrapper that splits a word too long for any line after each "/" in it, so that a
    long path breaks between its parts rather than inside one."""

    def _split(self, text: str) -> list:
        room = self.width - len(self.subsequent_indent)
        chunks = []
        for chunk in super()._split(text):
            if len(chunk) > room and "/" in chunk:
                chunks += [part for part in re.split(r"(?<=/)(?=[^/])", chunk) if part]
            else:
                chunks.append(chunk)
        return chunks


def number(
    low: float,
    high: float,
    *,
    whole: bool = False,
    low_open: bool = False,
    high_open: bool = False,
    name: str = "value",
) -> Callable[[str], float]:
    """An argparse type: a finite number in an interval, as int when `whole` (7e9 is whole, 0.5
    and 2.5e0 are not). The error names the interval, e.g. "expected 0 < seconds <= 600"."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            what = (
                f"{text!r} is not a number"
                if name == "value"
                else f"expected {name} as a number, got {text!r}"
            )
            raise argparse.ArgumentTypeError(what) from None
        if whole and (not math.isfinite(value) or value != int(value)):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (math.isfinite(value) and above and below):
            if whole:
                raise argparse.ArgumentTypeError(f"{text!r} must be from {low:,} to {high:,.0f}")
            ops = ("<" if low_open else "<=", "<" if high_open else "<=")
            interval = f"{low:g} {ops[0]} {name} {ops[1]} {high:g}"
            raise argparse.ArgumentTypeError(f"expected {interval}, got {text!r}")
        return int(value) if whole else value

    return parse
