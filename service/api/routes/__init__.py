"""The REST endpoints, one module per concern; :mod:`service.api.app` mounts them."""
