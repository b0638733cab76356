"""The scripts' shared pieces (private: the commands are the scripts next to this folder).

Layout, one concern per module:
  versions         PEP 440 subset: parse, order, compare against specifiers
  cli              exit codes, the one-line argument parser, the entry wrapper, text wrapping
  files            reading the user's files: text, JSON, YAML (with a built-in fallback)
  backend_rules    knowledge: version/hardware rules per release, what each backend needs
  config_rules     knowledge: rules for an accelerate launch configuration
  metadata         facts: installed distributions and torch's build, from metadata only
  accelerators     facts: the accelerator platform and the devices this process will see
  environment      facts: backend-related environment variables, redacted
  probes           facts that may hang: child processes and HTTP, each with a deadline
  nvml_probe       run in a child by probes: NVML facts
  import_probe     run in a child by probes: import one package
  facts            facts: collected here, or loaded from a file recorded elsewhere
  verdicts         judge: backend verdicts and config findings, a pure function of the facts
  check_report     render: the check script's report as JSON or text
  model_shape      model facts: exact parameter counts and LoRA targets from config.json
  activations      model facts: bytes saved for backward per decoder layer, by architecture
  memory           judge: per-GPU memory per strategy and the least invasive plan that fits
  troubleshooting  knowledge: references/troubleshooting.md parsed into entries
  diagnosis        judge: the troubleshooting entries a log matches, ranked
  launch_tables    knowledge: TRL/accelerate/torchrun argument tables, TRL's shipped configs
  arg_parsers      TRL's and accelerate's parsers rebuilt from launch_tables (no import)
  trl_args         a TRL command line parsed: the table's parser, or TRL itself in a child
  trl_probe        run in a child by trl_args: TRL's parser and configs at a world size
  launch           facts: a planned COMMAND resolved as trl/accelerate/torchrun will run it
  model_source     facts: a model's config.json from a local folder or the local HF cache
  trl_batch        knowledge: TRL's generation-batch rules for GRPO/RLOO, on plain numbers
  plan_rules       knowledge: rules for a planned TRL run (world size, vLLM, PEFT, nodes)
  plan             judge: the preflight's findings for a resolved plan
  plan_report      render: the preflight's report as JSON or text
"""
