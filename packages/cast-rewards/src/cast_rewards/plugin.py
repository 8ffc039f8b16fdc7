"""Entry point of cast-rewards (`[project.entry-points.cast] rewards = "cast_rewards.plugin"`).

Registers no components yet: an unbuilt component is simply not registered. When components
land, this module names their factories with `cast_core.lazy` and keeps heavy imports out.
Coming: the `template` decomposer (shapes-world issue, part 1), then `geneval2`, `llm` and the `soft-tifa` scorer.
"""
