"""What this process keeps for the in-process bodies it enqueues (``dispatch=``):
their ``Launch`` (made on the caller's thread, with its fal key), the hand-over
to this process's runtime (at once, on a delay, or held until a pipeline step's
upstreams release it), and the ends of what cannot be handed over: a body the
runtime cannot take, a live duplicate whose process is gone."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from nw.jobs.core.model import ACTIVE_STATUSES, JobsConfig
from nw.jobs.core.records import JobRow
from nw.jobs.execution import credentials, recovery
from nw.jobs.execution.body import Launch
from nw.jobs.execution.runtime import Runtime
from nw.jobs.stores.base import JobStore
from nw.project import Project


def body_launch(
    proj: Project,
    fn: Callable,
    *,
    on_event: Callable[[Any], None] | None = None,
    secrets: Mapping[str, str] | None = None,
    capture: AbstractContextManager[Any] | None = None,
) -> Launch:
    """What this process keeps for a body it will run: called on the caller's
    thread, which reads the caller's fal key (the body's pool thread cannot see
    it), bound around the body and redacted like any secret."""
    ambient = credentials.ambient_fal_key()
    held = dict(secrets or {})
    if ambient and credentials.FAL not in held:
        held[credentials.FAL] = ambient
    return Launch(
        fn=fn,
        project=proj,
        on_event=on_event,
        capture=credentials.around_body(ambient, secrets, capture),
        secrets=held,
    )


def is_live(row: JobRow | None) -> bool:
    return row is not None and row.status in ACTIVE_STATUSES


def dead_duplicate(store: JobStore, row: JobRow, rt: Runtime | None, config: JobsConfig) -> bool:
    """A resubmit found a live job: is it really alive? A job whose worker died
    is closed now (the same rule as on read), so the resubmit runs again."""
    holds = rt.holds if rt is not None else (lambda _id: False)
    fresh = recovery.maybe_reap(store, row, config.clock(), config, holds)
    return fresh.status not in ACTIVE_STATUSES
