"""Core sub-commands of ``cast``, one module each; imported lazily by the command bodies."""
