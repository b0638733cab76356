"""The suite of planned launches over the recorded machines: every rule has a plan that breaks it
and a sound plan next to it, and a sound plan must come out without an error or a warning (a
false alarm is a defect too). Judged with the embedded TRL 1.16.0 table (no TRL import); the
oracle tests run the real libraries on the same plans."""

from __future__ import annotations

import pytest
from preflight_support import (
    MODELS,
    PLANS,
    TRL_SCRIPTS,
    fake_hub_cache,
    finding,
    judge,
    machine,
    machine_with,
    problems,
)

M = ["--model_name_or_path", "Qwen/Qwen3-0.6B"]
D = ["--dataset_name", "trl-lib/Capybara"]
SFT = ["trl", "sft", *M, *D]
GRPO = ["trl", "grpo", *M, *D]
RLOO = ["trl", "rloo", *M, *D]
SERVER_6_7 = (
    "CUDA_VISIBLE_DEVICES=6,7 trl vllm-serve --model Qwen/Qwen3-0.6B --tensor_parallel_size 2"
)
TRAINER_0_5 = (
    "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 trl grpo --model_name_or_path Qwen/Qwen3-0.6B "
    "--dataset_name d --use_vllm --vllm_mode server --accelerate_config zero3 --num_processes 6"
)


def p(name: str) -> str:
    return str(PLANS / name)


