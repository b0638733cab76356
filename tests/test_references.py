"""Doc-oracle tests: SKILL.md and references/*.md must be true for the installed, pinned stack.

Conventions enforced (summarised for authors in README.md, "How the docs are kept true"):
1. ```python blocks run (CPU, offline) as a reader's would; a block whose first line is
   `# Needs a bf16-capable GPU ...` runs with such a GPU simulated and must fail on plain CPU with
   TRL's bf16 error (so the marker is never stale); `# raises Exc: substring` as the last line
   means the block must raise exactly that.
2. ```yaml blocks with `distributed_type:` load through accelerate's own config loader, and every
   key (incl. fsdp_config/deepspeed_config/parallelism_config sub-keys) is one accelerate knows.
   Other ```yaml blocks are TRL CLI config files: keys are TRL parser dests (or accelerate
   launch args, `accelerate_config`, `env`).
3. ```bash command lines parse with the real parsers (accelerate launch, TRL commands, trl
   vllm-serve, torchrun, scripts/*.py); `vllm serve` flags come from an allowlist.
4. Backticked names, `--flags` and ENV_VARS in prose and tables exist in the installed stack.
5. Requirement specifiers for packages TRL pins equal TRL's metadata; versions in scope lines
   equal the installed ones.
6. Structure: `## Contents` in long references, resolvable links, no reference-to-reference
   links, no machine-absolute paths.
7. Prose statements of the vLLM window (`vLLM 0.22.0 to 0.31.0`) equal TRL's `vllm` extra.
8. Tables with a Default column: `| `field` | <literal> |` rows state the installed default
   (scoped to the trainer or class the row, header or preceding sentence names).
9. Paths into the scripts' JSON (`strategies.<name>.total_gb`) exist in their real reports.
10. What the docs say the stack *does* (raises, warns, ignores, ...) is proven by
    tests/test_semantics_run.py or a re-read source line: tests/test_semantics_registry.py.

The first half of this file tests the harness itself on small samples written to tmp_path,
so a broken checker cannot pass silently; the second half runs on the real docs.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from docs_oracle import (
    ABS_PATH_RE,
    EXPECTED_REFERENCES,
    REPO,
    SKILL_MD,
    VERSION_PKGS,
    VERSION_RE,
    Block,
    TableDefaultChecker,
    bash_commands,
    check_accelerate_yaml,
    check_requirement_text,
    check_trl_yaml,
    collect_python_blocks,
    doc_paths,
    github_slug,
    grep_site_packages,
    heading_anchors,
    inline_code_spans,
    installed_version,
    is_accelerate_yaml,
    judge_block,
    links,
    load_doc,
    parse_markdown,
    scope_line,
    split_table_row,
    start_python_blocks,
    trl_requirements,
    trl_vllm_window,
    vllm_window_problems,
)

# Real names that are not fields/keys/args of the configs the oracle reads. Keep this small;
# test_allowlisted_names_exist_in_installed_sources proves each still exists in site-packages.
NAME_ALLOWLIST: dict[str, str] = {
    "use_reentrant": "torch.utils.checkpoint kwarg, set via gradient_checkpointing_kwargs",
    "get_peft_model": "peft function that wraps a model with an adapter",
    "structured_outputs": "vLLM request key TRL sets from vllm_structured_outputs_regex",
    "init_communicator": "VLLMClient method that joins the weight-sync NCCL group",
}
# Env vars that appear in no installed source of the stack but are real (NCCL, vLLM, CUDA).
ENV_ALLOWLIST: dict[str, str] = {
    "VLLM_HOST_IP": "vLLM env var (vllm/envs.py): the IP vLLM advertises for its workers",
    "VLLM_WORKER_MULTIPROC_METHOD": "vLLM env var (vllm/envs.py): fork or spawn for workers",
    "CUDA_DEVICE_ORDER": "CUDA runtime env var (PCI_BUS_ID makes ids match nvidia-smi)",
    # Named by troubleshooting entries about libraries outside the pinned stack.
    "VLLM_USE_V1": "vLLM env var (vllm/envs.py, 0.8-0.10): 0 selects the V0 engine",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "vLLM env var (vllm/envs.py): 0 keeps the engine in-process",
    "BNB_CUDA_VERSION": "bitsandbytes env var: overrides the CUDA version of the binary it loads",
    "DS_SKIP_CUDA_CHECK": "DeepSpeed env var (op_builder/builder.py): skips its CUDA version check",
    "DS_BUILD_CPU_ADAM": "DeepSpeed install-time env var: prebuilds the CPU Adam op",
}
# Flags of tools outside the oracle's parsers. Also grep-verified in site-packages.
FLAG_ALLOWLIST: dict[str, str] = {}

ALLOWED_FENCE_LANGS = {"python", "yaml", "bash", "text", "json", "console", "toml", "diff"}

# The vLLM window TRL 1.16.0 declares for its `vllm` extra, as the docs state it.
DOCUMENTED_VLLM_WINDOW = ("0.22.0", "0.31.0")


def write_doc(tmp_path: Path, body: str, name: str = "sample.md"):
    text = textwrap.dedent(body).lstrip("\n")
    (tmp_path / name).write_text(text)
    return parse_markdown(text, name)


def run_blocks(blocks: list[Block], workdir: Path) -> list[str | None]:
    return [judge_block(r) for r in collect_python_blocks(start_python_blocks(blocks, workdir))]


def ident_problems(ident, doc) -> list[str]:
    problems = []
    for span in doc.spans:
        problems += ident.check_token(span.text, span.where)
    return problems


# =============================================================================================
# Harness self-tests (sample Markdown in tmp_path)
# =============================================================================================


def test_markdown_extraction(tmp_path):
    doc = write_doc(
        tmp_path,
        """
        # Title
        Use `vllm_mode="server"` and ``a `tick` here``.

        - item
          ```python
          x = 1
          ```
        ```bash
        trl sft \\
          --model_name_or_path Qwen/Qwen3-0.6B
        ```
        After `use_vllm`.
        """,
    )
    assert [b.lang for b in doc.blocks] == ["python", "bash"]
    assert doc.blocks[0].text == "x = 1\n" and doc.blocks[0].fence_line == 5
    assert doc.blocks[1].line == 9
    assert [s.text for s in doc.spans] == ['vllm_mode="server"', "a `tick` here", "use_vllm"]
    assert doc.spans[-1].line == 12
    assert inline_code_spans("| `a\\|b` | `c` |") == ["a|b", "c"]
    cmds = bash_commands(doc.blocks[1])
    assert cmds == [(9, ["trl", "sft", "--model_name_or_path", "Qwen/Qwen3-0.6B"], [])]


def test_bash_command_splitting():
    b = Block(
        "x.md",
        "bash",
        "# comment\nCUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=INFO trl vllm-serve --model <model> "
        "&& echo ok\nexport VLLM_SERVER_DEV_MODE=1\n",
        2,
        1,
    )
    cmds = bash_commands(b)
    assert cmds[0] == (
        3,
        ["trl", "vllm-serve", "--model", "1"],
        ["CUDA_VISIBLE_DEVICES", "NCCL_DEBUG"],
    )
    assert cmds[1][1] == ["echo", "ok"]
    assert cmds[2] == (4, [], ["VLLM_SERVER_DEV_MODE"])


def test_github_slugs(tmp_path):
    assert github_slug("Memory & OOM: `bf16`") == "memory--oom-bf16"
    assert github_slug("vLLM server mode (TRL 1.16.0)") == "vllm-server-mode-trl-1160"
    doc = write_doc(tmp_path, "## A\n## A\n### B_c d\n")
    assert heading_anchors(doc) == {"a", "a-1", "b_c-d"}


def test_python_runner_judges_blocks(tmp_path):
    """A doc naming a non-existent TRL field fails; wrong `# raises` expectations fail; blocks run
    on this CPU unless marked as needing a bf16 GPU, and the marker must be needed."""
    doc = write_doc(
        tmp_path,
        """
        ```python
        # Needs a bf16-capable GPU (TRL configs default to bf16=True); on CPU add use_cpu=True.
        from trl import GRPOConfig
        cfg = GRPOConfig(output_dir="out", use_vllm=True)
        assert cfg.vllm_mode == "colocate" and cfg.bf16
        ```
        ```python
        from trl import GRPOConfig
        GRPOConfig(output_dir="out", use_cpu=True, vllm_max_prompt_length=512)
        ```
        ```python
        from trl import SFTConfig
        SFTConfig(output_dir="out", bogus_field=1)
        # raises TypeError: unexpected keyword argument 'bogus_field'
        ```
        ```python
        from trl import SFTConfig
        SFTConfig(output_dir="out", bogus_field=1)
        # raises ValueError: unexpected keyword argument 'bogus_field'
        ```
        ```python
        from trl import SFTConfig
        SFTConfig(output_dir="out", bogus_field=1)
        # raises TypeError: this text is not in the message
        ```
        ```python
        x = 1
        # raises ValueError: nothing raises here
        ```
        ```python
        # raises ValueError: misplaced
        raise ValueError("misplaced")
        ```
        ```python
        raise ValueError("anything")
        # raises ValueError:
        ```
        ```python
        import os
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert "x" not in globals()  # fresh namespace per block
        ```
        ```python
        from trl import SFTConfig
        SFTConfig(output_dir="out")
        ```
        ```python
        # Needs a bf16-capable GPU (TRL configs default to bf16=True); on CPU add use_cpu=True.
        from trl import SFTConfig
        SFTConfig(output_dir="out", use_cpu=True)
        ```
        ```python
        from trl import SFTConfig
        assert SFTConfig(output_dir="out", use_cpu=True).bf16 is True
        ```
        """,
    )
    verdicts = run_blocks(doc.blocks, tmp_path / "run")
    assert verdicts[0] is None, verdicts[0]
    assert verdicts[1] and "vllm_max_prompt_length" in verdicts[1]
    assert verdicts[1].startswith("sample.md:7:")
    assert 'File "sample.md", line 9' in verdicts[1]
    assert verdicts[2] is None, verdicts[2]
    assert verdicts[3] and "expected ValueError but got TypeError" in verdicts[3]
    assert verdicts[4] and "does not contain" in verdicts[4]
    assert verdicts[5] and "ran without error" in verdicts[5]
    assert verdicts[6] and "must be the block's last line" in verdicts[6]
    assert verdicts[7] and "needs a substring" in verdicts[7]
    assert verdicts[8] is None, verdicts[8]
    assert verdicts[9] and "doesn't support bf16/gpu" in verdicts[9]  # no GPU simulated unmarked
    assert verdicts[10] and "drop the marker" in verdicts[10]
    assert verdicts[11] is None, verdicts[11]


def test_identifier_checker_rejects_unknown_names(tmp_path, ident):
    good = write_doc(
        tmp_path,
        """
        Set `vllm_mode="server"`, `vllm_group_port`, `use_kernels`, `zero3_init_flag: true`,
        `GRPOConfig(vllm_gpu_memory_utilization=0.3)`, `model_init_kwargs={"use_kernels": True}`,
        `flash_attention_2`, `--num_processes`, `--data-parallel-size`, `NCCL_DEBUG`,
        `vllm_importance_sampling_*`, `fsdp_config["activation_checkpointing"]`, `sp_size>1`,
        `FULL_STATE_DICT`, `lora_r`, `load_in_4bit`, `dp_shard_size`, `bf16=True`,
        `trl/trainer/grpo_trainer.py:339`, `GRPOConfig.vllm_mode`, `ModelConfig.dtype`.
        `get_ip()` and `trl.scripts.vllm_serve` are skipped.
        """,
        "good.md",
    )
    assert ident_problems(ident, good) == []
    bad = write_doc(
        tmp_path,
        """
        | knob | note |
        |---|---|
        | `vllm_max_prompt_length` | not a field |
        Use `SFTConfig(vllm_mode="server")` and `model_init_kwargs={"use_liger": True}`.
        Pass `--vllm_bogus_flag`, set `TRL_NO_SUCH_ENV_VAR`, `packing_strategy="nope"`, `lr=1e-5`,
        and run `trl grpo --vllm_modes server`.
        See `trl/trainer/no_such_file.py`, `trl/trainer/grpo_config.py:999999`,
        `SFTConfig.vllm_mode` and `backends.<name>.no_such_key_xyz`.
        """,
        "bad.md",
    )
    problems = ident_problems(ident, bad)
    text = "\n".join(problems)
    assert "bad.md:3: `vllm_max_prompt_length`" in text
    assert "`SFTConfig` has no field `vllm_mode`" in text
    assert "`use_liger` is not a model_init_kwargs key" in text
    assert "`--vllm_bogus_flag`" in text
    assert "`TRL_NO_SUCH_ENV_VAR`" in text
    assert "'nope' is not one of" in text
    assert "`lr`" in text
    assert "`--vllm_modes` is not accepted by `trl grpo`" in text
    assert "`trl/trainer/no_such_file.py` does not exist" in text
    assert "out of range" in text
    assert text.count("`SFTConfig` has no field `vllm_mode`") == 2  # call and attribute
    assert "no key `no_such_key_xyz`" in text
    assert len(problems) == 12, text


def test_yaml_checkers(tmp_path, oracle, ident):
    shipped = Path(__import__("trl").__file__).parent / "accelerate_configs"
    configs = sorted(shipped.glob("*.yaml"))
    assert len(configs) >= 7
    for cfg in configs:  # positive control: TRL's own configs pass
        text = cfg.read_text()
        assert is_accelerate_yaml(text)
        assert check_accelerate_yaml(text, cfg.name, oracle, tmp_path) == []
    base = "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 2\n"
    bad_sub = base + "fsdp_config:\n  fsdp_version: 2\n  fsdp_bogus_option: true\n"
    assert any(
        "fsdp_bogus_option" in p for p in check_accelerate_yaml(bad_sub, "a", oracle, tmp_path)
    )
    bad_ds = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  stage: 3\n"
    assert any("stage" in p for p in check_accelerate_yaml(bad_ds, "a", oracle, tmp_path))
    bad_top = base + "fsdp_version: 2\n"
    assert any("loader rejects" in p for p in check_accelerate_yaml(bad_top, "a", oracle, tmp_path))
    bad_type = "distributed_type: FSDP2\n"
    assert check_accelerate_yaml(bad_type, "a", oracle, tmp_path)
    bad_mp = "distributed_type: MULTI_GPU\nmixed_precision: bfloat16\n"
    assert check_accelerate_yaml(bad_mp, "a", oracle, tmp_path)
    par = base + "parallelism_config:\n  parallelism_config_dp_shard_size: 2\n"
    assert check_accelerate_yaml(par, "a", oracle, tmp_path) == []

    good = "model_name_or_path: Qwen/Qwen3-0.6B\nuse_vllm: true\nvllm_mode: server\n"
    assert check_trl_yaml(good + "num_processes: 4\nenv:\n  NCCL_DEBUG: INFO\n", "t", ident) == []
    assert check_trl_yaml("model_init_kwargs:\n  use_kernels: true\n", "t", ident) == []
    assert any(
        "vllm_max_prompt_length" in p
        for p in check_trl_yaml(good + "vllm_max_prompt_length: 512\n", "t", ident)
    )
    mixed = "vllm_mode: server\ncompletion_only_loss: true\n"  # GRPO-only + SFT-only keys
    assert any("no single TRL command" in p for p in check_trl_yaml(mixed, "t", ident))
    assert check_trl_yaml("model_init_kwargs:\n  use_liger: true\n", "t", ident)


def test_command_checker(commands):
    def check(line):
        b = Block("c.md", "bash", line + "\n", 1, 0)
        out = []
        for ln, toks, envs in bash_commands(b):
            out += commands.check(toks, f"c.md:{ln}", envs)
        return out

    ok = [
        "accelerate launch --config_file zero3.yaml --num_processes 4 train.py --foo 1",
        "accelerate launch --use_fsdp --fsdp_version 2 --mixed_precision bf16 train.py",
        "trl sft --model_name_or_path Qwen/Qwen3-0.6B --dataset_name trl-lib/Capybara "
        "--use_peft --lora_r 16 --num_processes 2",
        "trl grpo --model_name_or_path Qwen/Qwen3-0.6B --dataset_name x --use_vllm "
        "--vllm_mode server --accelerate_config zero3",
        "trl dpo --config dpo.yaml --accelerate_config my_accelerate.yaml",
        "CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model Qwen/Qwen3-0.6B "
        "--tensor-parallel-size 1 --enable-sleep-mode",
        "vllm serve <model> --data-parallel-size 1 --max-model-len 4096",
        "torchrun --nproc_per_node 2 train.py",
        "trl env",
        'pip install "vllm>=0.22.0,<=0.31.0"',
    ]
    for line in ok:
        assert check(line) == [], line
    bad = {
        "accelerate launch --bogus_flag 1 train.py": "accelerate launch rejects",
        "trl sft --vllm_max_prompt_length 512": "rejects",
        "trl grpo --model_name_or_path m --dataset_name x --num_procs 2": "--num_procs",
        "trl grpo --accelerate_config zero4": "neither a file nor a valid config",
        "trl vllm-serve --model m --bogus-vllm-flag 1": "not in the vllm serve allowlist",
        "vllm serve m --bogus-vllm-flag": "not in the allowlist",
        "trl ppo --model_name_or_path m": "not a TRL 1.16.0 command",
        "NOT_A_REAL_ENV_VAR_XYZ=1 trl env": "NOT_A_REAL_ENV_VAR_XYZ",
        'pip install "vllm>=0.10.2"': "does not match TRL's metadata",
        "python scripts/no_such_script.py --json": "does not exist",
    }
    for line, expect in bad.items():
        problems = check(line)
        assert any(expect in p for p in problems), (line, problems)


def test_requirement_and_version_checks(tmp_path):
    assert check_requirement_text("vllm>=0.22.0,<=0.31.0", "x") == []
    assert check_requirement_text("vllm<=0.31.0,>=0.22.0", "x") == []
    assert check_requirement_text("vllm>=0.22.0", "x")
    assert check_requirement_text("peft>=0.13.0", "x") == []
    assert check_requirement_text("liger-kernel>=0.6.0", "x")
    assert check_requirement_text("torch>=2.0", "x") == []  # not pinned by TRL
    doc = write_doc(tmp_path, "# T\nScope: TRL 1.16.0 with\naccelerate 1.15.0.\n\nTRL 1.0.0 x\n")
    assert scope_line(doc) == (2, "Scope: TRL 1.16.0 with accelerate 1.15.0.")


def test_structure_checkers(tmp_path):
    (tmp_path / "references").mkdir()
    doc = write_doc(
        tmp_path,
        "## Contents\n- [Real](#real)\n- [Gone](#gone)\n[x](missing.md) [y](references/a.md)\n"
        "## Real\nsee /work/main/x and /tmp/y\n",
        "s.md",
    )
    found = {t for _, _, t in links(doc)}
    assert found == {"#real", "#gone", "missing.md", "references/a.md"}
    assert heading_anchors(doc) == {"contents", "real"}
    assert len(ABS_PATH_RE.findall(doc.text)) == 2
    assert not ABS_PATH_RE.search("see trl/scripts/x.py and https://x.io/tmp/a")


def test_json_paths_walk_the_scripts_reports(ident):
    """Paths into the scripts' --json are walked through their real reports, not just matched
    against any string constant in scripts/ (`recommendation.strategies` exists nowhere)."""
    good = [
        "backends.vllm.status",
        "backends.<name>.next_step",
        "strategies.<name>.total_gb",
        "strategies.zero3_offload.fits",
        "recommendation.changes",
        "accelerators.devices[].compute_capability",  # no GPUs here: documented keys only
        "packages.flash-attn.import.status",  # `import` exists only with --imports
        "packages.vllm.version",
        "config.problems",
        "environment.CUDA_VISIBLE_DEVICES",
        "torch_build.cuda",
    ]
    for tok in good:
        assert ident.check_token(tok, "x") == [], tok
    bad = {
        "backends.vllm.state": "no key `state` under `backends.vllm`",
        "backends.vllmx.status": "no key `vllmx`",
        "strategies.<name>.total": "no key `total`",
        "recommendation.strategies": "no key `strategies` under `recommendation`",
        "config.problem": "no key `problem` under `config`",
        "accelerators.devices[].compute_cap": "no key `compute_cap`",
        "strategies.ddp[].total_gb": "not a list",
        "backends.vllm.status.code": "is a value, not an object",
        "packages.vllm.import.state": "no key `state`",
        "environment.NO_SUCH_ENV_VAR_XYZ": "NO_SUCH_ENV_VAR_XYZ",
    }
    for tok, expect in bad.items():
        problems = ident.check_token(tok, "x")
        assert len(problems) == 1 and expect in problems[0], (tok, problems)
    assert ident.check_token("config.json", "x") == []  # a file name, not a JSON path


def test_vllm_window_checker():
    lo, hi = trl_vllm_window()
    assert (lo, hi) == DOCUMENTED_VLLM_WINDOW
    ok = (
        f"TRL 1.16.0 supports vLLM {lo} to {hi}.\nvLLM {lo}–{hi} where vLLM is involved\n"
        f"TRL currently supports vLLM versions from {lo} to {hi}. You have\n"
        "| Supported vLLM: 0.10.2–0.17.1 (v1.0.0), vLLM 0.11.0 to 0.18.0 (v1.2.0) |\n"
        "TRL 1.9.0 supported vLLM 0.11.0 to 0.20.0.\n"
    )
    assert vllm_window_problems(ok, "s.md") == []
    bad = (
        f"supports vLLM {lo} to 0.32.0\nvLLM {lo}–0.32.0 where\n"
        f"vLLM versions from 0.21.0 to {hi}\nTRL 1.16.0 pins vLLM {lo} through 0.30.0\n"
    )
    problems = vllm_window_problems(bad, "s.md")
    assert [p.split(":")[1] for p in problems] == ["1", "2", "3", "4"], problems


def test_table_default_checker(tmp_path, oracle):
    """Stated defaults in tables are compared with the config classes' real defaults."""
    assert split_table_row("| `a\\|b` | `x | y` | c \\| d |") == ["`a|b`", "`x | y`", "c | d"]
    checker = TableDefaultChecker(oracle)
    good = write_doc(
        tmp_path,
        """
        ## Fields

        Defaults are `GRPOConfig`'s in TRL 1.16.0.

        | Field | Default | Note |
        |---|---|---|
        | `vllm_server_port` | `8000` | GOLDConfig's 8001 does not count here |
        | `vllm_mode` | `"colocate"` (since v1.0.0) | |
        | `temperature`, `top_k`, `min_p` | 1.0, 0, None | |
        | `bf16` | True | resolved in __post_init__ |

        | Setting | Default | Consequence |
        |---|---|---|
        | `beta` (GRPO / RLOO) | 0.0 / 0.05 | |
        | `use_vllm` / `vllm_mode` (GRPO, RLOO) | False / `"colocate"` | |
        | `gradient_checkpointing` (every TRL config) | True | |
        | `lora_dropout` | 0.0 | LoraConfig's own default (ModelConfig: 0.05) |
        | `ModelConfig.dtype` (`--dtype`) | `"float32"` | |
        | `some_setting` | a sentence, not a literal | |

        | Field | Trainers | Default |
        |---|---|---|
        | `max_length` | SFT, DPO | 1024 |
        | `packing_strategy` | SFT | `"bfd"` |

        | Trainer | Default |
        |---|---|
        | DPO / KTO | `beta=0.1` |

        | trl vllm-serve flag | Default |
        |---|---|
        | `--port` | 8000 |
        | `--host` | 0.0.0.0 |
        | `--model` | required |
        """,
        "good.md",
    )
    assert checker.check(good) == []
    bad = write_doc(
        tmp_path,
        """
        Defaults are `GRPOConfig`'s.

        | Field | Default | Note |
        |---|---|---|
        | `vllm_server_port` | `8001` | GOLDConfig has 8001, GRPOConfig does not |
        | `temperature`, `top_k` | 1.0, 50 | |
        | `bf16` | False | |

        | Setting | Default |
        |---|---|
        | `beta` (GRPO / RLOO) | 0.0 / 0.04 |
        | `vllm_mode` (GRPO) | `"server"` |
        | `lora_r` | 8 |
        | `packing` (SFT) | `"False"` |

        | Field | Trainers | Default |
        |---|---|---|
        | `max_length` | SFT, DPO | 2048 |

        | Trainer | Default |
        |---|---|
        | DPO / KTO | `beta=0.2` |

        | trl vllm-serve flag | Default |
        |---|---|
        | `--port` | 8001 |
        | `--dtype` | bfloat16 |
        """,
        "bad.md",
    )
    problems = checker.check(bad)
    text = "\n".join(problems)
    for needle in (
        "bad.md:5: table states `vllm_server_port` defaults to `8001`, installed: GRPOConfig: 8000",
        "bad.md:6: table states `top_k` defaults to 50",
        "bad.md:7: table states `bf16`",
        "bad.md:11: table states `beta` defaults to 0.04, installed: RLOOConfig: 0.05",
        "bad.md:12: table states `vllm_mode`",
        "bad.md:13: table states `lora_r` defaults to 8",
        "bad.md:14: table states `packing`",
        "bad.md:18: table states `max_length` defaults to 2048",
        "bad.md:22: table states `beta` defaults to 0.2",
        "bad.md:26: table states `port` defaults to 8001",
        "bad.md:27: table states `dtype` defaults to bfloat16",
    ):
        assert needle in text, (needle, text)
    assert len(problems) == 11, text  # one per bad row


