"""Entry point of cast-shapes (``[project.entry-points.cast] shapes = "cast_shapes.plugin"``).

Only names and lazy factories here: loading the plugin imports neither numpy nor torch.
Not registered yet (unbuilt): the ``shapes`` policy and the ``shapes`` recipe (part 2).
"""

from cast_core import hookimpl, lazy


@hookimpl
def register_atom_scorers(register):
    register(
        "shapes-oracle",
        lazy("cast_shapes.oracle:ShapesOracleScorer"),
        description="exact per-atom verdicts and object masks for shapes-world images, from pixels",
    )


@hookimpl
def register_commands(cli):
    from cast_shapes.commands import shapes_group

    cli.add_command(shapes_group)
