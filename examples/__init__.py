"""Example user code for Clockwork (list ``examples`` in ``SERVICE_UDF_MODULES`` to use it)."""
