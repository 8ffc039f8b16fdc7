"""cast-rewards: decomposers (template, geneval2, llm) and atom scorers (soft-tifa, clip baselines)."""
