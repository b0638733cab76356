#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Map a failed TRL run's log or traceback to its cause, confirm step and fix.

Reads the log (a file, or - for standard input), finds the entries of
references/troubleshooting.md whose signatures it contains, and ranks them: the line that
ended the run counts most, and entries whose releases include the installed versions (this
machine's, or --facts FILE's) rank higher. Never runs anything it reads. Standard library only.
"""

import os
import sys

PROG = "diagnose.py"
if sys.version_info < (3, 9):  # noqa: UP036 (the one line older Pythons get)
    sys.stderr.write(f"{PROG}: needs Python 3.9 or newer; this is {sys.version.split()[0]}\n")
    sys.exit(2)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under -I / PYTHONSAFEPATH

import argparse  # noqa: E402
import json  # noqa: E402

from _scaling import cli, diagnosis, facts, troubleshooting, verdicts  # noqa: E402
from _scaling.metadata import collect_packages  # noqa: E402

SCHEMA_VERSION = 1
REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "references",
                         "troubleshooting.md")  # fmt: skip
MAX_LOG_BYTES = 64 * 2**20  # a longer log is read from its end, where runs fail

EPILOG = f"""\
examples:
  python3 {PROG} train.log
  accelerate launch train.py 2>&1 | tee run.log; python3 {PROG} run.log --json
  python3 {PROG} --facts node1.json - < pasted_traceback.txt

exit status:
  0  at least one entry matched      1  nothing matched (the closest entries are named)
  2  bad usage (missing or unreadable log, bad --facts, unknown flag)
  3  internal error (one line on stderr, never a traceback)

--json prints one object (schema_version {SCHEMA_VERSION}):
  log                {{source, lines, final_error_line (1-based, or null), truncated}}
  versions           {{dist: version}} the ranking used, and versions_source
  matches            best first: [{{id, title, section, cause, confirm, fix, upgrade,
                      releases, release_match (true|false|null), sources, score,
                      matched: {{line (1-based), text, signature}}}}]
  closest            when nothing matched: [{{id, title, section}}] to read next
  reference          the troubleshooting reference the entries come from
"""


def build_parser() -> argparse.ArgumentParser:
    parser = cli.OneLineParser(PROG, __doc__, EPILOG)
    parser.add_argument("log", nargs="?", help="log file, or - for standard input")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--facts",
        metavar="FILE",
        help="rank by the versions in facts recorded with check_optional_backends.py --json",
    )
    parser.add_argument("--top", type=int, default=3, metavar="N", help="matches to show (3)")
    parser.add_argument("--reference", default=REFERENCE, help=argparse.SUPPRESS)
    return parser


def read_log(source: "str | None") -> tuple:
    """(text, truncated) from a path or '-': at most the last MAX_LOG_BYTES, where runs fail;
    a binary log is decoded with replacements."""
    if source is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise cli.UsageError("give a log file, or - to read standard input")
        source = "-"
    if source != "-" and os.path.isdir(source):
        raise cli.UsageError(f"{source} is a directory, not a log")
    try:
        if source == "-":
            data, truncated = _tail(sys.stdin.buffer)
        else:
            with open(source, "rb") as fh:
                data, truncated = _tail(fh)
    except OSError as exc:
        raise cli.UsageError(f"cannot read {source}: {exc.strerror or exc}") from None
    return data.decode("utf-8", "replace"), truncated


def _tail(stream) -> tuple:
    """(the last MAX_LOG_BYTES of a stream, whether anything before them was dropped)."""
    if stream.seekable():
        size = stream.seek(0, os.SEEK_END)
        stream.seek(max(0, size - MAX_LOG_BYTES))
        return stream.read(), size > MAX_LOG_BYTES
    kept, dropped = b"", False
    for chunk in iter(lambda: stream.read(2**20), b""):
        kept += chunk
        if len(kept) > MAX_LOG_BYTES:
            kept, dropped = kept[-MAX_LOG_BYTES:], True
    return kept, dropped


def installed_versions(recorded: "str | None") -> tuple:
    """({dist: version}, where they come from): recorded facts, or this interpreter's metadata."""
    if recorded:
        try:
            data = facts.load_facts(recorded)
        except facts.FactsError as exc:
            raise cli.UsageError(str(exc)) from None
        source = recorded
    else:
        data = {"packages": collect_packages(sys.path, [])}
        source = "this interpreter"
    return verdicts.installed_versions(data), source


