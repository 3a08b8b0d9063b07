"""The asyncio + aiokafka runtime. Importing it installs :mod:`.aiokafka_fixes`."""

from service.runtime import aiokafka_fixes

aiokafka_fixes.install()
