"""Built-in presets: one TOML file per preset, registered by ``zoo.plugins.presets``."""
