"""The runtime as the API sees it: start, stop, replace, pause and resume pipelines.

:class:`Runtime` owns one :class:`~service.runtime.lifecycle.pipeline_runner.PipelineRunner` per
pipeline and a broker health check (readiness). It never imports the API; the API
builds :class:`~service.runtime.definition.PipelineDefinition` values and calls in.

Shutdown is graceful for every pipeline (finish the batch in hand, flush, checkpoint,
commit, leave the group), so a restart of the service re-emits nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

from aiokafka import AIOKafkaClient

from service.core.time import Clock, SystemClock
from service.runtime.consumer_group.local_state import remove_stores, state_root
from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.access import connection_problem
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.lifecycle.loop_time import within_loop_time
from service.runtime.lifecycle.pipeline_runner import PipelineRunner
from service.runtime.lifecycle.queries import KeyAnswer, ScanAnswer
from service.runtime.observability.metrics import METRICS, RuntimeMetrics
from service.runtime.observability.status import PipelineStatus, UnknownPipeline
from service.runtime.pipeline_topics.admin import PipelineTopics
from service.runtime.settings import RuntimeSettings

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_FACTOR = 6
"""The health check client's own request timeout, in health-check timeouts: long enough
that the check's loop-time timeout (which a held loop does not fool) decides."""


class PipelineExists(KeyError):
    """A pipeline with that name is already running here."""


