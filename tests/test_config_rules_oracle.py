"""The FSDP and DeepSpeed config rules of _scaling/config_rules.py against accelerate itself: the
plan the preflight judges and the same YAML run through accelerate's launcher, its environment
and the plugin it builds (CPU, nothing started). Where the failure needs GPUs and a model load
(fsdp-model-id-dispatched), the cited source line is re-read instead."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest
import tiny_stack as ts
from preflight_support import PLANS, finding, judge, problems
from test_preflight_plans import PLANS_SUITE

SUITE = {c[0]: c[1:] for c in PLANS_SUITE}
SITE = Path(importlib.util.find_spec("accelerate").origin).parents[1]
# FSDP1 plugins ask for an accelerator to sync module states; these keep them buildable on CPU
# without touching the keys under test.
CPU_BUILDABLE = "  fsdp_cpu_ram_efficient_loading: false\n  fsdp_sync_module_states: false\n"


def plugin_from(yaml_text: str, tmp_path: Path):
    from accelerate.utils import FullyShardedDataParallelPlugin

    records: list = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("accelerate")
    logger.addHandler(handler)
    try:
        with ts.environment(ts.launch_env(yaml_text, tmp_path)):
            return FullyShardedDataParallelPlugin(), records
    finally:
        logger.removeHandler(handler)


def planned(name: str) -> dict:
    machines, command, expected = SUITE[name]
    report = judge(command, machines)
    assert problems(report) == expected
    return report


def test_sync_module_states_off_is_refused_as_the_launcher_refuses_it(tmp_path):
    report = planned("fsdp-sync-off")
    with pytest.raises(ValueError) as raised:
        ts.launch_env((PLANS / "fsdp_sync_off.yaml").read_text(), tmp_path)
    assert str(raised.value) in finding(report, "fsdp-sync-off-with-efficient-loading")["message"]


def test_fsdp1_reshard_key_is_ignored_as_the_plugin_ignores_it(tmp_path):
    from torch.distributed.fsdp import ShardingStrategy

    report = planned("fsdp1-reshard-from-yaml")
    assert finding(report, "fsdp1-reshard-ignored")["severity"] == "warning"
    text = (PLANS / "fsdp1_reshard.yaml").read_text()
    text = text.replace("  fsdp_use_orig_params: true\n", CPU_BUILDABLE)
    plugin, _ = plugin_from(text, tmp_path)
    assert plugin.sharding_strategy == ShardingStrategy.FULL_SHARD  # not SHARD_GRAD_OP
    aligned = text.replace(
        "fsdp_reshard_after_forward: SHARD_GRAD_OP", "fsdp_sharding_strategy: SHARD_GRAD_OP"
    )
    plugin, _ = plugin_from(aligned, tmp_path)
    assert plugin.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP  # what the fix says


def test_fsdp2_v1_keys_are_ignored_silently_as_the_plugin_does(tmp_path):
    report = planned("fsdp1-values-on-fsdp2")
    assert "silently ignored" in finding(report, "fsdp2-v1-keys-ignored")["message"]
    text = (
        "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\n"
        "fsdp_config:\n  fsdp_version: 2\n  fsdp_cpu_ram_efficient_loading: false\n"
        "  fsdp_use_orig_params: true\n  fsdp_sync_module_states: true\n"
    )
    plugin, logged = plugin_from(text, tmp_path)
    assert plugin.use_orig_params is None and plugin.sync_module_states is None
    assert not logged, logged


@pytest.mark.parametrize("top", ["mixed_precision: 'no'\n", "mixed_precision: bf16\n"])
def test_deepspeed_file_with_any_mixed_precision_key_is_refused(tmp_path, top):
    """accelerate counts a mixed_precision key in the file, 'no' included; the rule must too."""
    from _scaling.config_rules import Launch, config_findings

    values = {
        "distributed_type": "DEEPSPEED",
        "mixed_precision": top.split(": ")[1].strip().strip("'"),
        "deepspeed_config": {"deepspeed_config_file": "ds.json"},
    }
    ids = {f["id"] for f in config_findings(Launch(values, {}, 4, (8, 0)))}
    assert "deepspeed-file-and-keys" in ids


def test_model_id_dispatch_rests_on_lines_that_still_say_so():
    planned("fsdp-model-id-dispatched")
    cited = {
        "accelerate/accelerator.py": (1479, "loaded with `device_map='auto'` in any distributed"),
        "accelerate/utils/launch.py": (
            306,
            "fsdp_cpu_ram_efficient_loading and not args.fsdp_sync",
        ),
    }
    for path, (line, text) in cited.items():
        lines = (SITE / path).read_text(encoding="utf-8").splitlines()
        assert text in "\n".join(lines[line - 3 : line + 2]), (path, line)


def test_a_sound_fsdp1_config_is_not_flagged():
    from _scaling.config_rules import Launch, config_findings

    values = {
        "distributed_type": "FSDP",
        "num_processes": 4,
        "fsdp_config": {"fsdp_version": 1, "fsdp_reshard_after_forward": "FULL_SHARD"},
    }
    assert config_findings(Launch(values, {}, 4, (8, 0))) == []
