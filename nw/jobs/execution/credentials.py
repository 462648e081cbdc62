"""Fal credentials around a body, bound with falaw's own credential context.

A body that calls falaw must find a key without one being passed to it. The
key an in-process job runs under is the one bound where it was enqueued
(``falaw.using_fal_credentials``), captured then, because a pool thread does
not inherit the caller's context; a worker's is its own ``secrets["fal"]``
(``NW_SECRET_FAL`` or ``--secrets``). An explicit ``secrets["fal"]`` is bound
innermost, so it wins over the ambient key. Keys live in memory only: they are
never written to a store, and ``body.redact`` removes them from what is.

falaw is an optional extra: without it there is nothing to capture or bind,
and nothing here imports it unless a key could be bound.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nw.jobs.execution.body import Launch

log = logging.getLogger("nw.jobs")

#: A worker's source of a job's secrets: (kind, params) -> {name: value}.
SecretsProvider = Callable[[str, Mapping[str, Any]], Mapping[str, str]]


def env_secrets(kind: str, params: Mapping[str, Any]) -> dict[str, str]:
    """``NW_SECRET_FAL=…`` -> ``{"fal": "…"}`` (the default provider)."""
    prefix = "NW_SECRET_"
    return {k[len(prefix) :].lower(): v for k, v in os.environ.items() if k.startswith(prefix)}


def secrets_for(provider: SecretsProvider, kind: str, params: Mapping[str, Any]) -> dict[str, str]:
    """A job's secrets from ``provider``; none when it fails, logged by its
    type only (a provider's message may quote a secret)."""
    try:
        return dict(provider(kind, params))
    except Exception as exc:
        log.error(
            "secrets provider failed for kind %s: %s (its message is not logged)",
            kind,
            type(exc).__name__,
        )
        return {}


FAL = "fal"
"""The provider name falaw binds (``falaw.core.FAL_PROVIDER``) and the secret's name."""


def _falaw_installed() -> bool:
    return "falaw" in sys.modules or importlib.util.find_spec("falaw") is not None


def ambient_fal_key() -> str | None:
    """The fal key bound in the calling context, or None.

    A key can only be bound through falaw or the shared ``ocracy.kit`` chain
    beneath it, so a process that has loaded neither has none: it is not made
    to import falaw just to learn that.
    """
    if "falaw" not in sys.modules and "ocracy.kit" not in sys.modules:
        return None
    if not _falaw_installed():
        return None
    import falaw

    key = falaw.current_fal_key()
    return key if isinstance(key, str) and key else None


def _using_fal(key: str | None) -> AbstractContextManager[Any]:
    if not key or not _falaw_installed():
        return nullcontext()
    import falaw

    return falaw.using_fal_credentials(key)


@contextmanager
def around_body(
    ambient: str | None,
    secrets: Mapping[str, str] | None,
    inner: AbstractContextManager[Any] | None = None,
) -> Iterator[None]:
    """Entered on the body's thread: the ambient fal key, then ``inner`` (the
    caller's ``capture_context``), then an explicit ``secrets["fal"]``."""
    with ExitStack() as stack:
        stack.enter_context(_using_fal(ambient))
        if inner is not None:
            stack.enter_context(inner)
        stack.enter_context(_using_fal((secrets or {}).get(FAL)))
        yield


def attach_secrets(
    provider: SecretsProvider, kind: str, params: Mapping[str, Any], launch: Launch
) -> None:
    """A worker's job's secrets from its provider, on the body's thread
    (``Launch.setup``): a provider that takes its time holds up that job alone,
    never the claim or the finishes it rides with. A provider that fails runs
    the job without (``secrets_for``)."""
    launch.secrets = secrets_for(provider, kind, params)
    if launch.secrets.get(FAL):  # without one there is nothing to bind per job
        launch.capture = around_body(None, launch.secrets)


def under_secrets(
    provider: SecretsProvider, kind: str, params: Mapping[str, Any]
) -> AbstractContextManager[Any]:
    """What a parked job's handlers run under: the secrets its body would have
    (fal's key bound)."""
    secrets = secrets_for(provider, kind, params)
    return around_body(None, secrets) if secrets.get(FAL) else nullcontext()
