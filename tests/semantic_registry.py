"""Every behavioural claim in SKILL.md and the references, with its proof (see semantic_claims).

Run(name): the test `name` in tests/test_semantics_run.py shows it on the installed stack.
Cite(ref, needle): the installed source still says `needle` at `ref`, which the doc cites.
Restates(doc, fragment): a summary of another registered, proven claim.
NotAClaim(reason): the keyword is used in another sense, or the statement is about software
outside the stack (vLLM, Unsloth, CUDA builds of torch) that this suite cannot run or read.

When a doc sentence changes, its fragment stops matching and the test names it: re-prove the
new text, then update the fragment here.
"""

from __future__ import annotations

from semantic_claims import Cite, Claim, NotAClaim, Restates, Run

SKILL = "SKILL.md"
BACKENDS = "references/backend-selection.md"
VLLM = "references/vllm-reference.md"
TROUBLE = "references/troubleshooting.md"

INCREASE = NotAClaim("'raise' means increase a setting here, not an exception")
NO_VLLM = NotAClaim("behaviour of vLLM itself, which is not installed in this stack")


def C(doc, fragment, *proofs):
    return Claim(doc, fragment, proofs)


# Proofs shared by several sentences.
AC_CLASH = Cite("transformers/trainer.py:881", "can't both be set to True")
DATAPARALLEL = Run("test_dataparallel_refused_for_a_model_object_on_several_gpus")
MODEL_ID_SPLIT = (
    Run("test_trl_defaults_device_map_auto_for_a_model_id_on_a_gpu"),
    Run("test_device_map_auto_spreads_a_model_over_the_visible_gpus"),
    Run("test_model_split_by_device_map_is_model_parallel_and_not_refused"),
    Run("test_trl_cli_hands_the_trainer_a_model_id"),
)
DEVICE_MAP_FORCED = Run("test_trainers_force_device_map_none_only_under_multi_gpu_and_deepspeed")
FSDP_AUTO_REFUSED = Cite(
    "accelerate/accelerator.py:1479",
    "You can't train a model that has been loaded with `device_map='auto'` in any distributed mode.",
)
FSDP_SKIPS_DISPATCH = Cite(
    "transformers/integrations/accelerate.py:425",
    "if not is_fsdp_enabled() and not is_deepspeed_zero3_enabled():",
)
FSDP1_YAML = Run("test_fsdp1_yaml_strategy_comes_from_fsdp_sharding_strategy_only")
FSDP2_PREFETCH = Run("test_fsdp2_forward_prefetch_silently_ignored_from_yaml_raises_in_code")
FSDP2_KEYS = Run("test_fsdp2_fsdp1_only_keys_silent_from_yaml_warn_in_code")
DS_FILE = Run("test_deepspeed_config_file_with_accelerate_keys_raises_when_the_config_is_built")
DS_FILE_LINE = Cite(
    "accelerate/utils/dataclasses.py:1526",
    "the following accelerate config variables will be ignored",
)
VLLM_WINDOW = Run("test_vllm_outside_the_window_only_warns")
ONLINE_CP = Run("test_online_configs_reject_parallelism_config_but_not_a_yaml_block")
LM_HEAD = Run("test_lora_on_lm_head_is_rejected")
LIGER = Run("test_liger_is_deprecated_and_its_fused_cross_entropy_forced_off")
PACKING_CP = Cite("trl/trainer/sft_trainer.py:1157", "Packing is not compatible with context")
BF16_PAIR = Run("test_fp16_and_bf16_together_raise")
GC_WARNING = Run("test_gradient_checkpointing_default_warns_unless_activation_checkpointing_is_set")
ZERO3_REENTRANT = Cite("trl/trainer/sft_trainer.py:892", "`use_reentrant` is forced to `True`")
ZERO3_SELECTIVE = Cite("trl/trainer/sft_trainer.py:883", "is not supported with PEFT + DeepSpeed")
FA_FP32 = Cite("transformers/modeling_utils.py:1622", "only supports torch.float16 and torch.bf")
SP_POSITION_IDS = Cite(
    "trl/trainer/sft_trainer.py:1172", "self.data_collator.return_position_ids = True"
)
SP_LOSSES = Cite("trl/trainer/sft_trainer.py:1184", "are not supported with DeepSpeed sequence")
SERVER_FIELDS = Run("test_each_vllm_mode_reads_only_its_own_fields")
CLIENT_ERRORS = Run("test_vllm_client_names_missing_dev_mode_engine_and_cuda")
CHECK_SERVER = Run("test_vllm_client_timeout_counts_only_failed_connections")
HANDSHAKE = Run("test_server_handshake_and_rendezvous_run_inside_the_trainer_constructor")
BARRIER = Cite("trl/generation/vllm_generation.py:375", "accelerator.wait_for_everyone()")
BATCH = Run("test_grpo_and_rloo_batch_checks")
LAUNCH_FLAGS = Run("test_launcher_flag_combinations_that_raise")

