"""Objects per image: does RL teach the shapes policy to over-draw?

Soft-TIFA's GM pays for an object atom through the best-matching object and for a relation
through pool centres, while a count atom charges only exp(-|drawn - asked|); so a policy can buy
object and position score with extra objects. This script counts what the shapes oracle perceives
on the held-out hard prompts, for the base policy and any adapters, with exactly the noise
``cast eval --seed S`` uses (``cast_core.evaluation.eval_batches``), so the rows are paired:

- ``objects_per_image``: detections per image;
- ``unclaimed_per_image``: detections in no entity's pool (no atom of the prompt is about them);
- ``missing_entity_share``: the share of (image, entity) pairs whose pool is empty — the entity
  was not drawn at all, which zeroes its object, attribute and relation atoms;
- ``count_error_share``: over the prompts' count atoms, the share of (drawn - asked), clipped to
  +-3, where "drawn" is the size of the entity's pool;
- ``offcolour_member_share``: over the entities a colour is asked for and that were drawn, the
  share of their pool members in another colour — what dilutes an attribute atom's colour
  fraction ``f`` (a wrongly coloured extra triangle counts against "three green triangles");
- ``offcolour_entity_share``: the share of those entities with at least one such member.

Reading them together tells hedging from a reward hack: a policy that draws more objects to make
sure every entity appears lowers ``missing_entity_share`` and pays with count surplus.

Run (after ``make install``)::

    python benchmarks/overdrawing.py --seed 777 --json out.json NAME=ADAPTER_DIR ...

The base row is always included. ``benchmarks/results/overdrawing-train-hard.json`` holds the
numbers docs/shapes-rl.md quotes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter


CLIP = 3


def count_objects(
    policy, prompts, *, images_per_prompt: int, num_steps: int, seed: int, batch_size: int = 64, progress=None
) -> dict:
    """Perceived objects, unclaimed objects and count errors, sampled as ``evaluate`` samples."""
    from cast_core.evaluation import eval_batches
    from cast_core.registry import get_atom_decomposer
    from cast_shapes.perception import detect
    from cast_shapes.semantics import pools

    decomposer = get_atom_decomposer("template")
    n_images = len(prompts) * images_per_prompt
    objects = unclaimed = entities = missing = 0
    coloured_members = offcolour_members = coloured_entities = offcolour_entities = 0
    errors: Counter[int] = Counter()
    for start, chunk, images in eval_batches(
        policy, prompts, images_per_prompt=images_per_prompt, num_steps=num_steps, seed=seed, batch_size=batch_size
    ):
        for (_, prompt), dets in zip(chunk, detect(images.float().clamp(0, 1).cpu().numpy())):
            graph = decomposer.decompose(prompt)
            pool = pools(graph, dets)
            claimed = {i for members in pool.values() if members for i in members}
            objects += len(dets)
            entities += sum(members is not None for members in pool.values())
            missing += sum(members == () for members in pool.values())
            unclaimed += len(dets) - len(claimed)
            for atom in graph.atoms:
                if atom.kind == "count" and isinstance(atom.value, int) and pool.get(atom.entity) is not None:
                    errors[max(-CLIP, min(CLIP, len(pool[atom.entity]) - atom.value))] += 1
                if atom.kind == "attribute" and pool.get(atom.entity):
                    members = pool[atom.entity]
                    off = sum(dets[i].colour != atom.value for i in members)
                    coloured_members += len(members)
                    offcolour_members += off
                    coloured_entities += 1
                    offcolour_entities += off > 0
        if progress:
            progress(start + len(chunk), n_images)
    total = sum(errors.values())
    return {
        "objects_per_image": round(objects / n_images, 3),
        "unclaimed_per_image": round(unclaimed / n_images, 3),
        "missing_entity_share": round(missing / max(entities, 1), 3),
        "count_error_share": {str(k): round(errors[k] / total, 3) for k in range(-CLIP, CLIP + 1)} if total else {},
        "offcolour_member_share": round(offcolour_members / max(coloured_members, 1), 3),
        "offcolour_entity_share": round(offcolour_entities / max(coloured_entities, 1), 3),
        "images": n_images,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("adapters", nargs="*", metavar="NAME=ADAPTER_DIR")
    ap.add_argument("--suite", default="heldout-hard")
    ap.add_argument("--images-per-prompt", "-k", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args(argv)
    runs = {"base": None}
    for item in args.adapters:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            ap.error(f"expected NAME=ADAPTER_DIR, got {item!r}")
        runs[name] = path

    from cast_core.registry import get_policy
    from cast_shapes.suites import suite, suite_digest

    prompts = suite(args.suite)
    out = {
        "suite": args.suite,
        "suite_sha256": suite_digest(args.suite),
        "images_per_prompt": args.images_per_prompt,
        "steps": args.steps,
        "seed": args.seed,
        "models": {},
    }
    for name, adapter in runs.items():
        policy = get_policy("shapes")
        if adapter:
            policy.load_adapter(adapter)
        row = count_objects(
            policy,
            prompts,
            images_per_prompt=args.images_per_prompt,
            num_steps=args.steps,
            seed=args.seed,
            progress=lambda d, n: print(f"\r{name}: {d}/{n}", end="", file=sys.stderr),
        )
        print(file=sys.stderr)
        out["models"][name] = {"adapter": adapter, **row}
        shares = row["count_error_share"]
        print(
            f"{name:24s} objects/image {row['objects_per_image']:.2f}  unclaimed {row['unclaimed_per_image']:.2f}  "
            f"entities missing {row['missing_entity_share']:.3f}  "
            f"count surplus +1/+2/+3: {shares.get('1', 0):.2f}/{shares.get('2', 0):.2f}/{shares.get('3', 0):.2f}  "
            f"off-colour members {row['offcolour_member_share']:.3f} (entities {row['offcolour_entity_share']:.3f})"
        )
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
