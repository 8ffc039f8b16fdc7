"""The learned shapes judge end to end (issue 26, first part): trained a few steps from scratch,
resumed, exported as a Qwen3-VL checkpoint directory, and loaded by cast-rewards' soft-tifa
unchanged, which scores world images with it and draws heatmaps on its 4 × 4 token grid."""

import torch

from cast_shapes.judge_data import heldout_examples
from cast_shapes.judge_model import build_processor
from cast_shapes.judge_train import batch_for_step, encode, export, train


def test_train_resume_export_and_soft_tifa_loads_it(tmp_path):
    from cast_rewards.soft_tifa import SoftTifaScorer
    from cast_shapes.grammar import graph_for_prompt

    work = tmp_path / "work"
    train(work, 2, batch=8, eval_every=2, log=lambda m: None)
    train(work, 3, batch=8, eval_every=1, log=lambda m: None)  # resumes at step 2
    assert torch.load(work / "state.pt", weights_only=True)["step"] == 3
    judge = export(work, tmp_path / "shapes-judge")
    scorer = SoftTifaScorer(path=str(judge), device="cpu", torch_dtype=torch.float32)
    e = heldout_examples(2)[0]
    g = graph_for_prompt(e.prompt)
    out = scorer.score(torch.from_numpy(e.image).float()[None] / 255, [g], heatmaps=True)
    assert out.scores[0].shape == (len(g.atoms),) and bool(((out.scores[0] >= 0) & (out.scores[0] <= 1)).all())
    assert out.heatmaps[0].shape == (len(g.atoms), 32, 32)
    # the registered `shapes-judge` scorer is soft-tifa on the shipped directory (here: this one)
    import cast_shapes.judge_scorer as shipped
    from cast_core.registry import get_atom_scorer

    shipped_dir = shipped.JUDGE_DIR
    try:
        shipped.JUDGE_DIR = judge
        again = get_atom_scorer("shapes-judge").score(torch.from_numpy(e.image).float()[None] / 255, [g])
        assert torch.allclose(again.scores[0], out.scores[0], atol=1e-6)
    finally:
        shipped.JUDGE_DIR = shipped_dir


def test_shapes_judge_says_when_its_weights_are_missing(tmp_path, monkeypatch):
    import pytest

    import cast_shapes.judge_scorer as shipped
    from cast_core.config import ConfigError
    from cast_core.registry import get_atom_scorer

    monkeypatch.setattr(shipped, "JUDGE_DIR", tmp_path / "none")
    with pytest.raises(ConfigError, match="no trained shapes judge in .* `cast shapes train-judge --export DIR`"):
        get_atom_scorer("shapes-judge")


def test_one_token_per_8_pixels_and_batches_are_reproducible():
    processor = build_processor()
    enc = encode(processor, batch_for_step(0, 7, 4))
    assert enc["image_grid_thw"].tolist() == [[1, 8, 8]] * 4  # 8x8 patches of 4 px, merged 2x2: 4x4 tokens
    image_tokens = (enc["input_ids"] == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum(1)
    assert image_tokens.tolist() == [16] * 4
    assert "[UNK]" not in processor.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    a, b = batch_for_step(0, 7, 16), batch_for_step(0, 7, 16)
    assert [(x.prompt, x.question, x.answer) for x in a] == [(x.prompt, x.question, x.answer) for x in b]


def test_learning_rate_warms_up_then_decays_linearly_to_zero():
    from cast_shapes.judge_train import learning_rate

    assert learning_rate(0, 1000, 1e-3) == 1e-3 / 200 and learning_rate(199, 1000, 1e-3) == 1e-3
    assert learning_rate(999, 1000, 1e-3) == 1e-3  # constant without decay_from
    assert learning_rate(600, 1000, 1e-3, decay_from=600) == 1e-3
    assert abs(learning_rate(800, 1000, 1e-3, decay_from=600) - 0.5e-3) < 1e-15
    assert abs(learning_rate(999, 1000, 1e-3, decay_from=600) - 1e-3 / 400) < 1e-15


def test_the_shipped_judge_answers_held_out_questions_far_above_the_priors():
    """The shipped weights as saved (processor included), on 40 held-out scenes it never saw:
    measured 0.989 object, 0.918 count, 0.747 attribute, 0.806 relation; the bounds leave room
    for another CPU's rounding and fail for an untrained or mismatched judge (priors 0.82 / 0.30
    / 0.59 / 0.59)."""
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    from cast_shapes.judge_scorer import JUDGE_DIR
    from cast_shapes.judge_train import accuracy

    model = Qwen3VLForConditionalGeneration.from_pretrained(JUDGE_DIR, dtype=torch.float32)
    acc = accuracy(model, AutoProcessor.from_pretrained(JUDGE_DIR), heldout_examples(40, seed=7))
    assert acc["object"] >= 0.95 and acc["count"] >= 0.85 and acc["attribute"] >= 0.7 and acc["relation"] >= 0.7, acc
