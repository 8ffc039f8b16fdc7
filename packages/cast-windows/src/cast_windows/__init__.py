"""cast-windows: SDE window selectors: clip-curvature (CAST) and the fixed / random / sliding baselines.

Modules, one concern each: :mod:`~cast_windows.knee` (the knee rule), :mod:`~cast_windows.embedders`
(``pixels``, ``clip``), :mod:`~cast_windows.curve` (measuring the x̂0-to-final similarity curve),
:mod:`~cast_windows.cache` (measuring once), :mod:`~cast_windows.clip_curvature` (the selector and
its window rule), :mod:`~cast_windows.baselines`, :mod:`~cast_windows.validation` (ground truth from
an atom judge), :mod:`~cast_windows.plot` and :mod:`~cast_windows.commands` (``cast window``).
"""
