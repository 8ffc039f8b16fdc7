"""The backbone recipes' training prompts (cast-backbones) are read by their decomposer
(cast-rewards' template grammar): every one gives a valid scene graph with its objects."""

from cast_backbones.prompts import train_prompts
from cast_rewards.template import TemplateDecomposer


def test_every_recipe_prompt_decomposes():
    prompts = train_prompts()
    assert len(prompts) == len(set(prompts)) == 600
    decompose = TemplateDecomposer().decompose
    graphs = [decompose(p) for p in prompts]
    assert all(g.atoms for g in graphs)
    kinds = {a.kind for g in graphs for a in g.atoms}
    assert kinds == {"object", "count", "attribute", "relation"}
    assert train_prompts(10, seed=1) != train_prompts(10, seed=2)
