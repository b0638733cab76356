"""TRL 1.16.0's generation-batch rules for the trainers that sample groups of completions (GRPO,
RLOO), on plain numbers: GRPOConfig/RLOOConfig.__post_init__ (trl/trainer/grpo_config.py:1091-1139,
rloo_config.py alike). The estimator and the preflight both ask here; the messages are TRL's."""

from __future__ import annotations

GROUPED_TRAINERS = ("grpo", "rloo")
# GRPOConfig.num_generations = 8, RLOOConfig.num_generations = 2
DEFAULT_NUM_GENERATIONS = {"grpo": 8, "rloo": 2}


def generation_batch(
    per_device: int,
    world: int,
    accumulation: int = 1,
    generation_batch_size: int | None = None,
    steps_per_generation: int | None = None,
) -> int:
    """Completions generated at once over all processes (generation_batch_size as TRL sets it)."""
    if generation_batch_size is not None:
        return generation_batch_size
    return per_device * world * (steps_per_generation or accumulation)


def minimum_problem(trainer: str, num_generations: int) -> str | None:
    if num_generations >= 2:
        return None
    return (
        f"{trainer.upper()} requires at least 2 generations per prompt to calculate the advantages. "
        f"You provided {num_generations}, which is less than the minimum required."
    )


def batch_problems(
    per_device: int,
    world: int,
    num_generations: int | None,
    accumulation: int = 1,
    generation_batch_size: int | None = None,
    steps_per_generation: int | None = None,
) -> list:
    """[(check, TRL's message)] the config raises at `world` processes, in TRL's order: "both"
    (the two batch settings at once), "global" (generation batch vs the global batch), "groups"
    (generation batch vs num_generations)."""
    if generation_batch_size is not None and steps_per_generation is not None:
        return [(
            "both",
            "'generation_batch_size' and 'steps_per_generation' can not be both configured at the "
            "same time",
        )]  # fmt: skip
    found = []
    global_batch = per_device * world
    if generation_batch_size is not None and generation_batch_size % global_batch:
        found.append((
            "global",
            f"generation_batch_size ({generation_batch_size}) must be divisible by the global "
            f"batch size ({global_batch}).",
        ))  # fmt: skip
    batch = generation_batch(
        per_device, world, accumulation, generation_batch_size, steps_per_generation
    )
    if num_generations and batch % num_generations:
        found.append((
            "groups",
            f"generation_batch_size ({batch}) must be divisible by num_generations "
            f"({num_generations}).",
        ))  # fmt: skip
    return found


def eval_problem(eval_batch: int, world: int, eval_generations: int | None) -> str | None:
    if not eval_generations or (eval_batch * world) % eval_generations == 0:
        return None
    return (
        f"The global eval batch size ({eval_batch} * {world}) must be divisible by the number of "
        f"generations used for evaluation ({eval_generations})."
    )
