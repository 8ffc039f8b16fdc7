"""benchmarks/credit_gradient.py: the analysis ranks credits by the signal their gradients carry
(checked on synthetic gradients whose signal is known), and the smoke run samples, differentiates
and analyses every objective and credit end to end, resumably."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import load_benchmark

CREDITS = ("reference", "scalar", "spatial", "spatial-degraded", "spatial-centred")


def synthetic_groups(script, n_groups: int = 64, dim: int = 400):
    """Per group and credit, ``signal · u + noise`` (noise of norm ~1): the spatial credit carries
    the most signal, the degraded one none; returns the groups and the true direction ``u``."""
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(dim, generator=gen)
    u /= u.norm()
    signal = {"reference": 0.3, "scalar": 0.3, "spatial": 0.8, "spatial-degraded": 0.0, "spatial-centred": 0.5}
    mats = {c: signal[c] * u + torch.randn(n_groups, dim, generator=gen) / math.sqrt(dim) for c in CREDITS}
    cross, gram = script.products(mats, chunk=128)
    groups = script.Groups(
        keys=[(i // 8, i % 8) for i in range(n_groups)],
        atoms=[5 + (i // 8) % 4 for i in range(n_groups)],
        relation=[(i // 8) % 2 == 0 for i in range(n_groups)],
        gm=[0.5] * n_groups,
        seconds=[1.0] * n_groups,
        cross=cross,
        gram=gram,
        norms={c: [float(v) for v in mats[c].norm(dim=1)] for c in CREDITS},
        parameters=dim,
    )
    return groups, mats, u


def test_the_analysis_ranks_credits_by_their_signal():
    script = load_benchmark("credit_gradient")
    groups, mats, u = synthetic_groups(script)
    result = script.table(groups, list(range(64)), (8, 32, 128, 256), subsets=50)
    assert (result["half_a_groups"], result["half_b_groups"]) == (32, 32)
    cos = {c: [result["cosine"][c][n]["mean"] for n in ("8", "32", "128", "256")] for c in CREDITS}
    assert all(a < b for a, b in zip(cos["spatial"], cos["spatial"][1:]))  # more images, closer
    for i in range(4):
        assert cos["spatial"][i] > cos["scalar"][i] > 0.05
        assert abs(cos["spatial-degraded"][i]) < 0.2  # no signal: only chance agreement
    lo, hi = result["cosine"]["scalar"]["32"]["interval"]
    assert lo <= cos["scalar"][1] <= hi
    # the reference's implied cosine to the truth is what its half-B sum really has
    _, half_b = script.split_halves(list(range(64)), 64)
    true_cosine = float(torch.nn.functional.cosine_similarity(mats["reference"][half_b].sum(0), u, dim=0))
    assert result["reference"]["implied_cosine"] == pytest.approx(true_cosine, abs=0.1)
    needed = result["images_needed"]
    assert needed["spatial"]["scalar@256"]["n"] < needed["scalar"]["scalar@256"]["n"] == pytest.approx(256)
    assert needed["spatial-degraded"]["0.5"]["n"] is None  # never reached
    by_kind = script.analyse(groups, (8, 32), 10)["by_kind"]
    assert by_kind["atoms<=3"]["groups"] == 0 and by_kind["atoms>=6"]["groups"] == 48
    assert by_kind["relation"]["groups"] + by_kind["no-relation"]["groups"] == 64


def test_crossing_interpolates_on_a_log_axis():
    script = load_benchmark("credit_gradient")
    assert script.crossing([32, 64, 128], [0.1, 0.2, 0.4], 0.3) == pytest.approx(2**6.5)
    assert script.crossing([32, 64], [0.5, 0.6], 0.3) == 32  # already there at the smallest n
    assert script.crossing([32, 64], [0.1, float("nan")], 0.3) is None


@pytest.mark.slow
def test_the_smoke_run_fills_every_table_and_resumes(tmp_path, capsys):
    script = load_benchmark("credit_gradient")
    out, results = tmp_path / "cache", tmp_path / "credit-gradient.json"
    argv = ["--smoke", "--threads", "1", "--out", str(out), "--results", str(results)]
    script.main(argv)
    data = json.loads(results.read_text())
    settings = data["settings"]
    assert settings["groups"] == 4 and settings["images"] == 32 and len(settings["prompts"]) == 2
    assert settings["n_values"] == [8, 16] and settings["subsets"] == 5
    assert set(settings["seeds"]) >= {"policy", "sampling_step_base", "split", "subsets"}
    assert (tmp_path / "credit-gradient.png").stat().st_size > 0
    assert set(data["objectives"]) == {"sde-clipped", "nft", "awm"}
    for objective, result in data["objectives"].items():
        assert sorted(p.name for p in (out / objective).glob("p*.pt")) == [
            "p000-g00.pt",
            "p000-g01.pt",
            "p001-g00.pt",
            "p001-g01.pt",
        ]
        overall = result["overall"]
        assert (overall["groups"], overall["half_a_groups"], overall["half_b_groups"]) == (4, 2, 2)
        assert set(overall["reference"]) >= {"split_half_cosine", "implied_cosine"}
        for credit in CREDITS:
            for n in ("8", "16"):
                cell = overall["cosine"][credit][n]
                assert -1 <= cell["mean"] <= 1 and len(cell["interval"]) == 2
            assert set(overall["images_needed"][credit]) == {"scalar@16", "0.3", "0.5"}
            assert result["mean_gradient_norm"][credit] > 0
        # one group (n = 8): the scalar credit is the reference scaled by the group's 1/std, one
        # ratio per sample, on-policy: the same direction, so the same cosine in every draw
        scalar, reference = overall["cosine"]["scalar"]["8"], overall["cosine"]["reference"]["8"]
        assert [scalar["mean"], *scalar["interval"]] == pytest.approx(
            [reference["mean"], *reference["interval"]], abs=1e-3
        )
        assert set(result["by_kind"]) == {"atoms<=3", "atoms4-5", "atoms>=6", "relation", "no-relation"}
        assert result["by_kind"]["atoms<=3"]["groups"] == 0  # heldout-test has 5 atoms or more
    # a second run samples nothing and reproduces the tables from the cache
    capsys.readouterr()
    script.main(argv)
    assert capsys.readouterr().out.count("groups cached, 0 to sample") == 3
    assert json.loads(results.read_text())["objectives"] == data["objectives"]