class Runtime:
    """Every pipeline of this service instance."""

    def __init__(
        self,
        settings: RuntimeSettings,
        clock: Clock | None = None,
        metrics: RuntimeMetrics = METRICS,
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics
        self._runners: dict[str, PipelineRunner] = {}
        self._broker_ready = False
        self.broker_problem: str | None = "the broker was not asked yet"
        """Why the last health check failed (None while :attr:`ready`): the cause an
        operator can act on (an untrusted certificate, a rejected password, ...)."""
        self._broker_up = asyncio.Event()
        """Set while :attr:`ready`: runners wait on it after losing the broker."""
        self._health_task: asyncio.Task[None] | None = None
        self._client: AIOKafkaClient | None = None

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        """Start the broker health check (pipelines start on :meth:`start_pipeline`)."""
        if self._health_task is None:
            if self.settings.gc_threshold is not None:
                gc.set_threshold(*self.settings.gc_threshold)
            await self.check_broker()
            self._health_task = asyncio.get_running_loop().create_task(
                self._watch_broker(), name="clockwork-broker-health"
            )

    async def shutdown(self) -> None:
        """Stop every pipeline gracefully, then the health check."""
        runners = list(self._runners.values())
        self._runners.clear()
        results = await asyncio.gather(*(r.stop() for r in runners), return_exceptions=True)
        for runner, result in zip(runners, results, strict=True):
            if isinstance(result, BaseException):
                logger.warning(
                    "pipeline %s did not stop cleanly: %r", runner.definition.name, result
                )
        task, self._health_task = self._health_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_client()

    # -- pipelines -------------------------------------------------------------------
    def start_pipeline(self, definition: PipelineDefinition) -> PipelineStatus:
        """Start running ``definition`` (joins its consumer group); returns its status."""
        if definition.name in self._runners:
            raise PipelineExists(definition.name)
        runner = PipelineRunner(
            definition,
            self.settings,
            self.clock,
            self.metrics,
            broker_check=self.check_broker,
            broker_up=self._broker_up,
        )
        self._runners[definition.name] = runner
        runner.start()
        return runner.status()

    async def stop_pipeline(self, name: str) -> None:
        """Stop gracefully and forget the pipeline here (its changelog stays, and its
        rocksdb stores, for the next start here)."""
        runner = self._runners.pop(name, None)
        if runner is None:
            raise UnknownPipeline(name)
        await runner.stop()

    async def delete_pipeline(self, name: str) -> None:
        """The pipeline is deleted: stop it, then remove its rocksdb stores here (its
        changelog is the API's business)."""
        runner = self._runners.pop(name, None)
        if runner is None:
            raise UnknownPipeline(name)
        await runner.stop()
        self._remove_stores(runner.definition)

    def _remove_stores(self, definition: PipelineDefinition) -> None:
        """Remove the stores of ``definition``'s state here (:func:`remove_stores`)."""
        remove_stores(state_root(self.settings.state_dir), definition.changelog_topic)

    async def replace_pipeline(
        self, definition: PipelineDefinition, reset_state_: bool = False
    ) -> PipelineStatus:
        """Stop the running pipeline of that name and start ``definition`` instead.

        The state is kept when the spec's ``state_fingerprint`` is unchanged (the API
        refuses other replacements unless asked to reset). With ``reset_state_`` the
        checkpointed state and positions are discarded and the pipeline starts afresh
        from ``start_from``.
        """
        runner = self._runners.pop(definition.name, None)
        if runner is not None:
            await runner.stop()
            old = runner.definition
            if reset_state_ or old.changelog_topic != definition.changelog_topic:
                self._remove_stores(old)  # a state epoch of its own: the old one is gone
        if reset_state_:
            await PipelineTopics(KafkaCluster.of(self.settings)).reset(definition)
        return self.start_pipeline(definition)

    def pause_pipeline(self, name: str) -> PipelineStatus:
        runner = self._get(name)
        runner.pause()
        return runner.status()

    def resume_pipeline(self, name: str) -> PipelineStatus:
        runner = self._get(name)
        runner.resume()
        return runner.status()

    def query_key(self, name: str, key: str) -> KeyAnswer:
        """A pull query of ``key`` (lifecycle/queries.py); UnknownPipeline if not here."""
        return self._get(name).query_key(key)

    def scan(self, name: str, from_key: str | None, to_key: str | None, limit: int) -> ScanAnswer:
        """A range scan over the partitions of ``name`` held here (lifecycle/queries.py)."""
        return self._get(name).scan(from_key, to_key, limit)

    def status(self, name: str) -> PipelineStatus:
        return self._get(name).status()

    def statuses(self) -> list[PipelineStatus]:
        return [runner.status() for runner in self._runners.values()]

    def runner(self, name: str) -> PipelineRunner:
        return self._get(name)

    @property
    def pipelines(self) -> list[str]:
        return list(self._runners)

    def _get(self, name: str) -> PipelineRunner:
        try:
            return self._runners[name]
        except KeyError:
            raise UnknownPipeline(name) from None

    # -- readiness -------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """The broker answered the last health check."""
        return self._broker_ready

    async def check_broker(self, timeout_s: float = 5.0) -> bool:
        """Ask the broker for cluster metadata; updates :attr:`ready`. The timeout counts
        only the loop's free time (:func:`.loop_time.within_loop_time`): a checkpoint
        holding the loop is not the broker's silence."""
        try:
            await within_loop_time(self._ask_broker(timeout_s), timeout_s)
            ready = True
        except Exception as exc:
            await self._close_client()
            problem = await connection_problem(KafkaCluster.of(self.settings)) or repr(exc)
            if problem != self.broker_problem:
                # Once per cause, not at every check: the checks go on every interval.
                logger.error("Kafka at %s not usable: %s", self.settings.bootstrap_servers, problem)
            self.broker_problem = problem
            ready = False
        if ready and not self._broker_ready:
            logger.info("broker reachable at %s", self.settings.bootstrap_servers)
            self.broker_problem = None
        lost = self._broker_ready and not ready
        self._broker_ready = ready
        if ready:
            self._broker_up.set()
        else:
            self._broker_up.clear()
        if lost:
            for runner in self._runners.values():
                runner.broker_lost()
        self.metrics.broker_ready.set(1 if ready else 0)
        return ready

    async def _ask_broker(self, timeout_s: float) -> None:
        if self._client is not None:
            await self._client.fetch_all_metadata()
            return
        # The client's own timeout is asyncio's, which a held loop fools: ours decides.
        client = KafkaCluster.of(self.settings).client(
            request_timeout_ms=int(timeout_s * 1000 * REQUEST_TIMEOUT_FACTOR)
        )
        try:
            await client.bootstrap()
        except BaseException:
            await client.close()
            raise
        self._client = client

    async def _watch_broker(self) -> None:
        """Check the broker every ``broker_check_interval_s``.

        A broker restart faster than the interval is not seen here: readiness stays
        true and :meth:`PipelineRunner.broker_lost` is not called. The sessions then
        meet the restart themselves: on Kafka (data and offsets survive) the clients
        reconnect and carry on; on a broker that lost its data (Tansu) a produce or a
        commit to a topic that is gone is expected to fail, ending the session like any
        failed session, and the runner restarts it after its backoff (the new session
        recreates the output and changelog topics). Not covered by a test. A consumer
        whose fetches keep working against a source topic recreated in between is not
        detected: ``auto_offset_reset`` moves it with its old in-memory state. Lower
        the interval where that matters; on Kafka it cannot happen (topics survive).
        """
        while True:
            await asyncio.sleep(self.settings.broker_check_interval_s)
            await self.check_broker()

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception:
                logger.debug("closing the health-check client failed", exc_info=True)
