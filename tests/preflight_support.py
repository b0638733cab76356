"""What the preflight tests share: recorded machines, plan fixtures, a fake Hugging Face cache,
and the preflight judged in-process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import script_modules  # noqa: F401  (puts scripts/ on sys.path)
from _scaling import facts, launch_tables, plan

HERE = Path(__file__).resolve().parent
MACHINES = HERE / "fixtures" / "check_facts"
PLANS = HERE / "fixtures" / "plans"
MODELS = HERE / "fixtures" / "model_configs"
PREFLIGHT = script_modules.SCRIPTS / "preflight.py"
# Where TRL's own scripts live on a target (any path ending in trl/scripts/<cmd>.py).
TRL_SCRIPTS = "/opt/venv/lib/python3.12/site-packages/trl/scripts"


def machine(name: str) -> tuple:
    path = MACHINES / f"{name}.json"
    return (path.name, facts.load_facts(str(path)))


def machine_with(name: str, label: str, **changes) -> tuple:
    """A recorded machine with some package versions or facts changed (a second node)."""
    data = json.loads((MACHINES / f"{name}.json").read_text())
    for dist, version in changes.pop("packages", {}).items():
        data["packages"][dist]["version"] = version
    for key, value in changes.items():
        data[key] = dict(data.get(key) or {}, **value)
    return (label, facts.normalize_facts(data, label))


def judge(
    command: list,
    machines: tuple = ("l4",),
    trainer: str | None = None,
    model_config: str | None = None,
    use_trl: str = "no",
    environ: dict | None = None,
) -> dict:
    nodes = [m if isinstance(m, tuple) else machine(m) for m in machines]
    collected = plan.collect_plan(
        command, nodes, trainer, model_config, use_trl, environ=environ or {"HOME": "/nonexistent"}
    )
    return plan.judge_plan(collected)


def problems(report: dict) -> set:
    """The ids of error and warning findings (info is advice, not a problem)."""
    return {f["id"] for f in report["findings"] if f["severity"] in ("error", "warning")}


def finding(report: dict, rule_id: str) -> dict:
    found = [f for f in report["findings"] if f["id"] == rule_id]
    assert found, (rule_id, [f["id"] for f in report["findings"]])
    return found[0]


def fake_hub_cache(root: Path, model: str, config: str) -> Path:
    """huggingface_hub's cache layout with one model whose config.json is a fixture."""
    folder = root / ("models--" + model.replace("/", "--"))
    snapshot = folder / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    shutil.copy(MODELS / config, snapshot / "config.json")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123abcd")
    return root


assert launch_tables.TRL_RELEASE == "1.16.0"
