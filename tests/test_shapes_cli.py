"""End to end through the installed CLI: render a world prompt, then score it with the oracle
and the template decomposer (two different packages meeting through the registry)."""

import json

from conftest import run_cast


def test_render_then_score(tmp_path):
    prompt = "two red circles left of a blue square"
    image = tmp_path / "scene.png"
    assert run_cast("shapes", "render", prompt, "--out", str(image)).returncode == 0
    good = run_cast("score", str(image), "--prompt", prompt, "--json", "--heatmaps", str(tmp_path / "maps"))
    assert good.returncode == 0, good.stderr
    record = json.loads(good.stdout)
    assert [a["kind"] for a in record["atoms"]] == [
        "object",
        "count",
        "attribute",
        "object",
        "count",
        "attribute",
        "relation",
    ]
    assert all(a["score"] >= 0.5 for a in record["atoms"]) and record["gm"] > 0.9
    assert (tmp_path / "maps" / "scene.heatmaps.png").is_file()
    wrong = json.loads(
        run_cast("score", str(image), "--prompt", "three red circles right of a blue square", "--json").stdout
    )
    verdicts = {a["kind"] + str(i): a["score"] >= 0.5 for i, a in enumerate(wrong["atoms"])}
    assert verdicts == {
        "object0": True,
        "count1": False,
        "attribute2": True,
        "object3": True,
        "count4": True,
        "attribute5": True,
        "relation6": False,
    }


def test_decompose_json_matches_the_design_contract():
    out = run_cast("decompose", "two red circles left of a blue square", "--json")
    graph = json.loads(out.stdout)
    assert graph["atoms"][6] == {
        "id": "a7",
        "kind": "relation",
        "entity": "e1",
        "value": "left of",
        "other": "e2",
        "skill": "position",
        "parents": ["a1", "a4"],
        "question": "Are the circles left of the square?",
    }


def test_heatmaps_of_two_images_with_one_stem_are_both_kept(tmp_path):
    prompt = "two red circles left of a blue square"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        assert run_cast("shapes", "render", prompt, "--out", str(tmp_path / d / "scene.png")).returncode == 0
    out = run_cast(
        "score",
        str(tmp_path / "a" / "scene.png"),
        str(tmp_path / "b" / "scene.png"),
        "--prompt",
        prompt,
        "--json",
        "--heatmaps",
        str(tmp_path / "maps"),
    )
    assert out.returncode == 0, out.stderr
    written = [json.loads(line)["heatmaps"] for line in out.stdout.splitlines()]
    assert len(set(written)) == 2 and sorted(p.name for p in (tmp_path / "maps").iterdir()) == [
        "scene-2.heatmaps.png",
        "scene.heatmaps.png",
    ]
