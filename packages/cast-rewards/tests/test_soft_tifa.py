"""The soft-tifa scorer on a tiny random Qwen3-VL (cast_rewards.tiny_vlm): GenEval 2's soft score
exactly, batching and padding neutral, attention rows equal to eager attention, heatmaps on the
right image cells, the AtomScorer contract, and loading from a saved directory."""

import pytest
import torch

from cast_core.testing.conformance import AtomScorerConformance
from cast_rewards.soft_tifa import NO, SoftTifaScorer, accepted_answers, question_for
from cast_rewards.template import TemplateDecomposer
from cast_rewards.tiny_vlm import tiny_qwen3_vl

DECOMPOSE = TemplateDecomposer().decompose
PROMPTS = ["two red circles left of a blue square", "a green cat"]


def scorer(**options):
    model, processor = tiny_qwen3_vl()
    options.setdefault("device", "cpu")
    return SoftTifaScorer(None, model=model, processor=processor, **options)


def images(seed=0, size=(32, 48)):
    return torch.rand(len(PROMPTS), 3, *size, generator=torch.Generator().manual_seed(seed))


def test_accepted_answers_are_geneval2s():
    graph = DECOMPOSE("three red cats")
    count = next(a for a in graph.atoms if a.kind == "count")
    assert accepted_answers(count) == ("three", "Three", " three", " Three", "3", " 3")
    assert accepted_answers(graph.atoms[0]) == ("Yes", "yes", " yes", " Yes")
    assert question_for(graph.atoms[0]) == "Are there any cats in the image? Answer in one word."


def test_soft_score_is_the_first_token_mass_of_generate():
    """GenEval 2 reads generate(max_new_tokens=1, output_scores=True).scores[0]; ours is one
    forward pass: the same number."""
    judge = scorer()
    graphs = [DECOMPOSE(p) for p in PROMPTS]
    imgs = images()
    got = judge.score(imgs, graphs)
    from cast_rewards.images import to_pil as _to_pil

    for i, graph in enumerate(graphs):
        for k, atom in enumerate(graph.atoms):
            enc = judge._encode([_to_pil(imgs[i])], [question_for(atom)])
            out = judge.model.generate(
                **enc, max_new_tokens=1, do_sample=False, output_scores=True, return_dict_in_generate=True
            )
            probs = out.scores[0][0].float().softmax(-1)
            ids = [judge.tokenizer.encode(a, add_special_tokens=False)[0] for a in accepted_answers(atom)]
            expected = float(probs[list(dict.fromkeys(ids))].sum())
            assert abs(float(got.scores[i][k]) - expected) <= 1e-6, (atom.question, expected)


@pytest.mark.parametrize("prefix_reuse", [True, False], ids=["prefix-cache", "whole-left-padded"])
def test_batching_and_padding_change_no_score(prefix_reuse):
    graphs = [DECOMPOSE(p) for p in PROMPTS]
    imgs = images(1)
    one = scorer(batch_size=1, prefix_reuse=prefix_reuse).score(imgs, graphs)
    many = scorer(batch_size=16, prefix_reuse=prefix_reuse).score(imgs, graphs)
    for a, b in zip(one.scores, many.scores):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # a different image really changes the scores (the comparison can fail)
    other = scorer(batch_size=16).score(images(2), graphs)
    assert any(float((a - b).abs().max()) > 1e-6 for a, b in zip(other.scores, many.scores))


def test_renormalize_divides_by_yes_plus_no():
    judge = scorer(renormalize=True)
    graph = DECOMPOSE("a green cat")
    img = images()[:1]
    plain = scorer().score(img, [graph]).scores[0]
    from cast_rewards.images import to_pil as _to_pil

    enc = judge._encode([_to_pil(img[0])], [question_for(graph.atoms[0])])
    probs = judge.model(**enc).logits[0, -1].float().softmax(-1)
    yes, no = float(plain[0]), float(probs[judge._ids(NO)].sum())
    got = judge.score(img, [graph]).scores[0]
    assert abs(float(got[0]) - yes / (yes + no)) <= 1e-6
    count = [k for k, a in enumerate(graph.atoms) if a.kind == "count"][0]
    assert abs(float(got[count]) - float(plain[count])) <= 1e-7  # counts are never renormalised


