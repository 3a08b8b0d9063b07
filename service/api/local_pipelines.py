"""The pipelines this process runs: the pipeline store applied to the local runtime.

The store's change handler. Every process that runs pipelines (the replica's one process,
or each of its workers) follows the store and makes its runtime run exactly what the
store says, whichever process took the request; the REST side
(:mod:`service.api.registry`) only writes to the store. Kept apart so that a replica's
API process, which runs no pipeline when it supervises workers, has none of this.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from service.api.store import StoredPipeline
from service.runtime.definition import PipelineDefinition
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.history import output_totals
from service.runtime.observability.status import UnknownPipeline

__all__ = ["LocalPipelines", "ParseSpec", "SpecUnusable"]

logger = logging.getLogger(__name__)


class SpecUnusable(ValueError):
    """A stored spec that does not build here; ``args[0]`` says why."""


ParseSpec = Callable[[Any], PipelineDefinition]
"""A stored spec -> its definition, or :class:`SpecUnusable` with every problem."""


class LocalPipelines:
    """Starts, replaces, pauses and stops pipelines in ``runtime`` as the store changes."""

    def __init__(self, runtime: Runtime, parse: ParseSpec) -> None:
        self.runtime = runtime
        self._parse = parse
        self._running: set[str] = set()
        self.resetting: set[str] = set()
        """Replacements with reset_state=true this process wrote and has not applied
        yet: the writer alone resets the checkpointed state (see :meth:`on_change`)."""
        self._errors: dict[str, str] = {}
        """Why a stored pipeline does not run here (e.g. its function module is not
        allowed here)."""

    def status(self, name: str) -> dict[str, Any]:
        """The pipeline here: the runner's status with the outputs counted since this
        process started (what the whole-pipeline view and its history sum)."""
        error = self._errors.get(name)
        if error is not None:
            return {"name": name, "state": "failed", "reason": error, "partitions": []}
        try:
            status = self.runtime.status(name).to_dict()
        except UnknownPipeline:
            return {"name": name, "state": "starting", "reason": None, "partitions": []}
        return {**status, **output_totals(self.runtime.metrics, name)}

    def statuses(self, names: list[str]) -> dict[str, dict[str, Any]]:
        return {name: self.status(name) for name in names}

    async def on_change(
        self, name: str, old: StoredPipeline | None, new: StoredPipeline | None
    ) -> None:
        """Make the local runtime run what the store now says about ``name``.

        Only the process that wrote a ``reset_state`` replacement resets the checkpointed
        state (once, not once per process); the others just restart on the new spec (a
        reset is a new state epoch: its group and changelog are new anyway).
        """
        if new is None:
            self._errors.pop(name, None)
            if name in self._running:
                logger.info("pipeline %r deleted: stopping it, removing its stores", name)
                self._running.discard(name)
                with contextlib.suppress(UnknownPipeline):
                    await self.runtime.delete_pipeline(name)
            return
        try:
            definition = self._parse(new.spec)
            # each state epoch runs in its own group and changelog (a reset is fresh
            # on every replica, whatever an old-epoch replica still checkpoints)
            definition = replace(
                definition, state_epoch=new.state_epoch, end_offsets=new.end_offsets
            )
        except SpecUnusable as exc:
            logger.error("pipeline %r cannot run on this replica: %s", name, exc.args[0])
            self._errors[name] = f"the stored spec is invalid here: {exc.args[0]}"
            if name in self._running:
                await self._stop(name)
            return
        self._errors.pop(name, None)
        if name not in self._running or old is None:
            logger.info("pipeline %r: starting (paused=%s)", name, new.paused)
            self.runtime.start_pipeline(definition)
            self._running.add(name)
            if new.paused:
                self.runtime.pause_pipeline(name)
            return
        if (old.spec, old.state_epoch, old.end_offsets) != (
            new.spec,
            new.state_epoch,
            new.end_offsets,
        ):
            reset = new.state_epoch != old.state_epoch and name in self.resetting
            logger.info("pipeline %r: replacing (reset_state=%s)", name, reset)
            await self.runtime.replace_pipeline(definition, reset)
            if new.paused:
                self.runtime.pause_pipeline(name)
        elif old.paused != new.paused:
            logger.info("pipeline %r: %s", name, "pausing" if new.paused else "resuming")
            if new.paused:
                self.runtime.pause_pipeline(name)
            else:
                self.runtime.resume_pipeline(name)

    async def _stop(self, name: str) -> None:
        self._running.discard(name)
        with contextlib.suppress(UnknownPipeline):
            await self.runtime.stop_pipeline(name)
