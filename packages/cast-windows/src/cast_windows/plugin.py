"""Entry point of cast-windows (`[project.entry-points.cast] windows = "cast_windows.plugin"`).

Registers no components yet: an unbuilt component is simply not registered. When components
land, this module names their factories with `cast_core.lazy` and keeps heavy imports out.
Coming: `clip-curvature`, `fixed`, `random` and `sliding` (window-selector issue).
"""