def test_captured_rows_equal_eager_attention():
    """The hooks recompute the answer position's attention without switching the model to eager
    attention; eager's own output_attentions must agree."""
    judge = scorer()
    graph = DECOMPOSE(PROMPTS[0])
    from cast_rewards.images import to_pil as _to_pil

    pil = [_to_pil(images()[0])] * 2
    enc = judge._encode(pil, [question_for(graph.atoms[0]), question_for(graph.atoms[2])])  # two lengths: padding
    assert not bool(enc["attention_mask"].all())
    rows = {}
    last = torch.full((2,), enc["input_ids"].shape[1] - 1)
    with torch.no_grad(), judge._capture(enc["attention_mask"], last, rows):
        judge.model(**enc)
    judge.model.set_attn_implementation("eager")
    with torch.no_grad():
        eager = judge.model(**enc, output_attentions=True).attentions
    assert judge.band == [2, 3]
    for i in judge.band:
        torch.testing.assert_close(rows[i], eager[i][:, :, -1].float().mean(1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("size,cell", [((32, 32), 5), ((32, 48), 7), ((48, 32), 10)])
def test_heatmap_lands_on_the_planted_image_token(size, cell):
    """Plant all attention on the `cell`-th image token (row-major on the merged grid): the map's
    peak must be that cell, at its place in the image, for square and non-square images."""
    judge = scorer(sink_factor=0, baseline_question=None, prefix_reuse=False)  # the prefix path equals it (below)
    real = judge._capture

    def planted(mask, query, rows):
        ctx = real(mask, query, rows)

        class Plant:
            def __enter__(self):
                ctx.__enter__()

            def __exit__(self, *exc):
                ctx.__exit__(*exc)
                for i in rows:
                    row = torch.zeros_like(rows[i])
                    for r in range(row.shape[0]):
                        where = (judge._last_ids[r] == judge.image_token_id).nonzero()[:, 0]
                        row[r, where[cell]] = 1.0
                    rows[i] = row

        return Plant()

    original_encode = judge._encode

    def remember(images, questions):
        enc = original_encode(images, questions)
        judge._last_ids = enc["input_ids"]
        return enc

    judge._encode, judge._capture = remember, planted
    graph = DECOMPOSE("a green cat")
    out = judge.score(torch.rand(1, 3, *size), [graph], heatmaps=True)
    maps = out.heatmaps[0]
    h, w = size[0] // 8, size[1] // 8  # 4 px patches merged 2x2: one token per 8x8 pixels
    row, col = divmod(cell, w)
    assert maps.shape == (len(graph.atoms), *size)
    coarse = torch.nn.functional.avg_pool2d(maps[None], 8)[0]  # back to the token grid
    assert coarse.shape[-2:] == (h, w)
    for m in coarse:
        assert divmod(int(m.flatten().argmax()), w) == (row, col)


def test_the_image_prefix_encoded_once_gives_the_same_scores_and_maps():
    """Prefix reuse (the image's tokens run once into a KV cache, each question against a copy)
    changes nothing but the cost: scores and heatmaps equal those of whole sequences."""
    graphs = [DECOMPOSE(p) for p in PROMPTS]
    imgs = images(4, (48, 32))
    whole = scorer(prefix_reuse=False, batch_size=5).score(imgs, graphs, heatmaps=True)
    reused = scorer(prefix_reuse=True, batch_size=3).score(imgs, graphs, heatmaps=True)
    for a, b in zip(whole.scores, reused.scores):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    for a, b in zip(whole.heatmaps, reused.heatmaps):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_sinks_and_the_generic_baseline_are_options():
    graph = DECOMPOSE("a green cat")
    img = images()[:1]
    plain = scorer(sink_factor=0, baseline_question=None).score(img, [graph], heatmaps=True).heatmaps[0]
    relative = scorer(sink_factor=0).score(img, [graph], heatmaps=True).heatmaps[0]
    assert float(plain.max()) == pytest.approx(1.0, abs=1e-5) and float(plain.min()) >= 0
    assert float((plain - relative).abs().max()) > 1e-3  # dividing by the generic map changes the map


def test_bad_layer_band_is_refused():
    with pytest.raises(ValueError, match="heatmap_layers must be fractions"):
        scorer(heatmap_layers=(0.9, 0.2))


class TestSoftTifaConformance(AtomScorerConformance):
    def make_scorer(self):
        return scorer()

    def make_inputs(self):
        return images(3), [DECOMPOSE(p) for p in PROMPTS]


def test_loads_from_a_saved_directory(tmp_path):
    model, processor = tiny_qwen3_vl()
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    graphs = [DECOMPOSE(p) for p in PROMPTS]
    imgs = images()
    loaded = SoftTifaScorer(str(tmp_path), device="cpu").score(imgs, graphs)
    built = scorer().score(imgs, graphs)
    for a, b in zip(loaded.scores, built.scores):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    with pytest.raises(FileNotFoundError, match="cannot load a Qwen3-VL judge from"):
        SoftTifaScorer(str(tmp_path / "missing"), device="cpu")


def test_cast_score_with_a_saved_judge(tmp_path):
    import json
    import subprocess
    import sys

    from PIL import Image

    model, processor = tiny_qwen3_vl()
    model.save_pretrained(tmp_path / "judge")
    processor.save_pretrained(tmp_path / "judge")
    Image.fromarray((torch.rand(32, 48, 3).numpy() * 255).astype("uint8")).save(tmp_path / "img.png")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cast_core.cli import main; main()",
            "score",
            str(tmp_path / "img.png"),
            "--prompt",
            "two red circles left of a blue square",
            "--scorer",
            "soft-tifa",
            "--set",
            f"scorer_kwargs.path={tmp_path / 'judge'}",
            "--set",
            'scorer_kwargs.device="cpu"',
            "--json",
            "--heatmaps",
            str(tmp_path / "maps"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(record["atoms"]) == 7 and all(0 <= a["score"] <= 1 for a in record["atoms"])
    assert (tmp_path / "maps" / "img.heatmaps.png").is_file()
    bad = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cast_core.cli import main; main()",
            "score",
            str(tmp_path / "img.png"),
            "--prompt",
            "a cat",
            "--scorer",
            "soft-tifa",
            "--set",
            "path=x",
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "this command takes scorer_kwargs.KEY=VALUE" in bad.stderr


def test_a_training_step_with_the_judges_heatmaps(tmp_path):
    """CAST's spatial projector trained on soft-tifa's per-atom heatmaps: one step of the fake
    policy with the tiny judge, loaded by name from a saved directory as a run would."""
    from cast_core.config import TrainConfig
    from cast_core.trainer import Trainer

    model, processor = tiny_qwen3_vl()
    model.save_pretrained(tmp_path / "judge")
    processor.save_pretrained(tmp_path / "judge")
    cfg = TrainConfig(
        policy="fake",
        scorer="soft-tifa",
        scorer_kwargs={"path": str(tmp_path / "judge"), "device": "cpu"},
        decomposer="template",
        projector="spatial",
        prompts=["a red cat", "two blue dogs"],
        group_size=2,
        prompts_per_step=2,
        num_steps=4,
        window_start=0,
        window_size=2,
        steps=1,
        sample_every=0,
    ).validate()
    trainer = Trainer(cfg, tmp_path / "run", log=lambda m: None)
    trainer.run()
    assert trainer.counters["scorer_failures"] == 0 and trainer.step == 1


def test_max_pixels_fixes_the_number_of_image_tokens():
    judge = scorer(max_pixels=16 * 16)
    from cast_rewards.images import to_pil as _to_pil

    enc = judge._encode([_to_pil(torch.rand(3, 64, 64))], ["Is it red?"])
    assert int((enc["input_ids"] == judge.image_token_id).sum()) == 4  # 16x16 px: 4x4 patches of 4 px, merged 2x2
