"""cast-windows: SDE window selectors: clip-curvature (CAST) and the fixed / random / sliding baselines."""