# =============================================================================================
# Real-doc tests
# =============================================================================================

DOC_PATHS = doc_paths()


def require_doc(relpath: str):
    if not (REPO / relpath).is_file():
        pytest.skip(f"{relpath} is not written yet")
    return load_doc(relpath)


def existing_docs():
    return [p for p in DOC_PATHS if (REPO / p).is_file()]


def test_references_exist_once_skill_exists():
    if not SKILL_MD.is_file():
        pytest.skip("SKILL.md is not written yet")
    present = [p for p in EXPECTED_REFERENCES if (REPO / p).is_file()]
    assert present, f"SKILL.md exists but none of {EXPECTED_REFERENCES} does"


@pytest.fixture(scope="session", autouse=True)
def python_results(tmp_path_factory):
    """All docs' python blocks in ONE subprocess (one `import trl`), started at session start
    so it runs while the oracle is built in-process; collected on first use."""
    blocks = [b for rel in existing_docs() for b in load_doc(rel).blocks if b.lang == "python"]
    handle = start_python_blocks(blocks, tmp_path_factory.mktemp("doc_blocks")) if blocks else None
    cache: dict[str, list] = {}

    def get(rel):
        if handle is None:
            return []
        if not cache:
            for r in collect_python_blocks(handle):
                cache.setdefault(r["block"].path, []).append(r)
            cache.setdefault("", [])
        return cache.get(rel, [])

    return get


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_fence_languages(rel):
    doc = require_doc(rel)
    bad = [
        f"{b.where}: fence language {b.lang or '(none)'!r}; use one of "
        f"{sorted(ALLOWED_FENCE_LANGS)} (python/yaml/bash are executed or parsed)"
        for b in doc.blocks
        if b.lang not in ALLOWED_FENCE_LANGS
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_python_blocks_run(rel, python_results):
    require_doc(rel)
    results = python_results(rel)
    if not results:
        pytest.skip(f"{rel} has no python blocks")
    failures = [msg for r in results if (msg := judge_block(r))]
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_yaml_blocks(rel, oracle, ident, tmp_path):
    doc = require_doc(rel)
    problems = []
    for b in doc.blocks:
        if b.lang != "yaml":
            continue
        if is_accelerate_yaml(b.text):
            problems += check_accelerate_yaml(b.text, b.where, oracle, tmp_path)
        else:
            problems += check_trl_yaml(b.text, b.where, ident)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_bash_blocks(rel, commands):
    doc = require_doc(rel)
    problems = []
    for b in doc.blocks:
        if b.lang != "bash":
            continue
        for line, toks, envs in bash_commands(b):
            problems += commands.check(toks, f"{rel}:{line}", envs)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_backticked_identifiers(rel, ident):
    doc = require_doc(rel)
    problems = ident_problems(ident, doc)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_requirement_specifiers_match_trl_metadata(rel):
    doc = require_doc(rel)
    problems = []
    skipped = releases_lines(doc)
    for span in doc.spans:
        if span.line in skipped:
            continue  # where a troubleshooting entry applies; test_troubleshooting.py checks it
        problems += check_requirement_text(span.text, span.where)
    for b in doc.blocks:
        for i, line in enumerate(b.text.splitlines()):
            for q in re.findall(r"""["']([^"']+)["']""", line):
                if b.lang in ("bash", "text", "toml"):
                    problems += check_requirement_text(q, f"{rel}:{b.line + i}")
    assert not problems, "\n".join(problems)


def releases_lines(doc) -> set:
    """Lines of troubleshooting entries' `- **Releases**:` fields: they state the releases an
    entry applies to (older TRL, vLLM, DeepSpeed...), not what to install."""
    return {line for line, text in doc.prose if text.startswith("- **Releases**: ")}


def test_vllm_window_matches_trl_metadata():
    from packaging.specifiers import SpecifierSet

    lo, hi = DOCUMENTED_VLLM_WINDOW
    expected = SpecifierSet(f">={lo},<={hi}")
    pins = [spec for spec, extra in trl_requirements().get("vllm", []) if extra == "vllm"]
    assert pins == [expected], (
        f"TRL {installed_version('trl')} declares vllm{pins} for its `vllm` extra; the docs state "
        f"the window {lo}..{hi}. Update the docs and DOCUMENTED_VLLM_WINDOW."
    )
    docs = existing_docs()
    if not docs:
        pytest.skip("no docs written yet")
    text = "\n".join((REPO / p).read_text() for p in docs)
    for v in DOCUMENTED_VLLM_WINDOW:
        assert v in text, f"no doc states the vLLM window bound {v}"


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_vllm_window_statements(rel):
    """Every prose statement of the vLLM window (not only `vllm>=...` specifiers) is TRL's."""
    require_doc(rel)
    problems = vllm_window_problems((REPO / rel).read_text(encoding="utf-8"), rel)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_table_defaults_match_installed(rel, oracle):
    """`| `field` | <default> |` rows in tables with a Default column state the real default."""
    doc = require_doc(rel)
    problems = TableDefaultChecker(oracle).check(doc)
    assert not problems, "\n".join(problems)


def test_stack_is_the_pinned_one():
    assert installed_version("trl") == "1.16.0"
    assert installed_version("accelerate") == "1.15.0"


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_scope_line_names_installed_versions(rel):
    doc = require_doc(rel)
    found = scope_line(doc)
    assert found, f"{rel}: no scope line naming `TRL {installed_version('trl')}`"
    lineno, line = found
    assert f"TRL {installed_version('trl')}" in line, (
        f"{rel}:{lineno}: scope is not the installed TRL"
    )
    problems = []
    for pkg, ver in VERSION_RE.findall(line):
        have = installed_version(VERSION_PKGS[pkg])
        if ver != have and not have.startswith(ver + "."):
            problems.append(f"{rel}:{lineno}: scope line says {pkg} {ver}, installed is {have}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_contents_section(rel):
    doc = require_doc(rel)
    if not rel.startswith("references/") or len(doc.lines) <= 100:
        pytest.skip("only references over 100 lines need ## Contents")
    head = [ln.strip() for ln in doc.lines[:15]]
    assert "## Contents" in head, f"{rel}: ## Contents must be within the first 15 lines"
    start = head.index("## Contents")
    anchors = heading_anchors(doc)
    entries = []
    for ln in doc.lines[start + 1 :]:
        if ln.startswith("#"):
            break
        entries += re.findall(r"\]\(#([^)]+)\)", ln)
    assert entries, f"{rel}: ## Contents has no [Title](#anchor) links"
    missing = [a for a in entries if a not in anchors]
    assert not missing, f"{rel}: Contents anchors with no heading: {missing}"
    h2 = {github_slug(ln[3:]) for _, ln in doc.prose if ln.startswith("## ")} - {"contents"}
    unlisted = sorted(h2 - set(entries))
    assert not unlisted, f"{rel}: H2 sections missing from ## Contents: {unlisted}"


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_links_resolve(rel):
    doc = require_doc(rel)
    base = (REPO / rel).parent
    anchors = heading_anchors(doc)
    problems = []
    for line, _, target in links(doc):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        if not path:
            if anchor not in anchors:
                problems.append(f"{rel}:{line}: anchor #{anchor} matches no heading")
            continue
        if path.startswith("/") or "\\" in path:
            problems.append(f"{rel}:{line}: link {target} must be relative with forward slashes")
            continue
        dest = (base / path).resolve()
        # Case-sensitive: compare against the real directory listing.
        if not dest.exists() or dest.name not in {p.name for p in dest.parent.iterdir()}:
            problems.append(f"{rel}:{line}: link target {target} does not exist")
        elif REPO.resolve() not in dest.parents and dest != REPO.resolve():
            problems.append(f"{rel}:{line}: link {target} leaves the skill directory")
        if rel.startswith("references/") and re.search(r"(^|/)references/[^/]+\.md$", str(dest)):
            problems.append(f"{rel}:{line}: references must not link other references ({target})")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", DOC_PATHS)
def test_no_machine_absolute_paths(rel):
    doc = require_doc(rel)
    hits = [
        f"{rel}:{i}: {ln.strip()}" for i, ln in enumerate(doc.lines, 1) if ABS_PATH_RE.search(ln)
    ]
    assert not hits, "machine-absolute paths:\n" + "\n".join(hits)


def test_allowlisted_names_exist_in_installed_sources():
    names = list(NAME_ALLOWLIST) + list(ENV_ALLOWLIST) + list(FLAG_ALLOWLIST)
    found = grep_site_packages(names)
    missing = [n for n, where in found.items() if where is None and n not in ENV_ALLOWLIST]
    assert not missing, f"allowlisted names not found in site-packages (stale?): {missing}"
    for table in (NAME_ALLOWLIST, ENV_ALLOWLIST, FLAG_ALLOWLIST):
        assert all(isinstance(r, str) and len(r) > 10 for r in table.values()), table


def test_allowlists_are_needed(oracle):
    """An allowlist entry that the oracle already knows is noise: remove it."""
    redundant = [n for n in NAME_ALLOWLIST if n in oracle.names or n in oracle.values]
    redundant += [n for n in ENV_ALLOWLIST if n in oracle.env_tokens]
    redundant += [n for n in FLAG_ALLOWLIST if n in oracle.flags]
    assert not redundant, f"allowlisted but already known to the oracle: {redundant}"
