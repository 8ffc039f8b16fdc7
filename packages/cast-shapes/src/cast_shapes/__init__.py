"""cast-shapes: the shapes world: a miniature compositional world, its exact oracle scorer and a tiny pretrained policy.

Modules, one concern each (importing this package imports none of them, so the plugin stays
cheap to load):

* :mod:`cast_shapes.world` — vocabulary, image size, palette, scenes and the layout sampler;
* :mod:`cast_shapes.render` — layouts -> pixels (numpy);
* :mod:`cast_shapes.grammar` — scenes <-> GenEval 2-style prompts, scenes -> scene graphs;
* :mod:`cast_shapes.suites` — fixed prompt suites and the train / held-out split;
* :mod:`cast_shapes.semantics` — what each atom means, given the objects in an image;
* :mod:`cast_shapes.perception` — pixels -> objects (segmentation, components, shapes);
* :mod:`cast_shapes.oracle` — the ``shapes-oracle`` scorer (``AtomScorer``).
"""
