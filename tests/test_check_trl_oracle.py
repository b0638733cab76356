"""The vLLM window verdict agrees with the installed TRL's own check (the oracle):
trl.import_utils.is_vllm_available warns exactly when our judge says 'outside the window'."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from unittest import mock

import pytest
from _scaling import backend_rules, verdicts
from test_check_judge import facts

trl_import_utils = pytest.importorskip("trl.import_utils")

SWEEP = [
    "0.10.2", "0.17.1", "0.21.0", "0.21.9", "0.22.0.dev0", "0.22.0rc1", "0.22.0", "0.22.0+cu129",
    "0.22.1", "0.25.1+cu129", "0.28.0.post1", "0.30.0", "0.31.0", "0.31.0+cu130", "0.31.0.post1",
    "0.31.1rc0", "0.31.1", "0.32.0", "0.33.0", "1.0.0",
]  # fmt: skip


def trl_warns(version: str) -> bool:
    """Ask the installed TRL: does is_vllm_available() warn for this vLLM version?"""
    with (
        mock.patch.object(trl_import_utils, "_is_package_available", return_value=(True, version)),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        assert trl_import_utils.is_vllm_available() is True
    return any("supports vLLM versions" in str(w.message) for w in caught)


def judge_outside(version: str) -> bool:
    data = facts("h100_8x_nvlink")
    data["packages"]["vllm"]["version"] = version
    data["packages"]["trl"]["version"] = trl_import_utils_version()
    verdict = verdicts.judge(data)["backends"]["vllm"]
    assert verdict["status"] in ("ready", "degraded"), verdict
    return verdict["status"] == "degraded"


def trl_import_utils_version() -> str:
    import trl

    return trl.__version__


@pytest.mark.parametrize("version", SWEEP)
def test_vllm_window_matches_trl(version):
    assert judge_outside(version) == trl_warns(version), version


def test_window_matches_trl_metadata_pin():
    import importlib.metadata

    requires = importlib.metadata.requires("trl") or []
    pin = next(r for r in requires if r.startswith("vllm") and 'extra == "vllm"' in r)
    spec = pin.split(";")[0].strip()[len("vllm") :]
    line = ".".join(trl_import_utils_version().split(".")[:2])
    rules = [r for r in backend_rules.RULES if r.backend == "vllm" and r.when == ("trl", line)]
    assert [sorted(r.spec.split(",")) for r in rules] == [sorted(spec.split(","))]


def test_fixture_trl_version_is_the_installed_one():
    recorded = json.loads(
        (Path(__file__).parent / "fixtures" / "check_facts" / "h100_8x_nvlink.json").read_text()
    )
    assert recorded["packages"]["trl"]["version"] == trl_import_utils_version()
