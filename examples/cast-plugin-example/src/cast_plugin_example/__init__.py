"""An example third-party cast plugin."""
