"""Helpers for the doc-oracle tests: Markdown extraction and the oracle universes.

The installed, pinned stack (TRL, accelerate, transformers, peft, torch) is the oracle: every
name, flag, config key and version the docs state is checked against what that stack accepts.
Nothing here knows what the docs *should* say; it only knows how to ask the installed code.

Used by tests/test_references.py, tests/test_evals.py and tests/test_skill_format.py.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import difflib
import enum
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import io
import json
import os
import re
import shlex
import subprocess
import sys
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import script_modules

REPO = Path(__file__).resolve().parents[1]
SKILL_MD = REPO / "SKILL.md"
REFERENCES_DIR = REPO / "references"
SCRIPTS_DIR = REPO / "scripts"
EVALS_JSON = REPO / "evals" / "evals.json"
EXPECTED_REFERENCES = (
    "references/backend-selection.md",
    "references/vllm-reference.md",
    "references/troubleshooting.md",
)
SITE_PACKAGES = Path(importlib.util.find_spec("trl").origin).parents[1]
# Packages whose sources are searched for env var names and allowlisted names.
STACK_PACKAGES = (
    "torch",
    "transformers",
    "accelerate",
    "trl",
    "peft",
    "datasets",
    "huggingface_hub",
)
TRL_COMMANDS = ("distillation", "dpo", "grpo", "kto", "reward", "rloo", "sft")
BLOCK_TIMEOUT_S = 60

# `vllm serve` is not installed here, so its flags are checked against this list: the flags
# TRL's own wrapper generates (read from trl/scripts/vllm_serve.py at run time and added to
# this set) plus a few widely documented ones (see tests/test_references.py, convention 3).
VLLM_SERVE_FLAGS = frozenset(
    {
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--dtype",
        "--host",
        "--port",
        "--enable-prefix-caching",
        "--enforce-eager",
        "--kv-cache-dtype",
        "--trust-remote-code",
        "--model-impl",
        "--weight-transfer-config",
        "--logprobs-mode",
        "--max-logprobs",
        "--enable-scale-out",
        "--distributed-executor-backend",
        "--revision",
        "--enable-sleep-mode",
        "--uvicorn-log-level",
        "--enable-lora",
        "--max-lora-rank",
        "--help",
    }
)

# Keys a TRL trainer passes to `from_pretrained` through `model_init_kwargs`.
MODEL_INIT_KWARGS = frozenset(
    {
        "dtype",
        "attn_implementation",
        "use_kernels",
        "device_map",
        "quantization_config",
        "revision",
        "trust_remote_code",
    }
)

SNAKE_RE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
LOWER_NAME_RE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
UPPER_RE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
FLAG_RE = re.compile(r"--?[A-Za-z][\w-]*")
REQ_RE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[\w,\s-]+\])?\s*(?:===|==|!=|~=|>=|<=|<|>)\s*\d"
)
ABS_PATH_RE = re.compile(r"(?<![\w.])(?:/work/|/tmp/|/home/|[A-Za-z]:\\)")
PLACEHOLDER_RE = re.compile(r"<[A-Za-z][\w.:/ |-]*>")
PLACEHOLDER_VALUE = "1"


# --------------------------------------------------------------------------------------------
# Markdown extraction
# --------------------------------------------------------------------------------------------


@dataclass
class Block:
    """A fenced code block. `line` is the 1-based line of the first content line."""

    path: str
    lang: str
    text: str
    line: int
    fence_line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.fence_line}"


@dataclass
class Span:
    """A backticked inline code span in prose (outside fenced blocks)."""

    path: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Doc:
    path: str  # relative to the repo, e.g. "references/vllm-reference.md"
    text: str
    lines: list[str]
    blocks: list[Block]
    prose: list[tuple[int, str]]  # (1-based line number, text) outside fences and frontmatter

    @property
    def spans(self) -> list[Span]:
        out = []
        for lineno, line in self.prose:
            out.extend(Span(self.path, lineno, t) for t in inline_code_spans(line))
        return out


_FENCE_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")


def frontmatter_range(lines: list[str]) -> tuple[int, int] | None:
    """0-based [start, end] line indexes of a leading `---` frontmatter block, inclusive."""
    if not lines or lines[0].strip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return (0, i)
    return None


def parse_markdown(text: str, path: str = "<doc>") -> Doc:
    lines = text.splitlines()
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    fm = frontmatter_range(lines) if path.endswith("SKILL.md") else None
    i = 0
    if fm:
        i = fm[1] + 1
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence = m.group("fence")
        indent = len(m.group("indent"))
        info = m.group("info").strip()
        lang = info.split()[0].lower() if info else ""
        close = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        body = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            ln = lines[j]
            # Remove up to `indent` leading spaces (fences nested in list items).
            strip = len(ln) - len(ln.lstrip(" "))
            body.append(ln[min(indent, strip) :])
            j += 1
        blocks.append(Block(path, lang, "\n".join(body) + "\n", i + 2, i + 1))
        i = j + 1
    return Doc(path, text, lines, blocks, prose)


_SPAN_RE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def inline_code_spans(line: str) -> list[str]:
    out = []
    for m in _SPAN_RE.finditer(line):
        t = m.group(2)
        if len(t) >= 2 and t.startswith(" ") and t.endswith(" ") and t.strip():
            t = t[1:-1]
        out.append(t.replace("\\|", "|"))
    return out


def load_doc(relpath: str) -> Doc:
    return parse_markdown((REPO / relpath).read_text(encoding="utf-8"), relpath)


def doc_paths() -> list[str]:
    """SKILL.md, the expected references and any other references present (relative paths)."""
    names = ["SKILL.md", *EXPECTED_REFERENCES]
    if REFERENCES_DIR.is_dir():
        names += [f"references/{p.name}" for p in sorted(REFERENCES_DIR.glob("*.md"))]
    return list(dict.fromkeys(names))


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading text (without the #'s)."""
    t = heading.strip().lower()
    t = re.sub(r"`", "", t)
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", t)  # links → their text
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def heading_anchors(doc: Doc) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in doc.prose:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return out


LINK_RE = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(doc: Doc) -> list[tuple[int, str, str]]:
    """(line, text, target) of Markdown links in prose (code spans removed first)."""
    out = []
    for lineno, line in doc.prose:
        stripped = _SPAN_RE.sub("", line)
        for m in LINK_RE.finditer(stripped):
            out.append((lineno, m.group("text"), m.group("target")))
    return out


def close_matches(name: str, universe, n: int = 3) -> str:
    cands = difflib.get_close_matches(name, list(universe), n=n, cutoff=0.6)
    return f" (close: {', '.join(cands)})" if cands else ""


# --------------------------------------------------------------------------------------------
# Python blocks: batched runner (one subprocess per doc, each block in a fresh namespace)
# --------------------------------------------------------------------------------------------

RAISES_RE = re.compile(r"^\s*#\s*raises\s+(?P<exc>[A-Za-z_][\w.]*)\s*:\s*(?P<msg>.*?)\s*$")
# A block whose first line says so runs with a bf16-capable GPU simulated; every other block runs
# on this CPU as a reader's would. The marker is checked too: such a block must fail here.
BF16_GPU_MARKER_RE = re.compile(r"^#\s*Needs a bf16-capable GPU\b")
BF16_CPU_ERROR = "doesn't support bf16/gpu"

RUNNER = r"""
import json, signal, sys, time, traceback, warnings
warnings.simplefilter("ignore")
import transformers.training_args as _ta
_REAL_BF16_CHECK = _ta.is_torch_bf16_gpu_available

class _BlockTimeout(BaseException):
    pass

def _alarm(signum, frame):
    raise _BlockTimeout("block exceeded %d s" % TIMEOUT)

def run(b, bf16_gpu):
    _ta.is_torch_bf16_gpu_available = (lambda *a, **k: True) if bf16_gpu else _REAL_BF16_CHECK
    res = {"line": b["line"], "ok": True, "exc_type": None, "exc_qualname": None, "msg": None,
           "tb": None}
    ns = {"__name__": "__doc_block__"}
    signal.alarm(TIMEOUT)
    t0 = time.time()
    try:
        exec(compile(b["code"], b["filename"], "exec"), ns)
    except BaseException as e:  # noqa: BLE001 - we report everything, incl. SystemExit
        res.update(ok=False, exc_type=type(e).__name__,
                   exc_qualname=type(e).__module__ + "." + type(e).__qualname__, msg=str(e),
                   tb="".join(traceback.format_exception(e)[-6:]))
    finally:
        signal.alarm(0)
        _ta.is_torch_bf16_gpu_available = _REAL_BF16_CHECK
    res["seconds"] = round(time.time() - t0, 2)
    return res

signal.signal(signal.SIGALRM, _alarm)
blocks = json.load(open(sys.argv[1]))
TIMEOUT = int(sys.argv[2])
results = []
for b in blocks:
    res = run(b, b["bf16_gpu"])
    if b["bf16_gpu"]:
        res["on_cpu"] = run(b, False)
    results.append(res)
sys.stdout.write("\n@@RESULTS@@" + json.dumps(results) + "\n")
"""


