"""The installed version of cast-core (from package metadata, so there is one source of truth)."""

from importlib import metadata

try:
    __version__ = metadata.version("cast-core")
except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