# (id, machines, command, the error and warning findings expected; set() is a sound plan)
PLANS_SUITE = [
    # ---- sound plans of every kind -------------------------------------------------------
    ("single-gpu-sft", ("l4",), SFT, set()),
    ("single-gpu-t4-fp16", ("t4",), [*SFT, "--bf16", "false", "--fp16", "true"], set()),
    ("2x24gb-ddp", ("rtx4090_2x",), [*SFT, "--accelerate_config", "multi_gpu",
                                     "--num_processes", "2"], set()),
    ("2x24gb-default-launch-lora", ("rtx4090_2x",),
     ["trl", "dpo", *M, *D, "--use_peft", "--lora_target_modules", "q_proj", "v_proj"], set()),
    ("4xa100-zero3", ("a100_80gb_4x",), [*SFT, "--accelerate_config", "zero3",
                                         "--num_processes", "4"], set()),
    ("4xa100-fsdp2", ("a100_80gb_4x",), [*SFT, "--accelerate_config", "fsdp2",
                                         "--num_processes", "4"], set()),
    ("4xa100-fsdp2-own-checkpointing", ("a100_80gb_4x",),
     [*SFT, "--accelerate_config", "fsdp2", "--num_processes", "4",
      "--fsdp_activation_checkpointing", "true", "--gradient_checkpointing", "false"], set()),
    ("4xa100-fsdp2-activation-checkpointing-off", ("a100_80gb_4x",),
     [*SFT, "--accelerate_config", "fsdp2", "--num_processes", "4",
      "--fsdp_activation_checkpointing", "true", "--activation_checkpointing", "false"], set()),
    ("4xa100-zero1-no-accumulation", ("a100_80gb_4x",),
     [*SFT, "--accelerate_config", "zero1", "--num_processes", "4"], set()),
    ("4xa100-recipe-num-processes", ("a100_80gb_4x",),
     ["trl", "sft", "--config", p("recipe_num_processes.yaml")], set()),
    ("4xa100-accelerate-trl-script", ("a100_80gb_4x",),
     ["accelerate", "launch", "--num_processes", "4", "--multi_gpu", f"{TRL_SCRIPTS}/sft.py",
      *M, *D], set()),
    ("4xa100-accelerate-grpo-world-4", ("a100_80gb_4x",),
     ["accelerate", "launch", "--num_processes", "4", "--multi_gpu", f"{TRL_SCRIPTS}/grpo.py",
      *M, *D, "--per_device_train_batch_size", "2", "--num_generations", "8"], set()),
    ("4xa100-torchrun", ("a100_80gb_4x",),
     ["torchrun", "--nproc-per-node", "4", f"{TRL_SCRIPTS}/sft.py", *M, *D], set()),
    ("4xa100-deepspeed-json", ("a100_80gb_4x",),
     ["accelerate", "launch", "--config_file", p("ds_file_only.yaml"), f"{TRL_SCRIPTS}/sft.py",
      *M, *D], set()),
    ("8xh100-grpo-colocate", ("h100_8x_nvlink",),
     ["trl", "grpo", "--config", p("grpo_recipe.yaml"), "--accelerate_config", "zero3"], set()),
    ("8xh100-grpo-colocate-tp2", ("h100_8x_nvlink",),
     ["trl", "grpo", "--config", p("grpo_recipe.yaml"), "--accelerate_config", "zero3",
      "--vllm_tensor_parallel_size", "2"], set()),
    ("8xh100-grpo-server", ("h100_8x_nvlink",), [f"{SERVER_6_7} & {TRAINER_0_5}"], set()),
    ("8xv100-fp16", ("v100_8x",), [*SFT, "--accelerate_config", "multi_gpu", "--bf16", "false",
                                   "--fp16", "true"], set()),
    ("two-nodes", ("a100_80gb_4x", "a100_80gb_4x"),
     [*SFT, "--accelerate_config", "multi_gpu", "--num_machines", "2", "--num_processes", "8",
      "--machine_rank", "0", "--main_process_ip", "10.0.0.1"], set()),
    ("2x24gb-sft-context-parallel", ("rtx4090_2x",),
     ["accelerate", "launch", "--config_file", p("cp2_fsdp2.yaml"), f"{TRL_SCRIPTS}/sft.py", *M,
      *D], set()),
    ("user-script-grpo", ("l4",), ["python", p("my_grpo.py"), *M], set()),
    ("cpu-with-use-cpu", ("cpu_only",), [*SFT, "--use_cpu", "true"], set()),
    ("mi300x-zero3", ("mi300x_8x",), [*SFT, "--accelerate_config", "zero3"], set()),
    ("mps-sft", ("apple_m3_mps",), SFT, set()),
    # ---- launch ---------------------------------------------------------------------------
    ("shipped-8-on-2", ("rtx4090_2x",), [*SFT, "--accelerate_config", "multi_gpu"],
     {"processes-exceed-gpus"}),
    ("deepspeed-missing", ("rtx4090_2x",), [*SFT, "--accelerate_config", "zero2",
                                            "--num_processes", "2"], {"backend-deepspeed"}),
    ("visible-devices-hide-gpus", ("a100_80gb_4x",),
     ["CUDA_VISIBLE_DEVICES=0,1", *SFT, "--accelerate_config", "fsdp2", "--num_processes", "4"],
     {"processes-exceed-gpus"}),
    ("single-gpu-config-on-4", ("a100_80gb_4x",), [*SFT, "--accelerate_config", "single_gpu"],
     {"one-process-many-gpus"}),
    ("python-on-8", ("h100_8x_nvlink",), ["python", p("my_grpo.py"), *M],
     {"one-process-many-gpus"}),
    ("typo-to-accelerate", ("l4",), [*SFT, "--learnig_rate", "1e-5"],
     {"accelerate-rejects-argument"}),
    ("recipe-typo-to-accelerate", ("l4",), ["trl", "sft", "--config",
                                            p("recipe_unknown_key.yaml")],
     {"accelerate-rejects-argument"}),
    ("bad-int", ("l4",), [*SFT, "--per_device_train_batch_size", "two"],
     {"trl-rejects-argument"}),
    ("bool-none-needs-value", ("l4",), [*SFT, "--bf16"], {"trl-rejects-argument"}),
    ("trl-script-bad-int", ("a100_80gb_4x",),
     ["accelerate", "launch", "--num_processes", "4", "--multi_gpu", f"{TRL_SCRIPTS}/sft.py",
      *M, *D, "--per_device_train_batch_size", "two"], {"script-rejects-argument"}),
    ("config-name", ("l4",), [*SFT, "--accelerate_config", "zero4"], {"accelerate-config-name"}),
    ("trl-script-typo", ("a100_80gb_4x",),
     ["accelerate", "launch", "--num_processes", "4", "--multi_gpu", f"{TRL_SCRIPTS}/sft.py",
      *M, *D, "--learnig_rate", "1e-5"], {"script-unknown-arguments"}),
    ("no-dataset", ("l4",), ["trl", "sft", *M], {"dataset-missing"}),
    ("json-argument", ("l4",), [*SFT, "--model_init_kwargs", "{dtype: bfloat16}"],
     {"json-argument-invalid"}),
    ("json-argument-sound", ("l4",), [*SFT, "--model_init_kwargs", '{"dtype": "bfloat16"}'],
     set()),
    ("config-unknown-key", ("a100_80gb_4x",),
     ["accelerate", "launch", "--config_file", p("unknown_key.yaml"), f"{TRL_SCRIPTS}/sft.py",
      *M, *D], {"config-unknown-keys"}),
    ("flags-conflict", ("a100_80gb_4x",),
     ["accelerate", "launch", "--multi_gpu", "--use_deepspeed", "--num_processes", "4",
      f"{TRL_SCRIPTS}/sft.py", *M, *D], {"launch-flags-conflict"}),
    ("multi-gpu-one-process", ("a100_80gb_4x",),
     ["accelerate", "launch", "--multi_gpu", "--num_processes", "1", f"{TRL_SCRIPTS}/sft.py", *M,
      *D], {"multi-gpu-one-process"}),
    ("parallelism-flag", ("a100_80gb_4x",),
     ["accelerate", "launch", "--use_parallelism_config", "--num_processes", "4",
      f"{TRL_SCRIPTS}/sft.py", *M, *D], {"parallelism-flag-needs-fsdp2"}),
    ("num-processes-unset", ("a100_80gb_4x",),
     ["accelerate", "launch", "--config_file", p("no_num_processes.yaml"),
      f"{TRL_SCRIPTS}/sft.py", *M, *D], {"num-processes-unset"}),
    ("one-gpu-id", ("a100_80gb_4x",),
     ["accelerate", "launch", "--config_file", p("one_gpu_id.yaml"), f"{TRL_SCRIPTS}/sft.py",
      *M, *D], {"gpu-ids-too-few", "processes-exceed-gpus"}),
    ("fp8-on-ampere", ("a100_80gb_4x",), [*SFT, "--num_processes", "4", "--mixed_precision",
                                          "fp8"], {"fp8-needs-ada"}),
    # ---- FSDP / DeepSpeed -----------------------------------------------------------------
    ("fsdp-checkpointing-twice", ("a100_80gb_4x",),
     [*SFT, "--accelerate_config", "fsdp2", "--num_processes", "4",
      "--fsdp_activation_checkpointing", "true"], {"fsdp-checkpointing-twice"}),
    ("fsdp1-values-on-fsdp2", ("a100_80gb_4x",),
     [*SFT, "--accelerate_config", "fsdp1", "--num_processes", "4", "--fsdp_version", "2"],
     {"fsdp2-reshard-not-bool", "fsdp2-forward-prefetch", "fsdp2-v1-keys-ignored"}),
    ("fsdp-sync-off", ("a100_80gb_4x",),
     ["accelerate", "launch", "--config_file", p("fsdp_sync_off.yaml"),
      f"{TRL_SCRIPTS}/sft.py", *M, *D], {"fsdp-sync-off-with-efficient-loading",
                                         "fsdp2-v1-keys-ignored"}),
    ("fsdp1-reshard-from-yaml", ("a100_80gb_4x",),
     ["accelerate", "launch", "--config_file", p("fsdp1_reshard.yaml"),
      f"{TRL_SCRIPTS}/sft.py", *M, *D], {"fsdp1-reshard-ignored"}),
    ("fsdp-model-id-dispatched", ("a100_80gb_4x",),
     [*SFT, "--accelerate_config", "fsdp2", "--num_processes", "4",
      "--fsdp_cpu_ram_efficient_loading", "false"], {"fsdp-model-id-dispatched"}),
    ("deepspeed-json-and-keys", ("a100_80gb_4x",),
     ["accelerate", "launch", "--config_file", p("ds_file_and_keys.yaml"),
      f"{TRL_SCRIPTS}/sft.py", *M, *D], {"deepspeed-file-and-keys"}),
    ("zero1-accumulation", ("a100_80gb_4x",),
     [*SFT, "--accelerate_config", "zero1", "--num_processes", "4",
      "--gradient_accumulation_steps", "4"], {"deepspeed-accumulation-pinned"}),
    # ---- GRPO / RLOO generation batch --------------------------------------------------------
    ("grpo-groups-in-trl-process", ("a100_80gb_4x",),
     [*GRPO, "--num_processes", "4", "--per_device_train_batch_size", "2", "--num_generations",
      "8"], {"generation-batch-groups"}),
    ("grpo-groups-at-world-4", ("a100_80gb_4x",),
     ["accelerate", "launch", "--num_processes", "4", "--multi_gpu", f"{TRL_SCRIPTS}/grpo.py",
      *M, *D, "--per_device_train_batch_size", "3", "--num_generations", "8"],
     {"generation-batch-groups"}),
    ("grpo-global-batch", ("l4",), [*GRPO, "--generation_batch_size", "16",
                                    "--per_device_train_batch_size", "3"],
     {"generation-batch-global"}),
    ("grpo-both-set", ("l4",), [*GRPO, "--generation_batch_size", "16",
                                "--steps_per_generation", "2"], {"generation-batch-both-set"}),
    ("grpo-eval-groups", ("l4",), [*GRPO, "--eval_strategy", "steps",
                                   "--per_device_eval_batch_size", "3"],
     {"eval-batch-generations"}),
    ("rloo-one-generation", ("l4",), [*RLOO, "--num_generations", "1"],
     {"num-generations-minimum"}),
    ("grpo-auto-batch", ("l4",), [*GRPO, "--auto_find_batch_size"],
     {"auto-find-batch-size-online"}),
    # ---- sequence parallelism ----------------------------------------------------------------
    ("grpo-context-parallel", ("rtx4090_2x",),
     ["accelerate", "launch", "--config_file", p("cp2_fsdp2.yaml"), f"{TRL_SCRIPTS}/grpo.py",
      *M, *D], {"online-sequence-parallel"}),
    ("grpo-recipe-parallelism", ("l4",), ["trl", "grpo", "--config",
                                          p("recipe_parallelism.yaml")],
     {"recipe-parallelism-config"}),
    ("sft-packing-context-parallel", ("rtx4090_2x",),
     ["accelerate", "launch", "--config_file", p("cp2_fsdp2.yaml"), f"{TRL_SCRIPTS}/sft.py", *M,
      *D, "--packing"], {"packing-with-context-parallel"}),
    ("parallelism-keys-unprefixed", ("rtx4090_2x",),
     ["accelerate", "launch", "--config_file", p("cp_wrong_keys.yaml"), f"{TRL_SCRIPTS}/sft.py",
      *M, *D], {"parallelism-key-ignored"}),
    ("parallelism-size-mismatch", ("h100_8x_nvlink",),
     ["accelerate", "launch", "--config_file", p("cp8_mismatch.yaml"), f"{TRL_SCRIPTS}/sft.py",
      *M, *D], {"parallelism-size-mismatch"}),
    # ---- vLLM ----------------------------------------------------------------------------------
    ("colocate-tp-3-of-8", ("h100_8x_nvlink",),
     ["trl", "grpo", "--config", p("grpo_recipe.yaml"), "--accelerate_config", "zero3",
      "--vllm_tensor_parallel_size", "3"], {"vllm-tp-divides-world"}),
    ("colocate-tp-0", ("h100_8x_nvlink",),
     ["trl", "grpo", "--config", p("grpo_recipe.yaml"), "--accelerate_config", "zero3",
      "--vllm_tensor_parallel_size", "0"], {"vllm-tp-divides-world"}),
    ("vllm-mode-typo", ("h100_8x_nvlink",),
     ["trl", "grpo", "--config", p("grpo_recipe.yaml"), "--accelerate_config", "zero3",
      "--vllm_mode", "colocated"], {"vllm-mode-invalid"}),
    ("colocate-8bit", ("h100_8x_nvlink",),
     ["trl", "grpo", "--config", p("grpo_recipe.yaml"), "--accelerate_config", "zero3",
      "--use_peft", "--load_in_8bit"], {"vllm-colocate-8bit"}),
    ("server-shares-gpus", ("h100_8x_nvlink",),
     ["CUDA_VISIBLE_DEVICES=0,1 trl vllm-serve --model Qwen/Qwen3-0.6B --tensor_parallel_size 2 "
      "& trl grpo --model_name_or_path Qwen/Qwen3-0.6B --dataset_name d --use_vllm "
      "--vllm_mode server --accelerate_config zero3"], {"vllm-server-gpu-overlap"}),
    ("server-other-port", ("h100_8x_nvlink",),
     [f"{SERVER_6_7} --port 8001 & {TRAINER_0_5}"], {"vllm-server-unreachable"}),
    ("server-too-few-gpus", ("h100_8x_nvlink",),
     ["CUDA_VISIBLE_DEVICES=7 trl vllm-serve --model Qwen/Qwen3-0.6B --tensor_parallel_size 2 "
      "& CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 trl grpo --model_name_or_path m --dataset_name d "
      "--use_vllm --vllm_mode server --accelerate_config zero3 --num_processes 6"],
     {"vllm-server-too-few-gpus"}),
    ("server-not-started", ("h100_8x_nvlink",),
     [*GRPO, "--use_vllm", "--vllm_mode", "server", "--accelerate_config", "zero3"],
     {"vllm-server-missing"}),
    ("group-port-is-main-port", ("h100_8x_nvlink",),
     [f"{SERVER_6_7} & {TRAINER_0_5} --vllm_group_port 29500"], {"vllm-group-port-clash"}),
    ("server-timeout-over-ddp", ("h100_8x_nvlink",),
     [f"{SERVER_6_7} & {TRAINER_0_5} --vllm_server_timeout 3600"],
     {"vllm-server-timeout-over-ddp"}),
    ("vllm-without-gpu", ("apple_m3_mps",), [*GRPO, "--use_vllm"], {"backend-vllm"}),
    # ---- PEFT, Liger, precision --------------------------------------------------------------
    ("lora-on-lm-head", ("l4",), [*SFT, "--use_peft", "--lora_target_modules", "q_proj",
                                  "lm_head"], {"lora-on-lm-head"}),
    ("lora-without-lm-head", ("l4",), [*SFT, "--use_peft", "--lora_target_modules", "q_proj",
                                       "v_proj"], set()),
    ("4bit-and-8bit", ("l4",), [*SFT, "--use_peft", "--load_in_4bit", "--load_in_8bit"],
     {"quantization-4bit-and-8bit"}),
    ("qlora-on-mps", ("apple_m3_mps",), [*SFT, "--use_peft", "--load_in_4bit"],
     {"backend-qlora"}),
    ("liger", ("l4",), [*SFT, "--use_liger_kernel"], {"liger-deprecated"}),
    ("liger-fused-ce", ("l4",), ["trl", "sft", "--config", p("recipe_liger_flce.yaml")],
     {"liger-deprecated", "liger-fused-cross-entropy"}),
    ("bf16-on-cpu", ("cpu_only",), SFT, {"bf16-without-bf16-device"}),
    ("fp16-and-bf16", ("l4",), [*SFT, "--fp16", "true", "--bf16", "true"], {"fp16-and-bf16"}),
    ("tf32-on-volta", ("v100_8x",), [*SFT, "--accelerate_config", "multi_gpu", "--bf16", "false",
                                     "--fp16", "true", "--tf32", "true"], {"tf32-needs-ampere"}),
    ("tf32-on-ampere", ("a100_40gb",), [*SFT, "--tf32", "true"], set()),
    ("bf16-on-volta", ("v100_8x",), [*SFT, "--accelerate_config", "multi_gpu"], {"backend-bf16"}),
    ("flash-attention-on-turing", ("t4",), [*SFT, "--bf16", "false", "--fp16", "true",
                                            "--attn_implementation", "flash_attention_2"],
     {"backend-flash_attn"}),
    # ---- several nodes ---------------------------------------------------------------------------
    ("two-nodes-different-gpus", ("a100_80gb_4x", "h100_8x_nvlink"),
     [*SFT, "--accelerate_config", "multi_gpu", "--num_machines", "2", "--num_processes", "8",
      "--machine_rank", "0", "--main_process_ip", "10.0.0.1"], {"node-gpu-mismatch"}),
]  # fmt: skip


