"""Entry point of cast-shapes (`[project.entry-points.cast] shapes = "cast_shapes.plugin"`).

Registers no components yet: an unbuilt component is simply not registered. When components
land, this module names their factories with `cast_core.lazy` and keeps heavy imports out.
Coming: the world, the `shapes-oracle` scorer (part 1), then the `shapes` policy and recipe (part 2).
"""
