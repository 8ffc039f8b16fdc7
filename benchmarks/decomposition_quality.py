"""How the ``auto`` decomposer reads a public, human-written prompt set, and a random sample of
its template graphs for judging by hand.

Prints how many prompts each path took (template / llm / prompt-level) and writes a sample of
template graphs (``--sample`` of them, seeded) as JSON Lines with every atom's question and a
``sound`` field left for the human judge (null). The judged sample for PartiPrompts is committed
in benchmarks/results/; docs/rewards.md holds the rule it was judged by and the table.

PartiPrompts (google-research/parti, Apache-2.0): pass its ``PartiPrompts.tsv`` (first column).

Run: ``python benchmarks/decomposition_quality.py PartiPrompts.tsv --sample 110 --out sample.jsonl``
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import warnings


def main() -> None:
    from cast_rewards.auto import AutoDecomposer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompts", help="a TSV with a 'Prompt' column (PartiPrompts.tsv) or a text file, one a line")
    ap.add_argument("--sample", type=int, default=110)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", help="write the sample here (JSON Lines)")
    a = ap.parse_args()
    with open(a.prompts, encoding="utf-8") as f:
        if a.prompts.endswith(".tsv"):
            prompts = [r["Prompt"] for r in csv.DictReader(f, delimiter="\t")]
        else:
            prompts = [line.strip() for line in f if line.strip()]
    auto = AutoDecomposer()
    graphs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in prompts:
            graphs[p] = auto.decompose(p)
    stats = auto.stats()
    print(f"{len(prompts)} prompts: " + ", ".join(f"{k} {v} ({100 * v / len(prompts):.1f}%)" for k, v in stats.items()))
    template = [p for p in dict.fromkeys(prompts) if auto.path_of(p) == "template"]
    sample = random.Random(a.seed).sample(template, min(a.sample, len(template)))
    atoms = sum(len(graphs[p].atoms) for p in sample)
    print(f"sample: {len(sample)} template graphs, {atoms} atoms")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            for p in sample:
                f.write(
                    json.dumps(
                        {
                            "prompt": p,
                            "atoms": [{"id": x.id, "question": x.question, "sound": None} for x in graphs[p].atoms],
                        }
                    )
                    + "\n"
                )


if __name__ == "__main__":
    main()