@pytest.mark.parametrize(
    "machines, command, expected", [c[1:] for c in PLANS_SUITE], ids=[c[0] for c in PLANS_SUITE]
)
def test_plan(machines, command, expected):
    report = judge(command, machines)
    assert problems(report) == expected, [
        (f["id"], f["message"]) for f in report["findings"] if f["severity"] != "info"
    ]


def test_every_rule_has_a_failing_plan():
    from _scaling.config_rules import CONFIG_RULES
    from _scaling.plan_rules import PLAN_RULES

    covered = set().union(*(c[3] for c in PLANS_SUITE)) | COVERED_ELSEWHERE
    rules = {r.id for r in CONFIG_RULES + PLAN_RULES}
    assert rules - covered == set()


# Rules whose failing plans are tests of their own below (info findings, probe-only, or facts
# built in the test), or that a config file alone cannot reach from a command line.
COVERED_ELSEWHERE = {
    "user-script-unknown-arguments", "trainer-unknown", "gpus-idle", "memory-exceeds-gpu",
    "memory-tight", "memory-unknown", "node-version-skew", "node-count", "trl-release-differs",
    "config-shape", "unknown-distributed-type", "vllm-server-settings-ignored",
    "vllm-group-port-remote", "recipe-value-type",
}  # fmt: skip


