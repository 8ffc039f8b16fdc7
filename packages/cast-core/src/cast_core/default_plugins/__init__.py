"""Built-in components, registered through the same hooks as third-party plugins."""
