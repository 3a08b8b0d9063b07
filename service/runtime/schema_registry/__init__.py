"""The schema registry, from the runtime's side: fetching writer schemas by id (I/O) for
:mod:`service.runtime.formats` (pure) to decode with."""