def needs_bf16_gpu(block: Block) -> bool:
    """True when the block's first non-blank line is the `# Needs a bf16-capable GPU` marker."""
    first = next((ln for ln in block.text.splitlines() if ln.strip()), "")
    return bool(BF16_GPU_MARKER_RE.match(first.strip()))


def block_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRL_EXPERIMENTAL_SILENCE="1",
        TOKENIZERS_PARALLELISM="false",
        CUDA_VISIBLE_DEVICES="",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def start_python_blocks(blocks: list[Block], workdir: Path, timeout: int = BLOCK_TIMEOUT_S):
    """Start one subprocess running all `blocks` (same doc); returns a handle for collect."""
    workdir.mkdir(parents=True, exist_ok=True)
    payload = [
        # Leading newlines make traceback line numbers those of the Markdown file.
        {
            "line": b.line,
            "code": "\n" * (b.line - 1) + b.text,
            "filename": b.path,
            "bf16_gpu": needs_bf16_gpu(b),
        }
        for b in blocks
    ]
    spec = workdir / "blocks.json"
    spec.write_text(json.dumps(payload), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(spec), str(timeout)],
        cwd=workdir,
        env=block_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    return (proc, blocks, timeout * max(1, len(blocks)) + 60)


def collect_python_blocks(handle) -> list[dict]:
    """Per-block results: dicts with line, ok, exc_type, msg, tb (plus `block`)."""
    proc, blocks, total_timeout = handle
    try:
        out, err = proc.communicate(timeout=total_timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"python block runner timed out after {total_timeout}s") from None
    if "@@RESULTS@@" not in out:
        raise AssertionError(
            f"python block runner crashed (rc={proc.returncode}):\n{err[-3000:]}\n{out[-2000:]}"
        )
    results = json.loads(out.rsplit("@@RESULTS@@", 1)[1])
    for r, b in zip(results, blocks):
        r["block"] = b
    return results


def expected_raise(block: Block) -> tuple[str, str] | None:
    """(ExcType, substring) if the block's last non-blank line is `# raises Exc: msg`."""
    lines = [ln for ln in block.text.splitlines() if ln.strip()]
    if not lines:
        return None
    m = RAISES_RE.match(lines[-1])
    return (m.group("exc"), m.group("msg")) if m else None


def misplaced_raises(block: Block) -> list[int]:
    """Line numbers of `# raises` comments that are not the block's last non-blank line."""
    lines = block.text.splitlines()
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    return [block.line + i for i, ln in enumerate(lines) if RAISES_RE.match(ln) and i != last]


def judge_block(result: dict) -> str | None:
    """None when the block behaved as its doc says; otherwise a failure message."""
    b: Block = result["block"]
    where = f"{b.path}:{b.fence_line}"
    bad = misplaced_raises(b)
    if bad:
        return f"{where}: `# raises` comment must be the block's last line (found at {bad})"
    on_cpu = result.get("on_cpu")
    if on_cpu is not None and BF16_CPU_ERROR not in (on_cpu["msg"] or ""):
        return (
            f"{where}: marked `# Needs a bf16-capable GPU`, but on this CPU it "
            + ("runs" if on_cpu["ok"] else f"raises {on_cpu['exc_type']}: {on_cpu['msg']}")
            + " without the bf16 error; drop the marker"
        )
    exp = expected_raise(b)
    if exp is None:
        if result["ok"]:
            return None
        return (
            f"{where}: block raised {result['exc_type']}: {result['msg']}\n"
            f"(add a final `# raises {result['exc_type']}: <substring>` line only if the doc "
            f"means to show this error)\n{result['tb']}"
        )
    exc, sub = exp
    if not sub:
        return f"{where}: `# raises {exc}:` needs a substring of the expected message"
    if result["ok"]:
        return f"{where}: block was expected to raise {exc}: {sub!r} but ran without error"
    type_ok = (
        result["exc_type"] == exc
        if "." not in exc
        else (result["exc_qualname"] == exc or result["exc_qualname"].endswith("." + exc))
    )
    if not type_ok:
        return (
            f"{where}: expected {exc} but got {result['exc_type']}: {result['msg']}\n{result['tb']}"
        )
    if sub not in (result["msg"] or ""):
        return (
            f"{where}: {exc} raised, but its message does not contain {sub!r}.\n"
            f"Actual message: {result['msg']!r}"
        )
    return None


# --------------------------------------------------------------------------------------------
# The oracle: universes built from the installed stack (once per session)
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def simulated_bf16_gpu():
    import transformers.training_args as ta

    old = ta.is_torch_bf16_gpu_available
    ta.is_torch_bf16_gpu_available = lambda *a, **k: True
    try:
        yield
    finally:
        ta.is_torch_bf16_gpu_available = old


