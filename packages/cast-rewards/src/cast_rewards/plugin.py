"""Entry point of cast-rewards (``[project.entry-points.cast] rewards = "cast_rewards.plugin"``).

Only names and lazy factories live here, so loading the plugin imports nothing heavy.
``clip-score`` takes its image embeddings from the ``clip`` embedder that cast-windows registers
(a plugin found at run time through the registry, not an import: install cast-windows and
``cast-rewards[clip]``).
"""

from cast_core import hookimpl, lazy


@hookimpl
def register_atom_decomposers(register):
    register(
        "template",
        lazy("cast_rewards.template:TemplateDecomposer"),
        description="GenEval 2-style prompts -> scene graphs by grammar (open vocabulary)",
    )
    register(
        "geneval2",
        lazy("cast_rewards.geneval2:GenEval2Decomposer"),
        description="GenEval 2's own atoms and questions from your geneval2_data.jsonl (data=FILE), parents inferred",
    )
    register(
        "auto",
        lazy("cast_rewards.auto:AutoDecomposer"),
        description="template when it parses, else llm (llm_path=MODEL), else one prompt-level atom; "
        "path kept per prompt",
    )
    register(
        "llm",
        lazy("cast_rewards.llm:LLMDecomposer"),
        description="a local chat LLM writes the scene graph (path=MODEL); validated, retried once, cached on disk",
    )


@hookimpl
def register_atom_scorers(register):
    register(
        "soft-tifa",
        lazy("cast_rewards.soft_tifa:SoftTifaScorer"),
        description="GenEval 2's Soft-TIFA on a Qwen3-VL judge (scorer_kwargs.path), attention heatmaps per atom",
    )
    register(
        "clip-score",
        lazy("cast_rewards.baselines:ClipScoreScorer"),
        description="scalar baseline: open_clip image-prompt cosine, one score for every atom (Flow-GRPO comparisons)",
    )
    register(
        "pickscore",
        lazy("cast_rewards.baselines:PickScoreScorer"),
        description="scalar baseline: PickScore / 26 from a local checkpoint (path=), as Flow-GRPO normalises it",
    )
    register(
        "remote",
        lazy("cast_rewards.remote:RemoteScorer"),
        description="a judge served by `cast serve-scorer` on another GPU or node (scorer_kwargs.url)",
    )


@hookimpl
def register_commands(cli):
    from cast_rewards.commands import serve_scorer_command

    cli.add_command(serve_scorer_command)
