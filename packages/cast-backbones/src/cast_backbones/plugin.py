"""Entry point of cast-backbones (`[project.entry-points.cast] backbones = "cast_backbones.plugin"`).

Registers no components yet: an unbuilt component is simply not registered. When components
land, this module names their factories with `cast_core.lazy` and keeps heavy imports out.
Coming: the `flux2`, `flux2-klein` and `qwen-image` policies.
"""
