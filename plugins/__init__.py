"""Built-in components, each module a plugin registered through the same hooks a
third-party package uses (see ``zoo.nn.hookspecs``)."""
