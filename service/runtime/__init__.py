"""The asyncio + aiokafka runtime. Importing it installs :mod:`.kafka.aiokafka_fixes`.

The modules here are what the runtime is given: what to run
(:mod:`.definition`, :mod:`.factories`) and the deployment it runs in
(:mod:`.settings`). The sub-packages, from the API down: :mod:`.lifecycle`,
:mod:`.consumer_group`, :mod:`.partition` and :mod:`.shuffle`, over :mod:`.kafka`;
:mod:`.observability` beside them.
"""

from service.runtime.kafka import aiokafka_fixes

aiokafka_fixes.install()