def _class_params(cls) -> set[str]:
    """Dataclass fields plus explicit __init__ parameters (BitsAndBytesConfig has both)."""
    params = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    with contextlib.suppress(TypeError, ValueError):
        sig = inspect.signature(cls.__init__)
        params |= {
            n
            for n, p in sig.parameters.items()
            if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
    return params


def _literal_values(tp) -> set[str]:
    out = set()
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        out.update(str(a) for a in typing.get_args(tp) if isinstance(a, str))
    elif origin is not None:
        for a in typing.get_args(tp):
            out |= _literal_values(a)
    return out


_QUOTED_RE = re.compile(r"""[`'"]([a-z][a-z0-9]*(?:_[a-z0-9]+)+)[`'"]""")


def _parser_option_strings(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _parser_dests(parser) -> set[str]:
    return {a.dest for a in parser._actions if a.dest not in ("help", argparse.SUPPRESS)}


@dataclass
class ScriptInfo:
    path: Path
    parser: object | None  # argparse.ArgumentParser when the script exposes a builder
    flags: set[str]
    dests: set[str]
    strings: set[str]  # identifier-like string constants in the source (JSON keys, values)
    error: str | None = None


PARSER_BUILDERS = ("build_parser", "make_parser", "get_parser", "create_parser", "_build_parser")


def _string_constants(path: Path) -> set[str]:
    strings = set()
    with contextlib.suppress(SyntaxError):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*", node.value)
            ):
                strings.add(node.value)
    return strings


def load_script_info(path: Path) -> ScriptInfo:
    # An entry script's JSON keys and values live in the package it imports.
    strings = _string_constants(path)
    for module in sorted(script_modules.PACKAGE.glob("*.py")):
        strings |= _string_constants(module)
    parser = None
    error = None
    try:
        mod = script_modules.load(path.stem)
        for name in PARSER_BUILDERS:
            fn = getattr(mod, name, None)
            if callable(fn):
                with contextlib.suppress(TypeError):
                    parser = fn()
                    break
    except Exception as e:  # noqa: BLE001 - reported by the caller
        error = f"{type(e).__name__}: {e}"
    if parser is not None:
        flags = _parser_option_strings(parser)
        dests = _parser_dests(parser)
    else:
        proc = subprocess.run(
            [sys.executable, str(path), "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        flags = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", proc.stdout))
        dests = {f.lstrip("-").replace("-", "_") for f in flags if f.startswith("--")}
    return ScriptInfo(path, parser, flags, dests, strings, error)


@dataclass
class Oracle:
    """Everything the installed stack accepts, with where each name comes from."""

    names: dict[str, set[str]] = field(default_factory=dict)  # identifier → origins
    values: dict[str, set[str]] = field(default_factory=dict)  # known string values → origins
    choices: dict[str, set[str]] = field(default_factory=dict)  # field → explicit choices
    classes: dict[str, set[str]] = field(default_factory=dict)  # class name → params
    flags: dict[str, set[str]] = field(default_factory=dict)  # flag → origins
    command_flags: dict[str, set[str]] = field(default_factory=dict)  # "trl sft" → flags
    command_dests: dict[str, set[str]] = field(default_factory=dict)
    launch_dests: set[str] = field(default_factory=set)
    cluster_fields: set[str] = field(default_factory=set)
    vllm_flags: set[str] = field(default_factory=set)
    scripts: dict[str, ScriptInfo] = field(default_factory=dict)  # "scripts/x.py" → info
    env_tokens: set[str] = field(default_factory=set)
    # The scripts' real --json reports (root key → sample values) and the keys their --help
    # documents as conditional (`import?`, `torch_runtime  (--imports)`).
    json_samples: dict[str, list] = field(default_factory=dict)
    json_optional: set[str] = field(default_factory=set)
    defaults: dict[str, dict[str, list]] = field(default_factory=dict)  # class → field → values
    main_classes: set[str] = field(default_factory=set)  # non-experimental config classes

    def add(self, table: dict[str, set[str]], names, origin: str) -> None:
        for n in names:
            table.setdefault(n, set()).add(origin)


def _trl_config_classes() -> dict[str, type]:
    import trl

    out: dict[str, type] = {}
    for n in dir(trl):
        if n.endswith(("Config", "Arguments")):
            c = getattr(trl, n)
            if dataclasses.is_dataclass(c):
                out[n] = c
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pkgutil

        import trl.experimental as te

        for m in pkgutil.iter_modules(te.__path__):
            try:
                mod = importlib.import_module(f"trl.experimental.{m.name}")
            except Exception:  # noqa: BLE001, S112 - an optional experimental module
                continue
            for n in dir(mod):
                c = getattr(mod, n)
                if (
                    n.endswith("Config")
                    and dataclasses.is_dataclass(c)
                    and c.__module__.startswith("trl.")
                ):
                    out.setdefault(n, c)
    return out


def _grep_upper_tokens() -> set[str]:
    rx = re.compile(rb"\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b")
    toks: set[bytes] = set()
    for pkg in STACK_PACKAGES:
        root = SITE_PACKAGES / pkg
        for f in root.rglob("*.py"):
            with contextlib.suppress(OSError):
                toks.update(rx.findall(f.read_bytes()))
    return {t.decode() for t in toks}


def vllm_wrapper_flags() -> set[str]:
    """The `vllm serve` flags TRL's `trl vllm-serve` wrapper itself generates."""
    from trl.scripts import vllm_serve

    src = inspect.getsource(vllm_serve.build_command)
    return set(re.findall(r"""["'](--[a-z][a-z0-9-]*)["']""", src))


@functools.lru_cache(maxsize=1)
def build_oracle() -> Oracle:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _build_oracle()


def _build_oracle() -> Oracle:
    import accelerate.utils.dataclasses as adc
    import peft
    import transformers
    from accelerate import ParallelismConfig
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser

    o = Oracle()
    classes: dict[str, type] = _trl_config_classes()
    classes["TrainingArguments"] = transformers.TrainingArguments
    classes["BitsAndBytesConfig"] = transformers.BitsAndBytesConfig
    classes["LoraConfig"] = peft.LoraConfig
    classes["ParallelismConfig"] = ParallelismConfig
    for n in (
        "FullyShardedDataParallelPlugin",
        "DeepSpeedPlugin",
        "TorchContextParallelConfig",
        "DeepSpeedSequenceParallelConfig",
        "TorchTensorParallelConfig",
    ):
        classes[n] = getattr(adc, n)
    from trl.scripts import vllm_serve

    classes["VllmServeScriptArguments"] = vllm_serve.ScriptArguments

    unconstrained: set[str] = set()
    for name, cls in classes.items():
        params = _class_params(cls)
        o.classes[name] = params
        o.add(o.names, params, name)
        if dataclasses.is_dataclass(cls):
            hints = {}
            with contextlib.suppress(Exception):
                hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                ch = set()
                meta = f.metadata or {}
                if meta.get("choices"):
                    ch |= {str(c) for c in meta["choices"]}
                ch |= _literal_values(hints.get(f.name, f.type))
                if ch:
                    o.choices.setdefault(f.name, set()).update(ch)
                    o.add(o.values, ch, f"{name}.{f.name} choices")
                else:
                    unconstrained.add(f.name)
                if isinstance(f.default, str):
                    o.add(o.values, [f.default], f"{name}.{f.name} default")
                if isinstance(f.default, enum.Enum):
                    o.add(o.values, [str(f.default.value)], f"{name}.{f.name} default")
                o.add(o.values, _QUOTED_RE.findall(str(meta.get("help", ""))), f"{name}.{f.name}")
    for n in unconstrained:  # a value check only holds if every class constrains the field
        o.choices.pop(n, None)
    o.classes["ModelInitKwargs"] = set(MODEL_INIT_KWARGS)

    # Trainer constructor arguments (e.g. `peft_config`, `reward_funcs`, `compute_loss_func`).
    import trl

    trainers = {n: getattr(trl, n) for n in dir(trl) if n.endswith("Trainer")}
    trainers["Trainer"] = transformers.Trainer
    for name, cls in trainers.items():
        with contextlib.suppress(Exception):
            params = _class_params(cls)
            o.classes[name] = params
            o.add(o.names, params, f"{name}.__init__")
    # Names of the accelerate configs TRL ships (`--accelerate_config zero3`).
    shipped = Path(trl.__file__).parent / "accelerate_configs"
    o.add(o.values, [p.stem for p in shipped.glob("*.yaml")], "trl/accelerate_configs")
    o.add(o.names, MODEL_INIT_KWARGS, "model_init_kwargs key")

    # Enum values the configs accept (optimizers, schedulers, strategies, distributed types).
    import accelerate.utils.constants as aconst
    import transformers.trainer_utils as tu
    import transformers.training_args as ta

    for mod in (tu, ta, adc):
        for obj in vars(mod).values():
            if inspect.isclass(obj) and issubclass(obj, enum.Enum) and obj is not enum.Enum:
                o.add(
                    o.values,
                    [str(m.value) for m in obj if isinstance(m.value, str)],
                    f"{obj.__name__} enum",
                )
    for n in dir(aconst):
        v = getattr(aconst, n)
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            o.add(o.values, v, f"accelerate.utils.constants.{n}")
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    o.add(o.values, ALL_ATTENTION_FUNCTIONS._global_mapping.keys(), "attention implementations")

    # accelerate: config-file keys and launch args.
    lp = launch_command_parser()
    o.launch_dests = _parser_dests(lp)
    o.cluster_fields = {f.name for f in dataclasses.fields(ClusterConfig)}
    o.add(o.names, o.cluster_fields, "accelerate config file")
    o.add(o.names, o.launch_dests, "accelerate launch")
    # TrainingArguments.fsdp_config keys may drop the `fsdp_` prefix.
    o.add(
        o.names,
        {d[5:] for d in o.launch_dests if d.startswith("fsdp_")},
        "fsdp_config key (prefix-less)",
    )
    o.command_flags["accelerate launch"] = _parser_option_strings(lp)
    o.add(o.flags, o.command_flags["accelerate launch"], "accelerate launch")

    # TRL CLI parsers.
    with simulated_bf16_gpu():
        for cmd in TRL_COMMANDS:
            p = importlib.import_module(f"trl.scripts.{cmd}").make_parser(prog=f"trl {cmd}")
            key = f"trl {cmd}"
            o.command_flags[key] = _parser_option_strings(p) | {"--config", "--accelerate_config"}
            o.command_dests[key] = _parser_dests(p)
            o.add(o.flags, o.command_flags[key], key)
            o.add(o.names, o.command_dests[key], key)
        vp = vllm_serve.make_parser(prog="trl vllm-serve")
        o.command_flags["trl vllm-serve"] = _parser_option_strings(vp) | {"--config"}
        o.command_dests["trl vllm-serve"] = _parser_dests(vp)
        o.add(o.flags, o.command_flags["trl vllm-serve"], "trl vllm-serve")
        o.add(o.names, o.command_dests["trl vllm-serve"], "trl vllm-serve")
    o.add(o.names, ["accelerate_config"], "trl CLI")
    o.vllm_flags = set(VLLM_SERVE_FLAGS) | vllm_wrapper_flags()
    o.command_flags["vllm serve"] = o.vllm_flags
    o.add(o.flags, o.vllm_flags, "vllm serve allowlist")

    import torch.distributed.run as tdr

    o.command_flags["torchrun"] = _parser_option_strings(tdr.get_args_parser())
    o.add(o.flags, o.command_flags["torchrun"], "torchrun")

    # The bundle's own scripts.
    if SCRIPTS_DIR.is_dir():
        for p in sorted(SCRIPTS_DIR.glob("*.py")):
            info = load_script_info(p)
            rel = f"scripts/{p.name}"
            o.scripts[rel] = info
            o.command_flags[rel] = info.flags
            o.add(o.flags, info.flags, rel)
            o.add(o.names, info.dests, rel)
            o.add(o.names, info.strings, f"{rel} (string constant)")

    o.env_tokens = _grep_upper_tokens()
    o.json_samples, o.json_optional = script_json_samples(o.scripts)
    o.defaults = config_defaults(classes)
    o.main_classes = {
        n for n, c in classes.items() if not c.__module__.startswith("trl.experimental")
    }
    return o


# Runs whose --json output shows every key the docs may name (CPU machine: no devices).
SCRIPT_JSON_RUNS = (
    ("check_optional_backends.py", ("--json",)),
    (
        "estimate_memory.py",
        (
            "--params",
            "7e9",
            "--trainer",
            "grpo",
            "--vllm-mode",
            "colocate",
            "--gpus",
            "8",
            "--gpu-memory-gb",
            "80",
            "--json",
        ),
    ),
    (
        "estimate_memory.py",
        (
            "--params",
            "7e9",
            "--trainer",
            "dpo",
            "--tuning",
            "qlora",
            "--gpus",
            "1",
            "--gpu-memory-gb",
            "24",
            "--json",
        ),
    ),
)


_INSTANTIATE_PREFIXES = ("trl.", "transformers.", "peft.")


def config_defaults(classes: dict[str, type]) -> dict[str, dict[str, list]]:
    """class → field → the values a user gets by default: the declared default and, for
    classes that construct without arguments, the value after __post_init__ (TRL resolves
    `bf16=None` to True there). Fields without a default are absent."""
    out: dict[str, dict[str, list]] = {}
    for name, cls in classes.items():
        vals: dict[str, list] = {}
        if dataclasses.is_dataclass(cls):
            for f in dataclasses.fields(cls):
                if f.default is not dataclasses.MISSING:
                    vals.setdefault(f.name, []).append(f.default)
                elif f.default_factory is not dataclasses.MISSING:
                    with contextlib.suppress(Exception):
                        vals.setdefault(f.name, []).append(f.default_factory())
        with contextlib.suppress(TypeError, ValueError):
            for n, prm in inspect.signature(cls.__init__).parameters.items():
                if n != "self" and prm.default is not inspect.Parameter.empty:
                    vals.setdefault(n, []).append(prm.default)
        if dataclasses.is_dataclass(cls) and cls.__module__.startswith(_INSTANTIATE_PREFIXES):
            try:
                with (
                    simulated_bf16_gpu(),
                    warnings.catch_warnings(),
                    contextlib.redirect_stderr(io.StringIO()),
                    contextlib.redirect_stdout(io.StringIO()),
                ):
                    warnings.simplefilter("ignore")
                    inst = cls()
            except Exception:  # noqa: BLE001, S110 - needs arguments: declared defaults only
                inst = None
            if inst is not None:
                for f in dataclasses.fields(cls):
                    if f.name in vals and hasattr(inst, f.name):
                        vals[f.name].append(getattr(inst, f.name))
        out[name] = vals
    return out


def script_json_samples(scripts: dict[str, ScriptInfo]) -> tuple[dict[str, list], set[str]]:
    """Root key → values from the scripts' real --json reports; conditional keys from --help."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS_DIR / name), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            env=block_env(),
        )
        for name, args in SCRIPT_JSON_RUNS
        if (SCRIPTS_DIR / name).is_file()
    ]
    samples: dict[str, list] = {}
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        with contextlib.suppress(ValueError):
            report = json.loads(out)
            if isinstance(report, dict):
                for k, v in report.items():
                    samples.setdefault(k, []).append(v)
    optional: set[str] = set()
    for info in scripts.values():
        if info.parser is None:
            continue
        text = info.parser.format_help()
        optional |= set(re.findall(r"\b([a-z][a-z0-9_]*)\?", text))
        optional |= set(re.findall(r"^\s+([a-z][a-z0-9_]*)\s+\(--[\w-]+\)", text, re.M))
    return samples, optional


# --------------------------------------------------------------------------------------------
# Checks. Each returns a list of problem strings (empty = fine).
# --------------------------------------------------------------------------------------------

CALL_RE = re.compile(r"^(?P<callee>[A-Za-z_][\w.]*)\((?P<args>.*)\)$", re.S)
KWARG_RE = re.compile(r"(?:^|[,(]\s*)([A-Za-z_]\w*)\s*=(?!=)")
ASSIGN_RE = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*(?:=|:\s)\s*(?P<value>.+)$", re.S)
DICT_KEY_RE = re.compile(r"""["']([A-Za-z_]\w*)["']\s*:""")
SUBSCRIPT_RE = re.compile(r"""^(?P<name>[a-z_]\w*)\[["'](?P<key>\w+)["']\]$""")
SOURCE_REF_RE = re.compile(
    r"^(?P<path>(?:%s)/[\w/.-]+\.py)(?::(?P<line>\d+)(?:-(?P<end>\d+))?)?$"
    % "|".join(STACK_PACKAGES)
)
ATTR_RE = re.compile(r"^(?P<cls>[A-Z]\w*)\.(?P<attr>[a-z]\w*)$")
# Top-level JSON keys of the scripts' reports (their --help documents them).
SCRIPT_JSON_ROOTS = (
    "packages",
    "torch_build",
    "accelerators",
    "environment",
    "backends",
    "vllm_server",
    "strategies",
    "recommendation",
    "assumptions",
    "torch_runtime",
    "config",
    "timings",
    "warnings",
)
JSON_PART_RE = re.compile(r"\[\]|[^.\[\]]+")
FILE_NAME_RE = re.compile(r"\.(json|ya?ml|py|md|txt|toml|cfg|sh)$")


def check_source_ref(path: str, line: str | None, end: str | None, where: str) -> list[str]:
    """`trl/trainer/grpo_trainer.py:339`: the file exists in site-packages, the line in it."""
    f = SITE_PACKAGES / path
    if not f.is_file():
        return [f"{where}: `{path}` does not exist in the installed packages"]
    if line:
        n = len(f.read_text(encoding="utf-8", errors="replace").splitlines())
        last = int(end or line)
        if not 1 <= int(line) <= last <= n:
            return [f"{where}: `{path}` has {n} lines; `{line}` is out of range"]
    return []


COMMAND_PREFIXES = (
    "accelerate ",
    "trl ",
    "vllm serve",
    "torchrun ",
    "python scripts/",
    "python3 scripts/",
)


class IdentifierChecker:
    """Checks backticked tokens (prose, tables, evals) against the oracle."""

    def __init__(self, oracle: Oracle, allow_names: dict, allow_env: dict, allow_flags: dict):
        self.o = oracle
        self.allow_names = allow_names
        self.allow_env = allow_env
        self.allow_flags = allow_flags

    # --- single names
    def check_name(self, name: str, where: str) -> list[str]:
        if name in self.o.names or name in self.o.values or name in self.allow_names:
            return []
        universe = set(self.o.names) | set(self.o.values)
        return [
            f"{where}: `{name}` is not a field/key/arg of the installed stack nor allowlisted"
            + close_matches(name, universe)
        ]

    def check_env(self, name: str, where: str) -> list[str]:
        if name in self.o.env_tokens or name in self.allow_env:
            return []
        return [
            f"{where}: `{name}` appears nowhere in the installed {'/'.join(STACK_PACKAGES)} "
            "sources and is not in ENV_ALLOWLIST" + close_matches(name, self.o.env_tokens)
        ]

    def check_flag(self, flag: str, where: str, command: str | None = None) -> list[str]:
        if flag in self.allow_flags:
            return []
        known = self.command_known_flags(command) if command else None
        if known is not None:
            if flag in known:
                return []
            return [
                f"{where}: `{flag}` is not accepted by `{command}`" + close_matches(flag, known)
            ]
        if flag in self.o.flags:
            return []
        return [
            f"{where}: `{flag}` exists in no known parser (accelerate launch, trl commands, "
            "vllm-serve, vllm serve allowlist, torchrun, scripts/)"
            + close_matches(flag, self.o.flags)
        ]

    def command_known_flags(self, command: str) -> set[str] | None:
        o = self.o
        if command.startswith("trl ") and command != "trl vllm-serve":
            if command not in o.command_flags:
                return None
            return o.command_flags[command] | o.command_flags["accelerate launch"]
        if command == "trl vllm-serve":
            return o.command_flags["trl vllm-serve"] | o.vllm_flags
        return o.command_flags.get(command)

    def check_choice(self, name: str, value: str, where: str) -> list[str]:
        v = value.strip()
        m = re.fullmatch(r"""(["'])(.*)\1""", v)
        if not m or name not in self.o.choices:
            return []
        if m.group(2) in self.o.choices[name]:
            return []
        return [
            f"{where}: `{name}={v}`: {m.group(2)!r} is not one of {sorted(self.o.choices[name])}"
        ]

    # --- a whole token
    def check_token(self, tok: str, where: str) -> list[str]:
        tok = tok.strip()
        if not tok:
            return []
        if tok.startswith(COMMAND_PREFIXES):
            return self.check_command_flags(tok, where)
        if tok.startswith("-"):
            flag = tok.split()[0].split("=")[0]
            return self.check_flag(flag, where) if FLAG_RE.fullmatch(flag) else []
        m = REQ_RE.match(tok)
        if m and is_requirement_name(re.split(r"[\[<>=!~\s]", tok, maxsplit=1)[0]):
            return []  # requirement specifiers are checked by check_requirement_text
        if m:  # a comparison such as `sp_size>1`: check the name
            tok = re.split(r"[<>=!~\s]", tok, maxsplit=1)[0]
        m = CALL_RE.match(tok)
        if m:
            return self.check_call(m.group("callee"), m.group("args"), where)
        m = SOURCE_REF_RE.match(tok)
        if m:
            return check_source_ref(m.group("path"), m.group("line"), m.group("end"), where)
        m = ATTR_RE.match(tok)
        if m and m.group("cls") in self.o.classes:
            if m.group("attr") in self.o.classes[m.group("cls")]:
                return []
            return [
                f"{where}: `{m.group('cls')}` has no field `{m.group('attr')}`"
                + close_matches(m.group("attr"), self.o.classes[m.group("cls")])
            ]
        path = tok.split()[0]
        if re.match(r"(%s)(\.|\[)" % "|".join(SCRIPT_JSON_ROOTS), path) and not (
            FILE_NAME_RE.search(path)
        ):
            return self.check_json_path(path, where)
        m = SUBSCRIPT_RE.match(tok)
        if m:
            return self.check_name(m.group("name"), where) + self.check_name(m.group("key"), where)
        m = ASSIGN_RE.match(tok)
        if m:
            name, value = m.group("name"), m.group("value")
            if UPPER_RE.fullmatch(name):
                return self.check_env(name, where)
            if not LOWER_NAME_RE.fullmatch(name):
                return []
            problems = self.check_name(name, where) + self.check_choice(name, value, where)
            if name == "model_init_kwargs" or name.endswith("_kwargs"):
                for key in DICT_KEY_RE.findall(value):
                    if name == "model_init_kwargs" and key not in MODEL_INIT_KWARGS:
                        problems.append(
                            f"{where}: `{key}` is not a model_init_kwargs key "
                            f"{sorted(MODEL_INIT_KWARGS)}" + close_matches(key, MODEL_INIT_KWARGS)
                        )
            return problems
        if re.fullmatch(r"[a-z][a-z0-9_]*_\*", tok):
            prefix = tok[:-1]
            if any(n.startswith(prefix) for n in self.o.names) or tok in self.allow_names:
                return []
            return [f"{where}: no known field starts with `{prefix}`"]
        if re.fullmatch(r"[A-Z][A-Z0-9_]*_\*", tok):
            prefix = tok[:-1]
            if any(n.startswith(prefix) for n in self.o.env_tokens) or tok in self.allow_env:
                return []
            return [f"{where}: no env var in the installed sources starts with `{prefix}`"]
        if SNAKE_RE.fullmatch(tok):
            return self.check_name(tok, where)
        if UPPER_RE.fullmatch(tok):
            return self.check_env(tok, where)
        return []

    def check_json_path(self, tok: str, where: str) -> list[str]:
        """`strategies.<name>.total_gb`, `accelerators.devices[].compute_capability`: walked
        through the scripts' real --json reports. Where the report has nothing to walk (no
        GPUs here, no accelerate config, a key only `--imports` adds), the rest of the path
        must at least name keys that occur in scripts/."""
        o = self.o
        parts = JSON_PART_RE.findall(tok)
        root = parts[0]
        if root == "environment":
            return [p for part in parts[1:] for p in self._json_fallback([part], tok, where)]
        nodes = list(o.json_samples.get(root, []))
        if not nodes:
            if root in o.json_optional:
                return self._json_fallback(parts[1:], tok, where)
            return [
                f"{where}: `{tok}`: no script's --json report has a top-level `{root}`"
                + close_matches(root, o.json_samples)
            ]
        for i, part in enumerate(parts[1:], 1):
            at = "".join(p if p == "[]" else "." + p for p in parts[:i]).lstrip(".")
            if part == "[]":
                lists = [n for n in nodes if isinstance(n, list)]
                if not lists:
                    return [f"{where}: `{tok}`: `{at}` is not a list in the scripts' output"]
                nodes = [e for lst in lists for e in lst]
                if not nodes:
                    return self._json_fallback(parts[i + 1 :], tok, where)
                continue
            dicts = [n for n in nodes if isinstance(n, dict)]
            if part.startswith("<"):
                if not dicts:
                    return [f"{where}: `{tok}`: `{at}` is not an object in the scripts' output"]
                nodes = [v for d in dicts for v in d.values()]
                continue
            if not dicts:
                if any(isinstance(n, (list, str, int, float, bool)) for n in nodes):
                    return [f"{where}: `{tok}`: `{at}` is a value, not an object"]
                return self._json_fallback(parts[i:], tok, where)  # e.g. null without GPUs
            hit = [d[part] for d in dicts if part in d]
            if hit:
                nodes = hit
                continue
            if part in o.json_optional:
                return self._json_fallback(parts[i + 1 :], tok, where)
            keys = {k for d in dicts for k in d}
            return [
                f"{where}: `{tok}`: the scripts' --json has no key `{part}` under `{at}`"
                + close_matches(part, keys)
            ]
        return []

    def _json_fallback(self, parts: list[str], tok: str, where: str) -> list[str]:
        known = set(self.o.json_optional)
        for info in self.o.scripts.values():
            known |= info.strings
        problems = []
        for part in parts:
            if part == "[]" or part.startswith("<") or part in self.o.env_tokens:
                continue
            if UPPER_RE.fullmatch(part):
                problems += self.check_env(part, where)
            elif LOWER_NAME_RE.fullmatch(part) and part not in known:
                problems.append(
                    f"{where}: `{tok}`: no key `{part}` in the scripts' output"
                    + close_matches(part, known)
                )
        return problems

    def check_call(self, callee: str, args: str, where: str) -> list[str]:
        cls = callee.rsplit(".", 1)[-1]
        if not cls.endswith(("Config", "Arguments", "Plugin")):
            return []
        kwargs = KWARG_RE.findall(args)
        problems = []
        params = self.o.classes.get(cls)
        for k in kwargs:
            if params is not None:
                if k not in params:
                    problems.append(
                        f"{where}: `{cls}` has no field `{k}`" + close_matches(k, params)
                    )
            else:
                problems += self.check_name(k, where)
        for m in re.finditer(r"model_init_kwargs\s*=\s*(\{[^}]*\})", args):
            for key in DICT_KEY_RE.findall(m.group(1)):
                if key not in MODEL_INIT_KWARGS:
                    problems.append(f"{where}: `{key}` is not a model_init_kwargs key")
        return problems

    def check_command_flags(self, cmd: str, where: str) -> list[str]:
        try:
            toks = shlex.split(PLACEHOLDER_RE.sub(PLACEHOLDER_VALUE, cmd))
        except ValueError:
            toks = cmd.split()
        command = command_family(toks)
        problems = []
        for t in toks:
            if t.startswith("--") and FLAG_RE.fullmatch(t.split("=")[0]):
                problems += self.check_flag(t.split("=")[0], where, command)
        return problems


def command_family(toks: list[str]) -> str | None:
    if not toks:
        return None
    if toks[0] == "accelerate" and len(toks) > 1 and toks[1] == "launch":
        return "accelerate launch"
    if toks[0] == "trl" and len(toks) > 1:
        return f"trl {toks[1]}"
    if toks[0] == "vllm" and len(toks) > 1 and toks[1] == "serve":
        return "vllm serve"
    if toks[0] == "torchrun":
        return "torchrun"
    if toks[0] in ("python", "python3") and len(toks) > 1 and toks[1].startswith("scripts/"):
        return toks[1]
    return None


# --------------------------------------------------------------------------------------------
# Command lines (```bash blocks)
# --------------------------------------------------------------------------------------------


def bash_commands(block: Block) -> list[tuple[int, list[str], list[str]]]:
    """(line, tokens, env names) per simple command in a bash block; env assignments stripped.

    `export A=1 B=2` yields tokens ["export"] and env names ["A", "B"]."""
    out = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        buf = lines[i]
        while buf.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            buf = buf.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        buf = buf.strip()
        if buf.startswith("$ "):
            buf = buf[2:]
        if not buf or buf.startswith("#"):
            continue
        text = PLACEHOLDER_RE.sub(PLACEHOLDER_VALUE, buf)
        try:
            lex = shlex.shlex(text, posix=True, punctuation_chars=";&|")
            lex.whitespace_split = True
            lex.commenters = "#"
            toks = list(lex)
        except ValueError:
            toks = text.split()
        cmd: list[str] = []
        assign = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")
        for t in [*toks, ";"]:
            if t in (";", "&&", "||", "|", "&", ";;", "|&"):
                envs = []
                while cmd and (
                    cmd[0] in ("env", "nohup", "time", "exec", "sudo", "export")
                    or assign.match(cmd[0])
                ):
                    m = assign.match(cmd.pop(0))
                    if m:
                        envs.append(m.group(1))
                if cmd or envs:
                    out.append((block.line + start, cmd, envs))
                cmd = []
            else:
                cmd.append(t)
    return out


def _parse_quietly(parser, args: list[str]):
    """parser.parse_args(args); returns (namespace, None) or (None, argparse error text)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return parser.parse_args(args), None
        except SystemExit as e:
            if e.code in (0, None):
                return None, None
            return None, err.getvalue().strip().splitlines()[-1] if err.getvalue() else str(e)


def _strip_config(args: list[str]) -> list[str]:
    out = list(args)
    if "--config" in out:
        i = out.index("--config")
        del out[i : i + 2]
    return out


class CommandChecker:
    def __init__(self, oracle: Oracle, ident: IdentifierChecker):
        self.o = oracle
        self.ident = ident

    def check(self, toks: list[str], where: str, envs: tuple[str, ...] = ()) -> list[str]:
        problems = []
        for name in envs:
            if UPPER_RE.fullmatch(name):
                problems += self.ident.check_env(name, where)
        if not toks:
            return problems
        return problems + self._check(toks, where)

    def _check(self, toks: list[str], where: str) -> list[str]:
        fam = command_family(toks)
        if fam == "accelerate launch":
            return self.accelerate_launch(toks[2:], where)
        if fam in ("trl vllm-serve",):
            return self.trl_vllm_serve(toks[2:], where)
        if fam and fam.startswith("trl "):
            return self.trl_training(toks[1], toks[2:], where)
        if fam == "vllm serve":
            return self.vllm_serve(toks[2:], where)
        if fam == "torchrun":
            import torch.distributed.run as tdr

            _, err = _parse_quietly(tdr.get_args_parser(), toks[1:])
            return [f"{where}: torchrun rejects `{shlex.join(toks)}`: {err}"] if err else []
        if fam and fam.startswith("scripts/"):
            return self.script(fam, toks[2:], where)
        if toks[0] in ("pip", "pip3", "uv") or toks[:3] == ["python", "-m", "pip"]:
            return check_requirement_tokens(toks, where)
        return []

    def accelerate_launch(self, args: list[str], where: str) -> list[str]:
        from accelerate.commands.launch import launch_command_parser

        _, err = _parse_quietly(launch_command_parser(), args)
        return [f"{where}: accelerate launch rejects its args {args}: {err}"] if err else []

    def trl_training(self, cmd: str, args: list[str], where: str) -> list[str]:
        if cmd == PLACEHOLDER_VALUE:
            return []
        if cmd == "env":
            return [f"{where}: `trl env` takes no arguments, got {args}"] if args else []
        if cmd not in TRL_COMMANDS:
            return [f"{where}: `trl {cmd}` is not a TRL 1.16.0 command {sorted(TRL_COMMANDS)}"]
        from accelerate.commands.launch import launch_command_parser
        from trl.cli.accelerate_config import resolve_accelerate_config_argument
        from trl.cli.commands.training import _subtract_subsequence

        args = _strip_config(args)
        problems = []
        if "--accelerate_config" in args:
            i = args.index("--accelerate_config")
            val = args[i + 1] if i + 1 < len(args) else ""
            if val.endswith((".yaml", ".yml", ".json")) or val == PLACEHOLDER_VALUE:
                args = args[:i] + ["--config_file", "cfg.yaml"] + args[i + 2 :]
        parser = importlib.import_module(f"trl.scripts.{cmd}").make_parser(prog=f"trl {cmd}")
        err = io.StringIO()
        try:
            with (
                simulated_bf16_gpu(),
                warnings.catch_warnings(),
                contextlib.redirect_stderr(err),
                contextlib.redirect_stdout(io.StringIO()),
            ):
                warnings.simplefilter("ignore")
                *_, config_remaining, cli_remaining = parser.parse_args_and_config(
                    list(args), return_remaining_strings=True, separate_remaining_strings=True
                )
                launch_args = resolve_accelerate_config_argument(config_remaining + cli_remaining)
        except SystemExit as e:
            if e.code in (0, None):
                return []
            return [f"{where}: `trl {cmd}` rejects {args}: {err.getvalue().strip()[-500:]}"]
        except Exception as e:  # noqa: BLE001 - a config __post_init__ error is a doc error
            return [f"{where}: `trl {cmd}` {args} fails: {type(e).__name__}: {e}"]
        script_args = _subtract_subsequence(args, cli_remaining)
        _, perr = _parse_quietly(launch_command_parser(), [*launch_args, f"{cmd}.py", *script_args])
        if perr:
            problems.append(
                f"{where}: `trl {cmd}` forwards {cli_remaining} to accelerate launch, "
                f"which rejects them: {perr}"
            )
        return problems

    def trl_vllm_serve(self, args: list[str], where: str) -> list[str]:
        from trl.scripts import vllm_serve

        parser = vllm_serve.make_parser(prog="trl vllm-serve")
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                _, extra = parser.parse_args_and_config(
                    _strip_config(args), return_remaining_strings=True
                )
        except SystemExit as e:
            if e.code in (0, None):
                return []
            return [f"{where}: `trl vllm-serve` rejects {args}: {err.getvalue().strip()[-500:]}"]
        except Exception as e:  # noqa: BLE001
            return [f"{where}: `trl vllm-serve` {args} fails: {type(e).__name__}: {e}"]
        return [
            f"{where}: `trl vllm-serve` forwards `{t}` to `vllm serve`, which is not in the "
            "vllm serve allowlist" + close_matches(t.split("=")[0], self.o.vllm_flags)
            for t in extra
            if t.startswith("-") and t.split("=")[0] not in self.o.vllm_flags
        ]

    def vllm_serve(self, args: list[str], where: str) -> list[str]:
        return [
            f"{where}: `vllm serve` flag `{t.split('=')[0]}` is not in the allowlist"
            + close_matches(t.split("=")[0], self.o.vllm_flags)
            for t in args
            if t.startswith("--") and t.split("=")[0] not in self.o.vllm_flags
        ]

    def script(self, rel: str, args: list[str], where: str) -> list[str]:
        info = self.o.scripts.get(rel)
        if info is None:
            return [f"{where}: `{rel}` does not exist"]
        if "--" in args:  # the script's own options, then a COMMAND it judges (the preflight)
            index = args.index("--")
            return self.script(rel, args[:index], where) + self._check(args[index + 1 :], where)
        if info.parser is not None:
            # Check flags, choices and arity, not the user's files: argparse `type` callables
            # other than int/float (e.g. "file must exist") are disabled while parsing.
            saved = [(a, a.type) for a in info.parser._actions]
            for a, t in saved:
                if t not in (None, int, float):
                    a.type = None
            try:
                _, err = _parse_quietly(info.parser, args)
            finally:
                for a, t in saved:
                    a.type = t
            return [f"{where}: `{rel}` rejects {args}: {err}"] if err else []
        return [
            f"{where}: `{rel}` has no flag `{t.split('=')[0]}` (per its --help)"
            + close_matches(t.split("=")[0], info.flags)
            for t in args
            if t.startswith("-") and FLAG_RE.fullmatch(t.split("=")[0])
            if t.split("=")[0] not in info.flags
        ]


# --------------------------------------------------------------------------------------------
# YAML blocks
# --------------------------------------------------------------------------------------------

ACCEL_SUBDICT_PREFIX = {
    "fsdp_config": "fsdp_",
    "fp8_config": "fp8_",
    "dynamo_config": "dynamo_",
    "deepspeed_config": "",
    "parallelism_config": "",
    "megatron_lm_config": "",
}


def check_accelerate_yaml(text: str, where: str, oracle: Oracle, tmpdir: Path) -> list[str]:
    import yaml
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils.dataclasses import PrecisionType

    problems = []
    path = tmpdir / "accelerate_config.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_config_from_file(str(path))
    except Exception as e:  # noqa: BLE001
        problems.append(f"{where}: accelerate's loader rejects it: {type(e).__name__}: {e}")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        return [*problems, f"{where}: not a YAML mapping"]
    for k in data:
        if k not in oracle.cluster_fields:
            problems.append(
                f"{where}: `{k}` is not an accelerate ClusterConfig field"
                + close_matches(k, oracle.cluster_fields)
            )
    mp = data.get("mixed_precision")
    if mp is not None and str(mp) not in {p.value for p in PrecisionType}:
        problems.append(
            f"{where}: mixed_precision {mp!r} not in {[p.value for p in PrecisionType]}"
        )
    for sect, prefix in ACCEL_SUBDICT_PREFIX.items():
        sub = data.get(sect)
        if sub is None:
            continue
        if not isinstance(sub, dict):
            problems.append(f"{where}: `{sect}` must be a mapping")
            continue
        for k in sub:
            dest = k if (not prefix or k.startswith(prefix)) else prefix + k
            if dest not in oracle.launch_dests:
                problems.append(
                    f"{where}: `{sect}.{k}` maps to accelerate launch arg `{dest}`, which does "
                    "not exist (accelerate ignores it silently)"
                    + close_matches(dest, oracle.launch_dests)
                )
    return problems


def check_trl_yaml(text: str, where: str, ident: IdentifierChecker) -> list[str]:
    import yaml

    o = ident.o
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [f"{where}: invalid YAML: {e}"]
    if not isinstance(data, dict):
        return [f"{where}: a TRL config file must be a YAML mapping"]
    extra = {"accelerate_config", "env"}
    keys = set(data)
    cmds = [c for c in o.command_dests if c.startswith("trl ")]
    fits = [c for c in cmds if keys <= (o.command_dests[c] | o.launch_dests | extra)]
    problems = []
    if not fits:
        for k in sorted(keys):
            if not any(k in o.command_dests[c] for c in cmds) and k not in o.launch_dests | extra:
                universe = set().union(*(o.command_dests[c] for c in cmds)) | o.launch_dests
                problems.append(
                    f"{where}: `{k}` is no TRL command/config/ModelConfig field nor accelerate "
                    "launch arg" + close_matches(k, universe)
                )
        if not problems:
            problems.append(
                f"{where}: no single TRL command accepts all of {sorted(keys)} "
                "(keys from different trainers are mixed)"
            )
    env = data.get("env")
    if env is not None:
        if not isinstance(env, dict):
            problems.append(f"{where}: `env` must be a mapping")
        else:
            for k in env:
                problems += ident.check_env(str(k), where)
    mik = data.get("model_init_kwargs")
    if isinstance(mik, dict):
        for k in mik:
            if k not in MODEL_INIT_KWARGS:
                problems.append(f"{where}: `model_init_kwargs.{k}` is not a known key")
    for k, v in data.items():
        if isinstance(v, str) and k in o.choices and v not in o.choices[k]:
            problems.append(f"{where}: `{k}: {v}` not in {sorted(o.choices[k])}")
    return problems


def is_accelerate_yaml(text: str) -> bool:
    return re.search(r"^\s*distributed_type\s*:", text, re.M) is not None


# --------------------------------------------------------------------------------------------
# Requirement specifiers and versions
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def trl_requirements() -> dict[str, list]:
    """Normalized package name → list of (SpecifierSet, extra-or-None) from TRL's metadata."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    out: dict[str, list] = {}
    for r in importlib.metadata.requires("trl") or []:
        req = Requirement(r)
        extra = None
        if req.marker is not None:
            m = re.search(r'extra == "([^"]+)"', str(req.marker))
            extra = m.group(1) if m else None
        out.setdefault(canonicalize_name(req.name), []).append((req.specifier, extra))
    return out


VLLM_WINDOW_RE = re.compile(
    r"\bvllm\b[^.\n`]{0,40}?\b(\d+\.\d+\.\d+)\s*(?:–|—|-|to|through|\.\.)\s*v?(\d+\.\d+\.\d+)\b",
    re.I,
)


def trl_vllm_window() -> tuple[str, str] | None:
    """(lowest, highest) vLLM release of TRL's `vllm` extra, e.g. ("0.22.0", "0.31.0")."""
    for spec, extra in trl_requirements().get("vllm", []):
        if extra != "vllm":
            continue
        lo = [s.version for s in spec if s.operator == ">="]
        hi = [s.version for s in spec if s.operator == "<="]
        if len(lo) == 1 and len(hi) == 1:
            return lo[0], hi[0]
    return None


def vllm_window_problems(text: str, path: str) -> list[str]:
    """Prose like `vLLM 0.22.0 to 0.31.0` or `vLLM versions from 0.22.0 to 0.31.0` must state
    the installed TRL's window; a range next to another TRL release (`(v1.0.0)`, `TRL 1.9.0`)
    is history and skipped."""
    window = trl_vllm_window()
    problems = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in VLLM_WINDOW_RE.finditer(line):
            near = line[max(0, m.start() - 60) : m.end() + 30]
            trl_tags = set(re.findall(r"\bTRL\s+v?(\d+\.\d+\.\d+)", near))
            if re.search(r"\bv\d+\.\d+\.\d+\b", near) or trl_tags - {installed_version("trl")}:
                continue
            if window is None or (m.group(1), m.group(2)) != window:
                problems.append(
                    f"{path}:{lineno}: `{m.group(0)}` states vLLM {m.group(1)}..{m.group(2)}; "
                    f"TRL {installed_version('trl')}'s `vllm` extra declares {window}"
                )
    return problems


def is_requirement_name(name: str) -> bool:
    from packaging.utils import canonicalize_name

    if "-" in name or canonicalize_name(name) in trl_requirements():
        return True
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def check_requirement_text(tok: str, where: str) -> list[str]:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    tok = tok.strip().strip("'\"")
    if not REQ_RE.match(tok):
        return []
    try:
        req = Requirement(tok)
    except InvalidRequirement:
        return []
    name = canonicalize_name(req.name)
    pins = trl_requirements().get(name)
    if not pins or not str(req.specifier):
        return []
    if any(req.specifier == spec for spec, _ in pins):
        return []
    stated = ", ".join(f"{name}{spec}" + (f" [{e}]" if e else "") for spec, e in pins if str(spec))
    return [f"{where}: `{tok}` does not match TRL's metadata ({stated or 'no specifier'})"]


def check_requirement_tokens(toks: list[str], where: str) -> list[str]:
    problems = []
    for t in toks:
        problems += check_requirement_text(t, where)
    return problems


VERSION_PKGS = {
    "TRL": "trl",
    "accelerate": "accelerate",
    "peft": "peft",
    "PEFT": "peft",
    "transformers": "transformers",
    "Transformers": "transformers",
    "torch": "torch",
    "PyTorch": "torch",
    "datasets": "datasets",
}
VERSION_RE = re.compile(r"\b(" + "|".join(VERSION_PKGS) + r")\s+v?(\d+\.\d+(?:\.\d+)?)\b")


def installed_version(dist: str) -> str:
    v = importlib.metadata.version(dist)
    return v.split("+")[0]


def scope_line(doc: Doc) -> tuple[int, str] | None:
    """The doc's scope statement: the paragraph holding the first `TRL x.y.z` (line, text)."""
    prose = dict(doc.prose)
    for lineno, line in doc.prose:
        if re.search(r"\bTRL\s+v?\d+\.\d+\.\d+\b", line):
            start = lineno
            while prose.get(start - 1, "").strip() and not prose[start - 1].startswith("#"):
                start -= 1
            end = lineno
            while prose.get(end + 1, "").strip() and not prose[end + 1].startswith("#"):
                end += 1
            return lineno, " ".join(prose[i].strip() for i in range(start, end + 1))
    return None


# --------------------------------------------------------------------------------------------
# Site-packages grep for allowlist entries
# --------------------------------------------------------------------------------------------


def grep_site_packages(names, roots=None) -> dict[str, str | None]:
    """For each name, the first installed source file containing it (None if none)."""
    pending = {n: n.encode() for n in names}
    found: dict[str, str | None] = dict.fromkeys(names)
    roots = roots or [SITE_PACKAGES / p for p in STACK_PACKAGES] + [SITE_PACKAGES]
    seen: set[Path] = set()
    for root in roots:
        for f in root.rglob("*.py"):
            if not pending:
                return found
            if f in seen:
                continue
            seen.add(f)
            try:
                data = f.read_bytes()
            except OSError:
                continue
            for n, b in list(pending.items()):
                if b in data:
                    found[n] = str(f.relative_to(SITE_PACKAGES))
                    del pending[n]
    return found


# --------------------------------------------------------------------------------------------
# Defaults stated in Markdown tables
# --------------------------------------------------------------------------------------------


@dataclass
class Table:
    path: str
    line: int  # 1-based line of the header row
    header: list[str]
    rows: list[tuple[int, list[str]]]
    intro: str  # prose between the previous heading and the table


def split_table_row(line: str) -> list[str]:
    """Cells of `| a | b |`; `|` inside code spans or escaped as `\\|` does not split."""
    s = line.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") and not s.endswith("\\|") else s
    cells, buf, tick = [], [], 0
    i = 0
    while i < len(s):
        c = s[i]
        if c == "`":
            j = i
            while j < len(s) and s[j] == "`":
                j += 1
            run = j - i
            tick = 0 if tick == run else (run if tick == 0 else tick)
            buf.append(s[i:j])
            i = j
            continue
        if c == "\\" and s[i + 1 : i + 2] == "|":
            buf.append("|")
            i += 2
            continue
        if c == "|" and not tick:
            cells.append("".join(buf).strip())
            buf = []
        else:
            buf.append(c)
        i += 1
    cells.append("".join(buf).strip())
    return cells


_TABLE_SEP_RE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")


def tables(doc: Doc) -> list[Table]:
    out = []
    prose = doc.prose
    intro: list[str] = []
    i = 0
    while i < len(prose):
        lineno, line = prose[i]
        if line.startswith("#"):
            intro = []
        nxt = prose[i + 1] if i + 1 < len(prose) else None
        if (
            line.lstrip().startswith("|")
            and nxt
            and nxt[0] == lineno + 1
            and _TABLE_SEP_RE.match(nxt[1])
        ):
            rows = []
            j = i + 2
            while j < len(prose) and prose[j][0] == prose[j - 1][0] + 1:
                if not prose[j][1].lstrip().startswith("|"):
                    break
                rows.append((prose[j][0], split_table_row(prose[j][1])))
                j += 1
            out.append(Table(doc.path, lineno, split_table_row(line), rows, " ".join(intro)))
            intro = []
            i = j
            continue
        if not line.startswith("#"):
            intro.append(line)
        i += 1
    return out


def _strip_notes(cell: str) -> str:
    """`True (since v0.23.0)` → `True`; `None (= `packing`)` → `None`."""
    prev = None
    while prev != cell:
        prev = cell
        cell = re.sub(r"\s*\([^()]*\)\s*$", "", cell).strip()
    return cell


def parse_table_literal(text: str):
    """(ok, value, bare): a Python literal (number, quoted string, True/False/None), optionally
    in backticks; `bare` is True for an unquoted word such as `auto` or `0.0.0.0`."""
    s = text.strip()
    if len(s) >= 2 and s[0] == "`" and s[-1] == "`" and s.count("`") == 2:
        s = s[1:-1].strip()
    if not s or "`" in s:
        return False, None, False
    try:
        v = ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        v = ast  # sentinel: not a literal
    if v is None or isinstance(v, (bool, int, float, str)):
        return True, v, False
    if re.fullmatch(r"[A-Za-z0-9_.:/-]+", s):
        return True, s, True
    return False, None, False


def _default_matches(value, default, bare: bool) -> bool | None:
    """True/False, or None when the comparison says nothing (bare word vs non-string)."""
    if isinstance(default, enum.Enum):
        default = default.value
    if bare:
        return default == value if isinstance(default, str) else None
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default) and value == default
    if value is None or default is None:
        return value is default
    if isinstance(value, (int, float)) and isinstance(default, (int, float)):
        return abs(value - default) <= 1e-12 * max(1.0, abs(default))
    return value == default


class TableDefaultChecker:
    """Rows `| `field` | <default> | ...` of tables with a Default column, against the config
    classes' real defaults. Scope, most specific first: trainers named in the row (`beta`
    (GRPO / RLOO), a Trainers column, a `GRPO | `beta=0.0`` row), `Class.field`, a class named
    in the header (`ModelConfig field`, `trl vllm-serve flag`) or in the text before the table
    (`Defaults are `GRPOConfig`'s`); otherwise any non-experimental class with the field."""

    ALL_WORDS = {"all", "every trl config", "all trl configs", "every config", "all configs"}
    ANY_WORDS = {"most", "any", "several"}

    def __init__(self, oracle: Oracle):
        self.o = oracle
        self.trainers: dict[str, str] = {}
        for name in sorted(oracle.defaults, key=lambda n: n not in oracle.main_classes):
            if name.endswith("Config") and not name.startswith("_"):
                self.trainers.setdefault(name[: -len("Config")].lower(), name)
        import trl

        self.trainer_configs = {
            c
            for c in self.trainers.values()
            if c in oracle.main_classes and hasattr(trl, c[: -len("Config")] + "Trainer")
        }

    # --- scope helpers
    def _classes_in(self, text: str) -> set[str]:
        found = {w for w in re.findall(r"[A-Za-z_]\w*", text) if w in self.o.defaults}
        if "vllm-serve" in text:
            found.add("VllmServeScriptArguments")
        return found

    def _trainer_list(self, text: str):
        """Class names for `SFT, DPO` / `GRPO / RLOO`; "ALL", "ANY", or None if not trainers."""
        words = [w.strip(" `") for w in re.split(r"[,/]|\band\b", text) if w.strip(" `")]
        if not words:
            return None
        low = [w.lower() for w in words]
        if all(w in self.ALL_WORDS for w in low):
            return "ALL"
        if all(w in self.ANY_WORDS for w in low):
            return "ANY"
        out = []
        for w in words:
            cls = w if w in self.o.defaults else self.trainers.get(w.lower())
            if cls is None:
                return None
            out.append(cls)
        return out

    def _field_cell(self, cell: str):
        """(fields, scope classes, trainers) of a first cell like `a` / `--a` (GRPO), or None."""
        m = re.fullmatch(r"((?:`[^`]+`\s*[/,]?\s*)+?)\s*(?:\(([^()]*)\))?", cell.strip())
        if not m:
            return None
        fields: list[str] = []
        scope: set[str] = set()
        for tok in re.findall(r"`([^`]+)`", m.group(1)):
            tok = tok.strip()
            a = ATTR_RE.match(tok)
            if tok.startswith("--") and FLAG_RE.fullmatch(tok):
                name = tok.lstrip("-").replace("-", "_")
            elif a and a.group("cls") in self.o.defaults:
                name = a.group("attr")
                scope.add(a.group("cls"))
            elif LOWER_NAME_RE.fullmatch(tok):
                name = tok
            else:
                return None
            if name not in fields:
                fields.append(name)
        trainers = None
        if m.group(2):
            parts = [p.strip() for p in re.split(r"[,/]|\band\b", m.group(2)) if p.strip()]
            named = []
            for p in parts:
                t = self._trainer_list(p)
                if t == "ALL":
                    trainers = "ALL"
                elif isinstance(t, list):
                    named += t
            if named and trainers is None:
                trainers = named
        return fields, scope, trainers

    # --- candidate classes for a (field, trainers, scope)
    def _targets(self, fld: str, trainers, scope: set[str]) -> tuple[list[str], str]:
        have = [c for c in self.o.defaults if fld in self.o.defaults[c]]
        if isinstance(trainers, list):
            return trainers, "each"
        if trainers == "ALL":
            return sorted(c for c in self.trainer_configs if c in have), "each"
        scoped = [c for c in scope if c in have]
        if scoped and trainers != "ANY":
            return scoped, "each"
        main = [c for c in have if c in self.o.main_classes]
        return main or have, "any"

    def _check_value(self, fld, text, trainers, scope, where) -> list[str]:
        ok, value, bare = parse_table_literal(text)
        if not ok:
            return []
        classes, mode = self._targets(fld, trainers, scope)
        if not classes:
            return []
        verdicts = {}
        for c in classes:
            if fld not in self.o.defaults.get(c, {}):
                verdicts[c] = False
                continue
            vs = [_default_matches(value, d, bare) for d in self.o.defaults[c][fld]]
            verdicts[c] = None if all(v is None for v in vs) else any(vs)
        decided = {c: v for c, v in verdicts.items() if v is not None}
        if not decided:
            return []
        good = all(decided.values()) if mode == "each" else any(decided.values())
        if good:
            return []
        actual = ", ".join(f"{c}: {self._shown(c, fld)}" for c in sorted(decided) if not decided[c])
        return [f"{where}: table states `{fld}` defaults to {text.strip()}, installed: {actual}"]

    def _shown(self, cls: str, fld: str) -> str:
        if fld not in self.o.defaults.get(cls, {}):
            return "no such field"
        seen = []
        for d in self.o.defaults[cls][fld]:
            r = repr(d.value if isinstance(d, enum.Enum) else d)
            if r not in seen and not r.startswith("<"):
                seen.append(r)
        return " / ".join(seen) or "?"

    @staticmethod
    def _split_values(cell: str, n: int) -> list[str] | None:
        for sep in (r"\s*/\s*", r"\s*,\s*"):
            parts = [p for p in re.split(sep, cell) if p != ""]
            if len(parts) == n:
                return parts
        return None

    def check(self, doc: Doc) -> list[str]:
        problems = []
        for table in tables(doc):
            hdr = [h.lower() for h in table.header]
            dcol = next((i for i, h in enumerate(hdr) if h.startswith("default")), None)
            if not dcol:
                continue
            tcol = next((i for i, h in enumerate(hdr) if h.startswith("trainer") and i), None)
            scope = self._classes_in(" ".join(table.header))
            m = re.search(r"\bDefaults? (?:are|is|of|from|in)\s+`?([A-Z]\w+)`?", table.intro)
            if m and m.group(1) in self.o.defaults:
                scope.add(m.group(1))
            for lineno, cells in table.rows:
                if len(cells) <= dcol:
                    continue
                where = f"{doc.path}:{lineno}"
                problems += self._check_row(cells, dcol, tcol, scope, where)
        return problems

    def _check_row(self, cells, dcol, tcol, scope, where) -> list[str]:
        value_cell = _strip_notes(cells[dcol])
        parsed = self._field_cell(cells[0])
        if parsed is None:
            # `| GRPO / RLOO | `beta=0.0` |`: trainers in the first cell, `field=value` default.
            trainers = self._trainer_list(cells[0]) if "`" not in cells[0] else None
            m = re.fullmatch(r"`([a-z][a-z0-9_]*)\s*=\s*([^`]+)`", value_cell)
            if isinstance(trainers, list) and m:
                return self._check_value(m.group(1), m.group(2), trainers, set(), where)
            return []
        fields, row_scope, trainers = parsed
        if trainers is None and tcol is not None and len(cells) > tcol:
            trainers = self._trainer_list(cells[tcol])
            if trainers is None:
                return []  # a Trainers cell this checker cannot read: no verdict
        scope = scope | row_scope
        if not fields:
            return []
        if len(fields) > 1:
            vals = self._split_values(value_cell, len(fields))
            if vals is None:
                if re.search(r"[/,]", value_cell):
                    return []
                vals = [value_cell] * len(fields)
            out = []
            for f, v in zip(fields, vals):
                out += self._check_value(f, v, trainers, scope, where)
            return out
        if isinstance(trainers, list) and len(trainers) > 1:
            vals = self._split_values(value_cell, len(trainers))
            if vals is not None:
                out = []
                for t, v in zip(trainers, vals):
                    out += self._check_value(fields[0], v, [t], scope, where)
                return out
        return self._check_value(fields[0], value_cell, trainers, scope, where)