def load_entries(path: str) -> list:
    try:
        with open(path, encoding="utf-8") as fh:
            return troubleshooting.parse_reference(fh.read())
    except OSError as exc:
        raise cli.UsageError(f"cannot read the reference {path}: {exc.strerror or exc}") from None


def build_report(args: argparse.Namespace) -> dict:
    if args.top < 1:
        raise cli.UsageError("--top takes a whole number from 1")
    text, truncated = read_log(args.log)
    entries = load_entries(args.reference)
    versions, versions_source = installed_versions(args.facts)
    log = diagnosis.clean_log(text, truncated)
    matches = diagnosis.diagnose(log, entries, versions, args.top)
    final = log.final_error
    report = {
        "schema_version": SCHEMA_VERSION,
        "log": {
            "source": args.log or "-",
            "lines": len(log.lines),
            "final_error_line": None if final is None else final + 1,
            "final_error_text": None if final is None else log.lines[final],
            "truncated": truncated,
        },  # fmt: skip
        "versions": {k: v for k, v in sorted(versions.items()) if v},
        "versions_source": versions_source,
        "matches": [_match_json(m, log) for m in matches],
        "reference": os.path.normpath(args.reference),
    }
    if not matches:
        report["closest"] = [_entry_head(e) for e in diagnosis.closest(log, entries)]
    return report


def _entry_head(entry: troubleshooting.Entry) -> dict:
    return {"id": entry.id, "title": entry.title, "section": entry.section}


def _match_json(match: diagnosis.Match, log: diagnosis.Log) -> dict:
    entry = match.entry
    return dict(
        _entry_head(entry),
        cause=entry.cause, confirm=entry.confirm, fix=entry.fix, upgrade=entry.upgrade,
        releases=entry.releases_text, release_match=match.release_match,
        sources=list(entry.sources), score=match.score,
        matched={"line": match.line_index + 1, "text": log.lines[match.line_index],
                 "signature": match.signature},
    )  # fmt: skip


def render_text(report: dict, width: int) -> str:
    log = report["log"]
    where = f"{log['source']}: {log['lines']} lines"
    if log["final_error_line"]:
        where += f", the run ended at line {log['final_error_line']}"
    lines = [cli.wrap(where + (" (read from its end)" if log["truncated"] else ""), "", width)]
    if not report["matches"]:
        lines += ["", "No entry of the troubleshooting reference matches this log."]
        if log.get("final_error_text"):
            lines.append(cli.wrap(f"Last error line: {log['final_error_text']}", "", width))
        if report.get("closest"):
            lines.append("Closest entries to read:")
            lines += [f"  - {e['title']} ({e['section']}): #{e['id']}" for e in report["closest"]]
        lines.append(f"Search {report['reference']} for a fragment of the message.")
        return "\n".join(lines)
    for rank, match in enumerate(report["matches"], 1):
        lines += ["", _title_line(rank, match, width)]
        seen = match["matched"]
        lines.append(cli.wrap(f"matched line {seen['line']}: {seen['text'].strip()}", "   ", width))
        for label in ("cause", "confirm", "fix", "upgrade"):
            lines.append(cli.wrap(f"{label}: {match[label]}", "   ", width))
        lines.append(cli.wrap(f"releases: {match['releases']}", "   ", width))
        lines.append(cli.wrap(f"source: {', '.join(match['sources'])}", "   ", width))
    note = f"versions from {report['versions_source']}"
    lines += ["", cli.wrap(f"Entries from {report['reference']} (#id anchors); {note}.", "", width)]
    return "\n".join(lines)


def _title_line(rank: int, match: dict, width: int) -> str:
    if match["release_match"] is None:
        fit = "any release" if match["releases"].lower().startswith("any") else "versions unknown"
    else:
        fit = (
            "your versions are in range"
            if match["release_match"]
            else ("your versions are outside its range")
        )
    return cli.wrap(
        f"{rank}. {match['title']} ({match['section']}; {fit}) #{match['id']}", "", width
    )


def main(argv: "list | None" = None) -> int:
    args = build_parser().parse_args(argv)
    report = build_report(args)
    print(json.dumps(report, indent=2) if args.json else render_text(report, cli.text_width()))
    return cli.EXIT_OK if report["matches"] else cli.EXIT_FINDINGS


def entry() -> None:
    """The command (also the entry point of a zipapp built from scripts/)."""
    cli.run(main, PROG)


if __name__ == "__main__":
    entry()