def test_recipe_values_of_the_wrong_type(tmp_path):
    recipe = tmp_path / "weird.yaml"
    recipe.write_text(
        "model_name_or_path: m\ndataset_name: d\nper_device_train_batch_size: [1, 2]\n"
        "num_generations: {a: 1}\ngradient_accumulation_steps: true\nuse_vllm: yes\n"
        "vllm_tensor_parallel_size: 2.5\nlearning_rate: 1e-5\n"
    )
    report = judge(["trl", "grpo", "--config", str(recipe)], ("h100_8x_nvlink",))
    assert problems(report) == {"recipe-value-type"}
    message = finding(report, "recipe-value-type")["message"]
    for key in ("per_device_train_batch_size", "num_generations", "gradient_accumulation_steps",
                "vllm_tensor_parallel_size"):  # fmt: skip
        assert key in message, key
    assert "learning_rate" not in message  # YAML text '1e-5': argparse converts it
    fixed = judge(["trl", "grpo", "--config", str(recipe), "--per_device_train_batch_size", "8",
                   "--num_generations", "8", "--gradient_accumulation_steps", "1",
                   "--vllm_tensor_parallel_size", "2"], ("h100_8x_nvlink",))  # fmt: skip
    assert problems(fixed) == set()


def test_trl_process_builds_the_config_with_world_size_one():
    """The same GRPO batch is sound through accelerate launch (world size 4: 2 x 4 = 8) and
    fails through `trl grpo` (its own process builds GRPOConfig with world size 1 first)."""
    report = judge(
        [*GRPO, "--num_processes", "4", "--per_device_train_batch_size", "2"], ("a100_80gb_4x",)
    )
    found = finding(report, "generation-batch-groups")
    assert found["message"] == "generation_batch_size (2) must be divisible by num_generations (8)."
    assert "world size 1" in found["fix"] and "--per_device_train_batch_size 8" in found["fix"]
    assert report["plan"]["config_world_sizes"] == [1, 4]


