"""Built-in formats; importing this package registers them (filled in by the formats module files)."""
