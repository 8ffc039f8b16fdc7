"""The backbone recipes' training prompts (cast-backbones) are read by their decomposer
(cast-rewards' template grammar): every one gives a valid scene graph with its objects."""

from cast_backbones.prompts import train_prompts
from cast_rewards.template import TemplateDecomposer


def test_every_recipe_prompt_decomposes():
    prompts = train_prompts()
    assert len(prompts) == len(set(prompts)) == 600
    decompose = TemplateDecomposer(distinct_nouns=True).decompose  # as the recipes' auto decomposer reads them
    graphs = [decompose(p) for p in prompts]
    relations = ("left of", "right of", "above", "below")
    for g, p in zip(graphs, prompts):  # one object, or two of different kinds
        two = " and " in p or any(f" {r} " in p for r in relations)
        assert len(g.entities) == (2 if two else 1), p
        assert len({e.noun for e in g.entities}) == len(g.entities), p
    kinds = {a.kind for g in graphs for a in g.atoms}
    assert kinds == {"object", "count", "attribute", "relation"}
    assert train_prompts(10, seed=1) != train_prompts(10, seed=2)