CLAIMS = (
    # ---- SKILL.md (no source refs of its own: executed, or resting on a line a reference cites)
    C(
        SKILL,
        '`gradient_checkpointing=True` makes transformers raise "can\'t both be set to True"',
        AC_CLASH,
    ),
    C(
        SKILL,
        "`fsdp_forward_prefetch` in a YAML is silently ignored (in code it raises)",
        FSDP2_PREFETCH,
    ),
    C(
        SKILL,
        "`fsdp_reshard_after_forward: SHARD_GRAD_OP` is silently ignored and the run stays FULL_SHARD",
        FSDP1_YAML,
    ),
    C(
        SKILL,
        'or building the training config raises "... the following accelerate config variables will be ignored"',
        DS_FILE,
    ),
    C(SKILL, "A shipped `zero*.yaml` plus a JSON path fails.", DS_FILE),
    C(
        SKILL,
        "Outside that window TRL only warns when its vLLM code is imported",
        VLLM_WINDOW,
        Run("test_vllm_availability_is_checked_when_trl_vllm_modules_are_imported"),
    ),
    C(
        SKILL,
        '`liger_kernel_config={"fused_linear_cross_entropy": True}` is rejected, because TRL',
        LIGER,
    ),
    C(
        SKILL,
        "makes every TRL trainer raise the `nn.DataParallel` ValueError when it is constructed",
        DATAPARALLEL,
    ),
    C(
        SKILL,
        'is loaded with `device_map="auto"`, split over the GPUs, and trains with one GPU busy',
        *MODEL_ID_SPLIT,
    ),
    C(SKILL, "- SFT rejects `packing=True` with context parallelism (`cp_size` > 1).", PACKING_CP),
    C(
        SKILL,
        "`DistillationConfig` reject a `parallelism_config` with `cp_size` or `sp_size` > 1, but a `parallelism_config:` block in the accelerate YAML escapes that check",
        ONLINE_CP,
    ),
    C(
        SKILL,
        "A LoRA adapter on `lm_head` is rejected by the SFT, DPO, KTO, GRPO and RLOO trainers.",
        LM_HEAD,
    ),
    C(SKILL, "CPU needs `use_cpu=True`", Run("test_trl_configs_default_to_bf16_and_fail_on_cpu")),
    # ---- backend-selection.md
    C(
        BACKENDS,
        "lower `per_device_train_batch_size`, raise `gradient_accumulation_steps`; lower",
        INCREASE,
    ),
    C(
        BACKENDS,
        "DPO and reward count twice the micro-batch (chosen + rejected).",
        NotAClaim("'rejected' names DPO's rejected completions"),
    ),
    C(
        BACKENDS,
        "every TRL trainer raises instead, when it is constructed:",
        DATAPARALLEL,
        Cite("trl/trainer/utils.py:1351", 'else "auto"'),
    ),
    C(
        BACKENDS,
        'TRL loads it with `device_map="auto"` (`trl/trainer/utils.py:1351`), which spreads the layers over every visible GPU',
        *MODEL_ID_SPLIT,
    ),
    C(
        BACKENDS,
        "for a model id TRL sets `device_map=None` (`trl/trainer/sft_trainer.py:692`",
        DEVICE_MAP_FORCED,
        Cite("trl/trainer/sft_trainer.py:692", 'in ["MULTI_GPU", "DEEPSPEED"]'),
    ),
    C(
        BACKENDS,
        'TRL leaves `device_map="auto"` for a model id, so each rank spreads its copy',
        DEVICE_MAP_FORCED,
    ),
    C(
        BACKENDS,
        'Pass `model_init_kwargs={"device_map": None}` to load the plain way',
        DEVICE_MAP_FORCED,
    ),
    C(
        BACKENDS,
        "transformers dispatches that split model and `trainer.train()` stops before the first step with",
        FSDP_AUTO_REFUSED,
    ),
    C(
        BACKENDS,
        "transformers skips the dispatch (`transformers/integrations/accelerate.py:425`) and nothing raises",
        FSDP_SKIPS_DISPATCH,
    ),
    C(
        BACKENDS,
        "while a model object in your own script raises the `nn.DataParallel` error",
        DATAPARALLEL,
        Run("test_single_gpu_config_starts_one_process_whatever_num_processes"),
        *MODEL_ID_SPLIT,
    ),
    C(BACKENDS, "- `fp16=True` with `bf16=True` raises `At most one of fp16 and bf16", BF16_PAIR),
    C(
        BACKENDS,
        "- Without a bf16-capable GPU the config itself fails:",
        Run("test_trl_configs_default_to_bf16_and_fail_on_cpu"),
    ),
    C(
        BACKENDS,
        "`accelerate launch` raises `RuntimeError: FP8 is not available on this machine.`",
        Run("test_fp8_launch_needs_an_fp8_backend"),
    ),
    C(BACKENDS, "FlashAttention warns on fp32 (`transformers/modeling_utils.py:1622`)", FA_FP32),
    C(
        BACKENDS,
        "8-bit base; both together raise `You can't use 8 bit and 4 bit precision",
        Run("test_modelconfig_4bit_and_8bit_together_raise"),
    ),
    C(
        BACKENDS,
        "transformers 5.24 itself refuses bitsandbytes older than 0.46.1",
        Run("test_bitsandbytes_missing_names_the_minimum_transformers_wants"),
    ),
    C(BACKENDS, "- LoRA on the output head is rejected by SFT, DPO, KTO, GRPO and RLOO", LM_HEAD),
    C(
        BACKENDS,
        'forces `gradient_checkpointing_kwargs={"use_reentrant": True}` (warns if you set False',
        ZERO3_REENTRANT,
    ),
    C(
        BACKENDS,
        '`gradient_checkpointing_kwargs={"selective": True}` is rejected in that combination',
        ZERO3_SELECTIVE,
    ),
    C(
        BACKENDS,
        "- PEFT + `sync_ref_model=True` raises NotImplementedError",
        Run("test_peft_with_sync_ref_model_raises"),
    ),
    C(
        BACKENDS,
        "leaves the frozen 4-bit weights out of sharding and warns `Found N non-floating frozen",
        Cite("accelerate/utils/fsdp_utils.py:807", "non-floating frozen Params4bit"),
    ),
    C(
        BACKENDS,
        "- QLoRA + vLLM colocate: an 8-bit base is rejected",
        Cite(
            "trl/generation/vllm_generation.py:341",
            "vLLM does not support in-flight 8-bit quantization.",
        ),
    ),
    C(
        BACKENDS,
        "pushes the policy's own 4-bit weights, which are packed uint8 tensors without their quantization state",
        Cite("trl/generation/vllm_generation.py:341", 'quantization = "bitsandbytes"'),
        Cite("trl/generation/vllm_generation.py:479", "yield name, param.data"),
    ),
    C(
        BACKENDS,
        "- `use_kernels=True` raises a ValueError on transformers 5.2.x/5.3.x",
        Run("test_use_kernels_needs_the_kernels_package_and_transformers_5_4"),
    ),
    C(
        BACKENDS,
        "Without the kernels package, transformers raises `Kernels are not available.",
        Run("test_use_kernels_needs_the_kernels_package_and_transformers_5_4"),
    ),
    C(BACKENDS, "emits in 1.16.0: ``FutureWarning: `use_liger_kernel=True` is deprecated", LIGER),
    C(
        BACKENDS,
        '`liger_kernel_config={"fused_linear_cross_entropy": True}` raises ValueError (TRL\'s own',
        LIGER,
    ),
    C(
        BACKENDS,
        "and says so once: ``You do not have `flash_attn` installed",
        Cite("transformers/modeling_utils.py:1818", "from the `kernels` library instead!"),
    ),
    C(
        BACKENDS,
        "(the flash-attn CUDA extension itself refuses pre-Ampere GPUs), and gates FA3",
        Cite("transformers/modeling_utils.py:1576", "requires compute capability >="),
    ),
    C(
        BACKENDS,
        "- FlashAttention warns when the model is loaded in fp32 (`transformers/modeling_utils.py:1622`)",
        FA_FP32,
    ),
    C(
        BACKENDS,
        "pass the model object to the trainer; `model_init_kwargs` is then ignored.",
        Run("test_model_init_kwargs_ignored_with_a_warning_for_a_model_object"),
    ),
    C(
        BACKENDS,
        "DPO ignores it in 1.16.0 (warns, pads)",
        Run("test_dpo_padding_free_falls_back_to_padding_with_a_warning"),
    ),
    C(
        BACKENDS,
        "is a deprecated alias in transformers 5.24 and warns on every TRL config",
        GC_WARNING,
    ),
    C(
        BACKENDS,
        '- SFT forces padding-free on for `packing=True` with `"bfd"` or `"bfd_split"`.',
        Run("test_sft_packing_turns_padding_free_on_and_padding_free_needs_no_max_length"),
    ),
    C(
        BACKENDS,
        "no packing and a `max_length` raises ``When `padding_free=True` without packing",
        Run("test_sft_packing_turns_padding_free_on_and_padding_free_needs_no_max_length"),
    ),
    C(
        BACKENDS,
        "- DPO `padding_free=True` is disabled in 1.16.0: a warning, then standard padding.",
        Run("test_dpo_padding_free_falls_back_to_padding_with_a_warning"),
    ),
    C(BACKENDS, "- To silence the deprecation warning, set `activation_checkpointing`", GC_WARNING),
    C(
        BACKENDS,
        "(accelerate raises `FSDP2 requires PyTorch >= 2.6.0`",
        Cite("accelerate/utils/dataclasses.py:1835", "FSDP2 requires PyTorch >="),
    ),
    C(BACKENDS, "| `fsdp_sharding_strategy` | `FULL_SHARD` (default)", FSDP1_YAML),
    C(
        BACKENDS,
        "silently ignored from a YAML (the launcher always exports `fsdp_sharding_strategy`",
        FSDP1_YAML,
        Run("test_fsdp2_reshard_after_forward_must_be_a_bool"),
    ),
    C(
        BACKENDS,
        "| `fsdp_forward_prefetch` | allowed | not implemented: silently ignored from a YAML;",
        FSDP2_PREFETCH,
    ),
    C(
        BACKENDS,
        "| `fsdp_backward_prefetch` | `BACKWARD_PRE` | ignored with a logged warning",
        FSDP2_KEYS,
    ),
    C(
        BACKENDS,
        "| used | silently ignored from a YAML (a warning only when passed to the plugin in code); `accelerate launch` still refuses",
        FSDP2_KEYS,
        Run("test_launcher_refuses_sync_module_states_false_with_cpu_ram_efficient_loading"),
    ),
    C(
        BACKENDS,
        "`LOCAL_STATE_DICT` rejected; use `SHARDED_STATE_DICT`",
        Run("test_fsdp2_rejects_local_state_dict"),
    ),
    C(
        BACKENDS,
        "transformers raises at trainer creation (`transformers/trainer.py:881`)",
        AC_CLASH,
    ),
    C(
        BACKENDS,
        "`deepspeed_config_file` plus any of those keys raises when the training config",
        DS_FILE,
        DS_FILE_LINE,
    ),
    C(BACKENDS, "`--mixed_precision` given on the command line is not counted.", DS_FILE),
    C(
        BACKENDS,
        "(transformers 5.24 raises `ParallelismConfig requires accelerate>=1.12.0` below that",
        Cite("transformers/trainer.py:773", 'min_accelerate_version = "1.12.0"'),
        Cite("accelerate/accelerator.py:2404", "Deepspeed ALST/Ulysses requires deepspeed>="),
    ),
    C(BACKENDS, "heads must be ≥ sp size; SFT forces position ids into batches", SP_POSITION_IDS),
    C(BACKENDS, "GRPO, RLOO and Distillation reject cp/sp > 1 in their config:", ONLINE_CP),
    C(
        BACKENDS,
        "That check reads `parallelism_config` on the config only; a YAML `parallelism_config:` block is not caught there",
        ONLINE_CP,
    ),
    C(
        BACKENDS,
        "- SFT rejects packing with CP (`packing` or `eval_packing`) when the trainer is built",
        PACKING_CP,
    ),
    C(BACKENDS, '- SFT with DeepSpeed SP rejects `loss_type="dft"`', SP_LOSSES),
    C(
        BACKENDS,
        "SP has no packing check in 1.16.0 SFT (it forces position ids into every batch",
        SP_POSITION_IDS,
    ),
    C(
        BACKENDS,
        "otherwise accelerate raises ``You cannot use `--use_parallelism_config`",
        LAUNCH_FLAGS,
    ),
    C(
        BACKENDS,
        "| LoRA + ZeRO-3 | works; TRL forces reentrant checkpointing",
        Restates(
            BACKENDS,
            'forces `gradient_checkpointing_kwargs={"use_reentrant": True}` (warns if you set False',
        ),
    ),
    C(
        BACKENDS,
        "| QLoRA + vLLM colocate | 8-bit rejected; 4-bit starts",
        Restates(
            BACKENDS,
            "pushes the policy's own 4-bit weights, which are packed uint8 tensors without their quantization state",
        ),
    ),
    C(
        BACKENDS,
        "| ValueError at config time when `parallelism_config` is set in Python",
        ONLINE_CP,
    ),
    C(BACKENDS, "works, FutureWarning; fused linear cross-entropy forced off", LIGER),
    C(
        BACKENDS,
        "| model object: `nn.DataParallel` ValueError; model id (`trl` CLI)",
        DATAPARALLEL,
        *MODEL_ID_SPLIT,
    ),
    C(
        BACKENDS,
        "| ValueError at the start of training (`device_map='auto'` in a distributed mode)",
        Restates(
            BACKENDS,
            "transformers dispatches that split model and `trainer.train()` stops before the first step with",
        ),
    ),
    C(BACKENDS, "| ValueError when the training config is built |", DS_FILE),
    # ---- vllm-reference.md
    C(VLLM, "colocate: server-mode weight sync raises `NotImplementedError`", CLIENT_ERRORS),
    C(
        VLLM,
        "| colocate rejects it (ValueError); server mode has no TRL check",
        Restates(VLLM, "- Colocate with an 8-bit policy (`load_in_8bit`)"),
    ),
    C(
        VLLM,
        "- Colocate with an 8-bit policy (`load_in_8bit`)",
        Cite(
            "trl/generation/vllm_generation.py:341",
            "vLLM does not support in-flight 8-bit quantization.",
        ),
    ),
    C(
        VLLM,
        '`GRPOConfig(vllm_mode="remote")` constructs; the trainer then raises',
        Run("test_vllm_mode_is_checked_by_the_trainer_not_the_config"),
    ),
    C(VLLM, "full URL; when set, host and port are ignored | ignored |", SERVER_FIELDS),
    C(VLLM, "server address (the default reaches a local server) | ignored |", SERVER_FIELDS),
    C(VLLM, "| `vllm_server_port` | `8000` | server HTTP port | ignored |", SERVER_FIELDS),
    C(VLLM, "seconds to wait for `/health` | ignored |", SERVER_FIELDS),
    C(VLLM, "NCCL rendezvous port, opened on the TRAINER host | ignored |", SERVER_FIELDS),
    C(VLLM, "ignored: use the server's `--gpu_memory_utilization`", SERVER_FIELDS),
    C(VLLM, "| ignored: use `--tensor_parallel_size` |", SERVER_FIELDS),
    C(VLLM, "| ignored: use `--max_model_len` |", SERVER_FIELDS),
    C(VLLM, "| `vllm_enable_sleep_mode` | `False` | ignored |", SERVER_FIELDS),
    C(VLLM, "| ignored: use `--vllm_model_impl` |", SERVER_FIELDS),
    C(VLLM, "| ignored: use `--trust_remote_code` |", SERVER_FIELDS),
    C(
        VLLM,
        "a `structured_outputs` key in `generation_kwargs` silently replaces it",
        Run("test_server_generation_kwargs_override_structured_outputs_silently"),
        Cite(
            "trl/generation/vllm_generation.py:677", "`structured_outputs_regex` takes precedence."
        ),
    ),
    C(
        VLLM,
        "merged into the request body as-is, after TRL's own keys",
        Run("test_server_generation_kwargs_override_structured_outputs_silently"),
    ),
    C(
        VLLM,
        "without it a multimodal prompt raises (`trl/generation/vllm_client.py:360`)",
        Cite("trl/generation/vllm_client.py:360", "does not serve `/v1/chat/completions/render`"),
    ),
    C(
        VLLM,
        "When every attempt fails to connect, the trainer raises (requests' ConnectionError)",
        CHECK_SERVER,
    ),
    C(
        VLLM,
        "A server that answers `/health` with a non-200 status is retried forever",
        CHECK_SERVER,
    ),
    C(VLLM, 'wait for "Application startup complete", or raise `vllm_server_timeout`.', INCREASE),
    C(
        VLLM,
        "With several training processes, raise `ddp_timeout` (1800 s) too",
        BARRIER,
        Cite(
            "transformers/training_args.py:1891",
            'accelerator_state_kwargs["timeout"] = timedelta(seconds=self.ddp_timeout)',
        ),
    ),
    C(
        VLLM,
        "The whole handshake, NCCL rendezvous included, runs inside the trainer's constructor",
        HANDSHAKE,
        Cite(
            "trl/generation/vllm_generation.py:309",
            "self.vllm_client.init_communicator(device=accelerator.device)",
        ),
    ),
    C(
        VLLM,
        "TRL forces a sync first (`trl/generation/vllm_generation.py:589`)",
        Cite(
            "trl/generation/vllm_generation.py:589",
            "self._llm_weights_sleeping: self.sync_weights()",
        ),
    ),
    C(
        VLLM,
        "otherwise the trainer raises `ValueError: tensor_parallel_size ({tp}) must divide",
        Run("test_colocate_tensor_parallel_size_must_divide_world_size"),
    ),
    C(
        VLLM,
        "- That warning dates from TRL PR #5214",
        NotAClaim(
            "history of TRL's old server with vLLM 0.14.0, from the PR threads; neither is installed"
        ),
    ),
    C(VLLM, "setting both `generation_batch_size` and `steps_per_generation` raises", BATCH),
    C(
        VLLM,
        "(an older transformers raises an ImportError at trainer init, `trl/trainer/grpo_trainer.py:798`)",
        Cite("trl/trainer/grpo_trainer.py:798", "requires transformers>=5.8.0"),
    ),
    C(VLLM, "- The window is not enforced: outside it, TRL only warns", VLLM_WINDOW),
    C(
        VLLM,
        "0.31.1 and later 0.31.x patch releases are outside (they warn, and the extra refuses them)",
        VLLM_WINDOW,
        Run("test_vllm_availability_is_checked_when_trl_vllm_modules_are_imported"),
    ),
    C(
        VLLM,
        "Each sync then pushes the policy's own parameters (`param.data`",
        Cite("trl/generation/vllm_generation.py:479", "yield name, param.data"),
    ),
    # ---- troubleshooting.md
    C(
        TROUBLE,
        "Raised by the dynamic loader while importing a compiled extension",
        NotAClaim("the operating system's loader message, outside Python code"),
    ),
    C(
        TROUBLE,
        "What users see (measured with a vllm whose import raises):",
        Cite("trl/_lazy_module.py:74", "Failed to import"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/_lazy_module.py:74`.",
        Cite("trl/_lazy_module.py:74", "Failed to import"),
    ),
    C(
        TROUBLE,
        "Raised by `unsloth/device_type.py` at `import unsloth`.",
        NotAClaim("Unsloth is not part of the stack and not installed"),
    ),
    C(
        TROUBLE,
        "**Cause**: Unsloth refuses CPU-only machines",
        NotAClaim("Unsloth is not part of the stack and not installed"),
    ),
    C(
        TROUBLE,
        "TRL 1.16.0 imports optional backends lazily and raises at trainer construction.",
        Run("test_use_vllm_without_vllm_raises_when_the_trainer_is_built"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/generation/vllm_generation.py:296`",
        Run("test_use_vllm_without_vllm_raises_when_the_trainer_is_built"),
        Cite(
            "trl/generation/vllm_generation.py:296",
            "vLLM is not available and `use_vllm` is set to True",
        ),
    ),
    C(
        TROUBLE,
        "Raised by every trainer (`trl/trainer/grpo_trainer.py:436`",
        Cite(
            "trl/trainer/grpo_trainer.py:436",
            "You passed `peft_config` but the `peft` library is not installed.",
        ),
    ),
    C(
        TROUBLE,
        "Raised by `transformers/quantizers/quantizer_bnb_4bit.py:62`",
        Run("test_bitsandbytes_missing_names_the_minimum_transformers_wants"),
        Cite(
            "transformers/quantizers/quantizer_bnb_4bit.py:62",
            "4-bit quantization requires bitsandbytes",
        ),
    ),
    C(
        TROUBLE,
        "Raised by `transformers/training_args.py:1779` when any TRL config is built",
        Run("test_trl_configs_default_to_bf16_and_fail_on_cpu"),
        Cite("transformers/training_args.py:1779", "Your setup doesn't support bf16/gpu."),
    ),
    C(
        TROUBLE,
        "torch warns `The NVIDIA driver on your system is too old`",
        NotAClaim(
            "a message of torch's CUDA builds; the CPU build installed here does not contain it"
        ),
    ),
    C(
        TROUBLE,
        "Raised by `torch/cuda/__init__.py:390` when CUDA initializes.",
        Cite("torch/cuda/__init__.py:390", "does not include kernels for this GPU"),
    ),
    C(
        TROUBLE,
        "line the warning prints.",
        Cite("torch/cuda/__init__.py:390", "Reinstall the same version against a CUDA build"),
    ),
    C(
        TROUBLE,
        "so on these GPUs transformers does not raise the bf16 error above",
        Cite(
            "torch/cuda/__init__.py:191", "def is_bf16_supported(including_emulation: bool = True):"
        ),
        Cite("transformers/utils/import_utils.py:665", "return torch.cuda.is_bf16_supported()"),
    ),
    C(TROUBLE, "and raises only when bf16 is requested explicitly:", NO_VLLM),
    C(TROUBLE, "Passing both as True raises `At most one of fp16 and bf16", BF16_PAIR),
    C(TROUBLE, "(typo is transformers', `transformers/modeling_utils.py:1622`)", FA_FP32),
    C(
        TROUBLE,
        "and logs once ``You do not have `flash_attn` installed",
        Cite("transformers/modeling_utils.py:1818", "from the `kernels` library instead!"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/generation/vllm_client.py:289` on the main process at trainer init.",
        CHECK_SERVER,
        HANDSHAKE,
        Cite("trl/generation/vllm_client.py:289", "The vLLM server can't be reached at"),
    ),
    C(
        TROUBLE,
        "Hang instead of an error: the timeout only counts failed connections.",
        CHECK_SERVER,
    ),
    C(
        TROUBLE,
        "Raised by `trl/generation/vllm_client.py:313`",
        CLIENT_ERRORS,
        Cite("trl/generation/vllm_client.py:313", "does not expose its development endpoints"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/generation/vllm_client.py:738`",
        CLIENT_ERRORS,
        Cite("trl/generation/vllm_client.py:738", "has no weight-transfer engine"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/generation/vllm_client.py:360`",
        Cite("trl/generation/vllm_client.py:360", "does not serve `/v1/chat/completions/render`"),
    ),
    C(
        TROUBLE,
        "Logged warning, `trl/trainer/grpo_trainer.py:1150`",
        HANDSHAKE,
        Cite("trl/trainer/grpo_trainer.py:1150", "which biases the importance sampling correction"),
    ),
    C(
        TROUBLE,
        "hangs: the rendezvous runs while the trainer is constructed, before `train()` and before any step",
        HANDSHAKE,
        Cite(
            "trl/generation/vllm_generation.py:309",
            "self.vllm_client.init_communicator(device=accelerator.device)",
        ),
        Cite("trl/generation/vllm_client.py:771", "open_trainer_endpoint(init_info)"),
    ),
    C(TROUBLE, "The main process waits there while the other ranks wait at a barrier", BARRIER),
    C(
        TROUBLE,
        "the other ranks wait for it inside a collective: at a barrier",
        BARRIER,
        Cite("trl/generation/vllm_generation.py:594", "all_prompts = gather_object(prompts)"),
        Cite(
            "trl/generation/vllm_generation.py:644",
            "broadcast_object_list(obj_list, from_process=0)",
        ),
    ),
    C(
        TROUBLE,
        "transformers passes it to accelerate as the process-group timeout",
        Cite(
            "transformers/training_args.py:1891",
            'accelerator_state_kwargs["timeout"] = timedelta(seconds=self.ddp_timeout)',
        ),
    ),
    C(
        TROUBLE,
        "when you raise `vllm_server_timeout` above 1800, raise `ddp_timeout` with it",
        INCREASE,
    ),
    C(
        TROUBLE,
        "Raised by `trl/generation/vllm_client.py:758`",
        CLIENT_ERRORS,
        Cite("trl/generation/vllm_client.py:758", "needs a CUDA device"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/import_utils.py:109`.",
        VLLM_WINDOW,
        Cite(
            "trl/import_utils.py:109", "TRL currently supports vLLM versions from 0.22.0 to 0.31.0"
        ),
    ),
    C(
        TROUBLE,
        "A warning, not an error, but 1.16.0's client relies on vLLM internals",
        VLLM_WINDOW,
        Cite("trl/generation/vllm_client.py:50", "from vllm.distributed.weight_transfer"),
    ),
    C(TROUBLE, "Local tags such as `+cu129` are ignored; 0.31.1 is outside.", VLLM_WINDOW),
    C(
        TROUBLE,
        "lower `per_device_train_batch_size`, raise `gradient_accumulation_steps`.",
        INCREASE,
    ),
    C(TROUBLE, "Do not set `auto_find_batch_size=True` for GRPO/RLOO: rejected", BATCH),
    C(
        TROUBLE,
        "Raised by `trl/generation/vllm_generation.py:316` (colocate).",
        Run("test_colocate_tensor_parallel_size_must_divide_world_size"),
        Cite("trl/generation/vllm_generation.py:316", "must divide world size"),
    ),
    C(
        TROUBLE,
        "In server mode this field is ignored; set `--tensor-parallel-size` on the server.",
        SERVER_FIELDS,
    ),
    C(
        TROUBLE,
        "Raised by `GRPOConfig`/`RLOOConfig.__post_init__`",
        Cite("trl/trainer/grpo_config.py:1105", "must be divisible by the global batch size"),
        Cite("trl/trainer/grpo_config.py:1115", "can not be both configured at the same time"),
        Cite("trl/trainer/grpo_config.py:1133", "must be divisible by num_generations"),
    ),
    C(
        TROUBLE,
        "`auto_find_batch_size=True` raises `auto_find_batch_size is not supported by GRPO` (`:1091`)",
        BATCH,
        Cite("trl/trainer/grpo_config.py:1091", "auto_find_batch_size is not supported by GRPO"),
    ),
    C(
        TROUBLE,
        "Raised by `accelerate/parallelism_config.py:374` at `Accelerator` creation.",
        Cite("accelerate/parallelism_config.py:374", "does not match num_processes"),
    ),
    C(
        TROUBLE,
        "Raised by every trainer (`trl/trainer/sft_trainer.py:1120`, `grpo_trainer.py:977`, ...) when it is constructed.",
        DATAPARALLEL,
        Cite("trl/trainer/sft_trainer.py:1120", "does not support `nn.DataParallel`"),
    ),
    C(
        TROUBLE,
        "A model id (a string, and always through the `trl` CLI) does not raise",
        *MODEL_ID_SPLIT,
        Cite("trl/trainer/utils.py:1351", 'else "auto"'),
    ),
    C(
        TROUBLE,
        "for the silent case, `nvidia-smi` shows every GPU holding memory",
        NotAClaim(
            "how to see the case on a GPU box; the behaviour is registered in the sentence before"
        ),
    ),
    C(
        TROUBLE,
        "Raised by `accelerate/commands/launch.py:1209`",
        LAUNCH_FLAGS,
        Cite("accelerate/commands/launch.py:1209", "at least 2 processes to use `--multi_gpu`"),
    ),
    C(
        TROUBLE,
        "and the DeepSpeed plugin refuses them when the training arguments (any TRL config) are built",
        DS_FILE,
        DS_FILE_LINE,
    ),
    C(
        TROUBLE,
        "Adding `deepspeed_config_file` to a shipped `zero1`/`zero2`/`zero3` config hits it",
        DS_FILE,
    ),
    C(
        TROUBLE,
        "A `--mixed_precision` flag on the command line does not count as a YAML key.",
        DS_FILE,
    ),
    C(
        TROUBLE,
        "TRL sets `device_map=None` for a model id only under MULTI_GPU and DeepSpeed",
        DEVICE_MAP_FORCED,
        Cite("trl/trainer/sft_trainer.py:692", 'in ["MULTI_GPU", "DEEPSPEED"]'),
    ),
    C(
        TROUBLE,
        "and accelerate refuses it when `trainer.train()` prepares the model, before the first step",
        FSDP_AUTO_REFUSED,
    ),
    C(
        TROUBLE,
        "With `true` (the default) the dispatch is skipped (`transformers/integrations/accelerate.py:425`) and this error does not appear.",
        Cite(
            "transformers/integrations/accelerate.py:425",
            "if not is_fsdp_enabled() and not is_deepspeed_zero3_enabled():",
        ),
    ),
    C(
        TROUBLE,
        "Raised by `trl/cli/accelerate_config.py:40`.",
        Run("test_trl_accelerate_config_must_name_a_shipped_config_or_a_file"),
        Cite("trl/cli/accelerate_config.py:40", "is neither a file nor a valid config"),
    ),
    C(
        TROUBLE,
        "with single_gpu, the 8 is ignored and one process sees every GPU",
        Run("test_single_gpu_config_starts_one_process_whatever_num_processes"),
        DATAPARALLEL,
        *MODEL_ID_SPLIT,
    ),
    C(
        TROUBLE,
        "Raised by `trl/trainer/grpo_trainer.py:339`",
        Run("test_quantization_config_given_twice_raises"),
        Cite(
            "trl/trainer/grpo_trainer.py:339",
            "You set `quantization_config` both as a trainer argument",
        ),
    ),
    C(
        TROUBLE,
        "Raised by `trl/trainer/sft_trainer.py:1070`",
        LM_HEAD,
        Cite(
            "trl/trainer/sft_trainer.py:1070",
            "Applying a PEFT adapter to `lm_head` is not supported",
        ),
    ),
    C(TROUBLE, "Raised by `transformers/trainer.py:881`.", AC_CLASH),
    C(TROUBLE, "`activation_checkpointing=False` also avoids the deprecation warning:", GC_WARNING),
    C(
        TROUBLE,
        "Raised by `accelerate/utils/dataclasses.py:1956` when forward prefetch is passed",
        FSDP2_PREFETCH,
        Cite(
            "accelerate/utils/dataclasses.py:1956",
            "forward_prefetch is not yet implemented in FSDP2",
        ),
    ),
    C(
        TROUBLE,
        "From a YAML, `fsdp_forward_prefetch` is silently ignored under `fsdp_version: 2`.",
        FSDP2_PREFETCH,
    ),
    C(
        TROUBLE,
        "`LOCAL_STATE_DICT` is rejected under FSDP2",
        Run("test_fsdp2_rejects_local_state_dict"),
    ),
    C(
        TROUBLE,
        "Logged warning, `trl/trainer/sft_trainer.py:891` (every trainer).",
        Cite("trl/trainer/sft_trainer.py:891", "You are using PEFT with DeepSpeed ZeRO-3"),
    ),
    C(
        TROUBLE,
        "SFT additionally rejects selective checkpointing here:",
        Cite("trl/trainer/sft_trainer.py:883", "is not supported with PEFT + DeepSpeed"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/trainer/sft_trainer.py:1157`, also when CP comes from the accelerate YAML.",
        PACKING_CP,
        Cite(
            "trl/trainer/sft_trainer.py:1157",
            "parallelism_config = self.accelerator.parallelism_config",
        ),
    ),
    C(TROUBLE, "Older TRL docs recommend packing with CP; TRL 1.16.0 rejects it.", PACKING_CP),
    C(
        TROUBLE,
        "Raised at config time by `trl/trainer/grpo_config.py:1072`",
        ONLINE_CP,
        Cite(
            "trl/trainer/grpo_config.py:1072",
            "GRPOTrainer does not support sequence-dim parallelism",
        ),
    ),
    C(
        TROUBLE,
        "CP and SP together raise `Context Parallelism (CP) and Sequence Parallelism (SP) are mutually exclusive.`",
        Run("test_cp_and_sp_are_mutually_exclusive"),
        Cite("accelerate/parallelism_config.py:331", "are mutually exclusive"),
    ),
    C(
        TROUBLE,
        "SFT with DeepSpeed SP rejects `loss_type='dft'`",
        Cite("trl/trainer/sft_trainer.py:1184", "are not supported with DeepSpeed sequence"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/trainer/sft_trainer.py:1137` (also GRPO, DPO, RLOO, KTO) when `use_liger_kernel=True`.",
        LIGER,
        Cite("trl/trainer/sft_trainer.py:1137", "is not supported: it replaces the"),
    ),
    C(
        TROUBLE,
        "TRL forces that key to False and computes the loss with its own fused LM head.",
        LIGER,
    ),
    C(
        TROUBLE,
        "Raised by `trl/trainer/utils.py:1345`.",
        Run("test_use_kernels_needs_the_kernels_package_and_transformers_5_4"),
        Cite("trl/trainer/utils.py:1345", "5.2.0 and 5.3.0 fail to load the Hub kernels."),
    ),
    C(
        TROUBLE,
        "on every TRL config because TRL sets the default |",
        GC_WARNING,
        Cite("transformers/training_args.py:1541", "is deprecated and will be removed in v6"),
    ),
    C(
        TROUBLE,
        "Raised by `trl/trainer/grpo_trainer.py:2285`",
        Cite("trl/trainer/grpo_trainer.py:2285", "No completions were generated."),
    ),
    C(TROUBLE, "for over-long prompts raise the server's `--max-model-len`", INCREASE),
    # ---- troubleshooting.md entries merged from the issue trackers (issue 11)
    C(
        TROUBLE,
        "raised by torch's gradient scaler in every release with AMP",
        Cite(
            "torch/amp/grad_scaler.py:275",
            'raise ValueError("Attempting to unscale FP16 gradients.")',
        ),
    ),
    C(
        TROUBLE,
        "which refuses to unscale gradients held in fp16",
        Cite("torch/amp/grad_scaler.py:275", "param.grad.dtype == torch.float16"),
    ),
    C(
        TROUBLE,
        "On ROCm the same warning appears when the ROCm build path is not selected.",
        NotAClaim("flash-attn's own build script, not installed in this stack"),
    ),
    C(TROUBLE, "(raise MAX_JOBS with RAM)", INCREASE),
    C(
        TROUBLE,
        "from 0.19.5 a failing probe only prints a warning and the import succeeds",
        NotAClaim("DeepSpeed's import-time op probe; DeepSpeed is not installed in this stack"),
        Cite("trl/models/utils.py:145", "import deepspeed"),
    ),
    C(
        TROUBLE,
        "torch refuses a major mismatch outright (`torch/utils/cpp_extension.py:646`)",
        Cite("torch/utils/cpp_extension.py:646", "if cuda_ver.major != torch_cuda_version.major:"),
    ),
    C(
        TROUBLE,
        "raised by `VLLMClient` in every release since 0.16.0",
        Cite("trl/generation/vllm_client.py:258", "Request failed: {response.status_code}"),
    ),
    C(
        TROUBLE,
        "each TRL release states its own window in this warning",
        Cite(
            "trl/import_utils.py:109", "TRL currently supports vLLM versions from 0.22.0 to 0.31.0"
        ),
    ),
    C(
        TROUBLE,
        "the version window is only a warning.",
        VLLM_WINDOW,
        Cite("trl/generation/vllm_client.py:43", "from vllm.utils.network_utils import get_ip"),
        Cite("trl/generation/vllm_client.py:50", "from vllm.distributed.weight_transfer"),
    ),
    C(
        TROUBLE,
        "On an older vLLM the import fails, and the lazy loader reports it as",
        Cite("trl/_lazy_module.py:74", "Failed to import"),
    ),
    C(TROUBLE, "raise `--gpu-memory-utilization` / `vllm_gpu_memory_utilization`", INCREASE),
    C(TROUBLE, "or raise the limit (`vllm_max_model_length`, `--max-model-len`)", INCREASE),
    C(TROUBLE, "or raise `per_device_train_batch_size` / gradient accumulation", INCREASE),
    C(
        TROUBLE,
        "raised by `trl/trainer/grpo_config.py:1139` in 1.16.0",
        Cite("trl/trainer/grpo_config.py:1139", "GRPO requires at least 2 generations per prompt"),
    ),
)