def test_resolved_launch_of_a_shipped_config_with_flags():
    report = judge(
        [*SFT, "--accelerate_config", "zero3", "--num_processes", "4"], ("a100_80gb_4x",)
    )
    plan = report["plan"]
    assert plan["accelerate_config"] == "shipped:zero3"
    assert (plan["world_size"], plan["processes_per_node"]) == (4, 4)
    assert plan["distributed_type"] == "DEEPSPEED"
    assert plan["accelerate"]["deepspeed_config"]["zero_stage"] == 3
    assert plan["nodes"][0]["gpus_used"] == [0, 1, 2, 3]


def test_visible_devices_and_gpu_ids_pick_the_gpus():
    report = judge(["CUDA_VISIBLE_DEVICES=2,3", *SFT, "--num_processes", "2"], ("a100_80gb_4x",))
    assert report["plan"]["nodes"][0]["gpus_used"] == [2, 3]
    ids = judge(
        ["accelerate", "launch", "--config_file", p("one_gpu_id.yaml"), "--gpu_ids", "1,3",
         f"{TRL_SCRIPTS}/sft.py", *M, *D], ("a100_80gb_4x",),
    )  # fmt: skip
    assert ids["plan"]["nodes"][0]["gpus_used"] == [1, 3]
    assert problems(ids) == set()


def test_user_script_arguments_not_in_trl_are_advice():
    report = judge(["python", p("my_grpo.py"), *M, "--reward_scale", "2"], ("l4",))
    assert problems(report) == set()
    assert "--reward_scale" in finding(report, "user-script-unknown-arguments")["message"]
    assert report["plan"]["trainer"] == "grpo"


def test_unknown_trainer_judges_the_launch_only(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('no TRL class named here')\n")
    report = judge(["accelerate", "launch", "--num_processes", "8", str(script)], ("rtx4090_2x",))
    assert {f["id"] for f in report["findings"]} >= {"trainer-unknown", "processes-exceed-gpus"}
    named = judge(["python", str(script), "--trainer", "dpo", "--beta", "0.2"], ("l4",))
    assert named["plan"]["trainer"] == "dpo" and problems(named) == set()


def test_idle_gpus_are_advice():
    report = judge([*SFT, "--num_processes", "2"], ("a100_80gb_4x",))
    assert problems(report) == set()
    assert "2 GPU(s) idle" in finding(report, "gpus-idle")["message"]


def test_server_settings_in_server_mode_are_advice():
    report = judge(
        [f"{SERVER_6_7} & {TRAINER_0_5} --vllm_gpu_memory_utilization 0.5"], ("h100_8x_nvlink",)
    )
    assert problems(report) == set()
    assert (
        "vllm_gpu_memory_utilization" in finding(report, "vllm-server-settings-ignored")["message"]
    )


def test_remote_server_needs_the_group_port():
    report = judge(
        [*GRPO, "--use_vllm", "--vllm_mode", "server", "--vllm_server_base_url",
         "http://10.0.0.5:8000", "--accelerate_config", "zero3"], ("h100_8x_nvlink",),
    )  # fmt: skip
    assert problems(report) == set()
    assert (
        "10.0.0.5:8000 must reach TCP port 51216"
        in finding(report, "vllm-group-port-remote")["message"]
    )


def test_package_outside_trls_window_is_its_verdict():
    """The check script's verdict decides: vLLM 0.33.0 is outside TRL 1.16.0's 0.22.0-0.31.0."""
    newer = machine_with("h100_8x_nvlink", "h100-vllm-0.33.json", packages={"vllm": "0.33.0"})
    command = ["trl", "grpo", "--config", p("grpo_recipe.yaml"), "--accelerate_config", "zero3"]
    report = judge(command, (newer,))
    found = finding(report, "backend-vllm")
    assert found["severity"] == "warning" and "0.33.0" in found["message"]
    assert "0.31.0" in found["fix"]
    assert problems(judge(command, ("h100_8x_nvlink",))) == set()


# --------------------------------------------------------------------------------------
# Memory through the estimator
# --------------------------------------------------------------------------------------


def test_model_found_in_the_local_cache_is_estimated(tmp_path):
    cache = fake_hub_cache(tmp_path, "meta-llama/Llama-3.1-8B", "llama-3.1-8b.json")
    env = {"HF_HUB_CACHE": str(cache)}
    full = ["trl", "sft", "--model_name_or_path", "meta-llama/Llama-3.1-8B", *D]
    ddp = judge([*full, "--num_processes", "2"], ("rtx4090_2x",), environ=env)
    exceeds = finding(ddp, "memory-exceeds-gpu")
    assert exceeds["severity"] == "error" and exceeds["message"].startswith("ddp needs about")
    assert ddp["plan"]["memory"]["params"] > 8e9
    assert ddp["plan"]["model"]["config"].endswith("0123abcd/config.json")
    sharded = judge(
        [*full, "--accelerate_config", "zero3", "--num_processes", "4", "--dtype", "bfloat16"],
        ("a100_80gb_4x",), environ=env,
    )  # fmt: skip
    assert sharded["plan"]["memory"]["strategy"] == "zero3"
    assert problems(sharded) == set()


def test_memory_fix_is_the_estimators_recommendation():
    report = judge(
        [*SFT, "--num_processes", "2"], ("rtx4090_2x",),
        model_config=str(MODELS / "llama-3.1-8b.json"),
    )  # fmt: skip
    found = finding(report, "memory-exceeds-gpu")
    advice = report["plan"]["memory"]["recommendation"]
    assert advice["fits"] and advice["strategy"] in found["fix"]


def test_vllm_that_cannot_hold_the_model_is_a_memory_error():
    """Qwen3-30B-A3B colocated with TRL's defaults (TP 1, 0.3 of each GPU): its bf16 weights
    alone are about twice vLLM's share, so vLLM cannot start whatever the training side needs."""
    command = ["trl", "grpo", "--model_name_or_path", "Qwen/Qwen3-30B-A3B", *D, "--use_vllm",
               "--use_peft", "--accelerate_config", "zero3", "--dtype", "bfloat16"]  # fmt: skip
    report = judge(command, ("h100_8x_nvlink",), model_config=str(MODELS / "qwen3-30b-a3b.json"))
    found = finding(report, "memory-exceeds-gpu")
    assert found["message"].startswith("vLLM needs about") and "cannot start" in found["message"]
    memory = report["plan"]["memory"]
    assert memory["vllm_fits"] is False and memory["vllm_needed_gb"] > memory["vllm_share_gb"]
    assert "vllm_tensor_parallel_size" in found["fix"]
    larger_tp = judge([*command, "--vllm_tensor_parallel_size", "4"], ("h100_8x_nvlink",),
                      model_config=str(MODELS / "qwen3-30b-a3b.json"))  # fmt: skip
    assert larger_tp["plan"]["memory"]["vllm_fits"] is True
    assert "memory-exceeds-gpu" not in problems(larger_tp)


def test_offload_beyond_the_nodes_ram_is_a_memory_error():
    command = ["accelerate", "launch", "--config_file", p("zero3_offload.yaml"),
               f"{TRL_SCRIPTS}/sft.py", *M, *D, "--dtype", "bfloat16"]  # fmt: skip
    config = str(MODELS / "llama-3.1-8b.json")
    small = machine_with("a100_80gb_4x", "small-host", host={"total_bytes": 32 * 10**9})
    report = judge(command, (small,), model_config=config)
    found = finding(report, "memory-exceeds-gpu")
    assert "offloads about" in found["message"] and "32 GB" in found["message"]
    assert report["plan"]["memory"]["host_fits"] is False
    large = machine_with("a100_80gb_4x", "large-host", host={"total_bytes": 2 * 10**12})
    report = judge(command, (large,), model_config=config)
    assert report["plan"]["memory"]["host_fits"] is True
    assert "memory-exceeds-gpu" not in problems(report)
    unknown = judge(command, ("a100_80gb_4x",), model_config=config)  # recorded without RAM
    assert unknown["plan"]["memory"]["host_ram_gb"] is None
    assert "memory-exceeds-gpu" not in problems(unknown)


ESTIMATOR_CASES = [
    # (machines, preflight arguments after SFT, the same run in estimate_memory.py's words)
    ("rtx4090_2x", ["--num_processes", "2"],
     ["--dtype", "fp32", "--compute-dtype", "bf16", "--gpus", "2"], "ddp"),
    ("a100_80gb_4x", ["--accelerate_config", "zero3", "--num_processes", "4", "--dtype",
                      "bfloat16", "--per_device_train_batch_size", "4", "--max_length", "2048"],
     ["--dtype", "bf16", "--compute-dtype", "bf16", "--gpus", "4", "--batch-size", "4",
      "--seq-len", "2048"], "zero3"),
    ("h100_8x_nvlink", ["--accelerate_config", "fsdp2", "--use_peft", "--lora_r", "32",
                        "--no_gradient_checkpointing"],
     ["--dtype", "fp32", "--compute-dtype", "bf16", "--gpus", "8", "--tuning", "lora",
      "--lora-r", "32", "--no-gradient-checkpointing"], "fsdp2"),
]  # fmt: skip


@pytest.mark.parametrize("machine_name, ours, theirs, strategy", ESTIMATOR_CASES)
def test_memory_is_the_estimators_own(machine_name, ours, theirs, strategy):
    """One source: the same run through estimate_memory.py gives the same per-GPU total."""
    import json
    import subprocess
    import sys

    from preflight_support import MACHINES, script_modules

    config = str(MODELS / "llama-3.1-8b.json")
    report = judge([*SFT, *ours], (machine_name,), model_config=config)
    estimator = subprocess.run(
        [sys.executable, str(script_modules.SCRIPTS / "estimate_memory.py"), "--model-config",
         config, "--trainer", "sft", "--facts", str(MACHINES / f"{machine_name}.json"),
         "--json", *theirs],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert estimator.returncode == 0, estimator.stderr
    expected = json.loads(estimator.stdout)["strategies"][strategy]["total_gb"]
    assert report["plan"]["memory"]["strategy"] == strategy
    assert report["plan"]["memory"]["total_gb"] == expected


def test_memory_unknown_model_says_so():
    report = judge(SFT, ("l4",))
    assert "not downloaded here" in finding(report, "memory-unknown")["message"]
    assert report["plan"]["memory"] == {"unknown": report["plan"]["memory"]["unknown"]}


def test_memory_tight_is_a_warning():
    """Between the usable share (after headroom) and the card's capacity."""
    found = None
    for batch in range(1, 65):
        report = judge(
            [*SFT, "--per_device_train_batch_size", str(batch), "--dtype", "bfloat16",
             "--no_gradient_checkpointing"], ("l4",),
            model_config=str(MODELS / "qwen3-0.6b.json"),
        )  # fmt: skip
        memory = report["plan"]["memory"]
        if memory["usable_gb"] < memory["total_gb"] <= memory["gpu_gb"]:
            found = finding(report, "memory-tight")
            break
    assert found and found["severity"] == "warning"


# --------------------------------------------------------------------------------------
# Several nodes
# --------------------------------------------------------------------------------------

TWO_NODES = [*SFT, "--accelerate_config", "multi_gpu", "--num_machines", "2",
             "--num_processes", "8", "--main_process_ip", "10.0.0.1"]  # fmt: skip


def test_version_skew_between_nodes():
    other = machine_with(
        "a100_80gb_4x", "node1.json",
        packages={"torch": "2.9.1+cu128", "nvidia-nccl-cu12": "2.26.2"},
        accelerators={"driver_version": "550.54.15"},
    )  # fmt: skip
    report = judge(TWO_NODES, (machine("a100_80gb_4x"), other))
    message = finding(report, "node-version-skew")["message"]
    assert "torch 2.10.0+cu128 / 2.9.1+cu128" in message and "nvidia-nccl-cu12" in message
    assert "driver" in message


def test_node_count_differs_from_num_machines():
    report = judge(TWO_NODES, ("a100_80gb_4x", "a100_80gb_4x", "a100_80gb_4x"))
    assert "facts were given for 3" in finding(report, "node-count")["message"]


def test_each_node_is_judged_with_its_own_gpus():
    small = machine_with("a100_80gb_4x", "node1.json")
    small[1]["accelerators"]["devices"] = small[1]["accelerators"]["devices"][:2]
    report = judge(TWO_NODES, (machine("a100_80gb_4x"), small))
    exceeded = finding(report, "processes-exceed-gpus")
    assert exceeded["message"].startswith("node1.json: ")


def test_other_trl_release_on_the_target():
    other = machine_with("l4", "l4-trl-1.15.json", packages={"trl": "1.15.2"})
    report = judge(SFT, (other,))
    assert "TRL 1.15" in finding(report, "trl-release-differs")["message"]
    # TRL 1.16.0 here would judge another release than the target's: the table is used.
    auto = judge(SFT, (other,), use_trl="auto")
    assert "the target has TRL 1.15.2, this Python TRL 1.16.0" in auto["plan"]["trl_parser"]


def test_a_misspelt_option_gets_its_right_spelling():
    """The fix of a refused argument names the closest TRL option, whichever parser refuses it."""
    report = judge([*SFT, "--learnig_rate", "1e-5"], ("l4",))
    found = finding(report, "accelerate-rejects-argument")
    assert found["fix"] == "did you mean --learning_rate (not --learnig_rate)"
    script = ["accelerate", "launch", "--multi_gpu", "--num_processes", "4",
              f"{TRL_SCRIPTS}/sft.py", *M, *D, "--per_device_train_batchsize", "2"]  # fmt: skip
    found = finding(judge(script, ("a100_80gb_4x",)), "script-unknown-arguments")
    assert "--per_device_train_batch_size (not --per_device_train_batchsize)" in found["fix"]
    nothing_close = finding(
        judge([*SFT, "--warp_drive", "1"], ("l4",)), "accelerate-rejects-argument"
    )
    assert "did you mean" not in nothing_close["fix"]
