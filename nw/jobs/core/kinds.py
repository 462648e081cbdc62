"""Registered kinds: a name bound to an importable callable, so any process can run it.

``register_kind("panel.animate", "myapp.renders:animate")`` binds by path (the
module is imported only by the process that runs the body, never by one that
merely enqueues); a callable may be given directly too. Installed packages
can declare kinds in the ``nw.jobs.kinds`` entry-point group.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from nw.errors import InvalidType, InvalidValue, KindImportError
from nw.jobs.core.limits import LimitKeySpec, check_spec

ENTRY_POINT_GROUP = "nw.jobs.kinds"


@dataclass(frozen=True)
class KindSpec:
    name: str
    target: str | Callable
    retryable: bool = False
    max_attempts: int | None = None
    timeout_s: float | None = None
    cancel_on_timeout: bool = False
    limit_key: LimitKeySpec = None
    """The key a job of this kind counts against (see ``nw.jobs.core.limits``)."""
    poll: Callable | None = None
    """``poll(project, params, request_id)`` of a parked job: None or ``Pending``
    while the provider works, the result when done; raises as a body does."""
    on_webhook: Callable | None = None
    """``on_webhook(project, params, request_id, payload)``: the provider's
    webhook payload -> a result, ``Pending`` or an error (raised)."""
    cancel_remote: Callable | None = None
    """``cancel_remote(project, params, request_id)``: cancel at the provider."""

    @property
    def parks(self) -> bool:
        """A body of this kind may park (``Submitted``): a poll or a webhook resumes it."""
        return self.poll is not None or self.on_webhook is not None

    @property
    def path(self) -> str:
        if isinstance(self.target, str):
            return self.target
        return f"{self.target.__module__}:{self.target.__qualname__}"

    def load(self) -> Callable:
        if callable(self.target):
            return self.target
        module_name, _, attr = self.target.partition(":")
        try:
            obj = importlib.import_module(module_name)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except Exception as exc:
            raise KindImportError(
                f"kind {self.name!r} is registered to {self.target!r}, which does not import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not callable(obj):
            raise KindImportError(f"kind {self.name!r}: {self.target!r} is not callable")
        return obj


_KINDS: dict[str, KindSpec] = {}
_LOCK = threading.Lock()
_entry_points_loaded = False


def register_kind(
    name: str,
    target: str | Callable,
    *,
    retryable: bool | None = None,
    max_attempts: int | None = None,
    timeout_s: float | None = None,
    cancel_on_timeout: bool = False,
    limit_key: LimitKeySpec = None,
    poll: Callable | None = None,
    on_webhook: Callable | None = None,
    cancel_remote: Callable | None = None,
) -> KindSpec:
    """Bind ``name`` to ``"module:attr"`` (or a callable). Re-registering replaces.

    ``limit_key``: the key each job of the kind counts against when a limit is
    set on it (``set_limit``): a string (``"fal:kling"``), a ``str.format``
    template over the params (``"fal:{model}"``) or a callable of the params
    returning the key (or None: no key). Computed once, at enqueue.

    ``max_attempts``: attempts per run of a job of the kind (its crashes, failed
    launches and lost workers retried while it has some left); more than 1
    makes the kind retryable, so ``retryable=False`` with it is refused as a
    contradiction. ``retryable=True`` alone: ``JobsConfig.max_attempts``
    attempts. Neither: one attempt, never retried."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidValue("a kind needs a non-empty name")
    if isinstance(target, str) and ":" not in target:
        raise InvalidValue(f"kind target must look like 'module:attr', got {target!r}")
    if not isinstance(target, str) and not callable(target):
        raise InvalidType("kind target must be 'module:attr' or a callable")
    retryable = _retryable(name, retryable, max_attempts)
    if timeout_s is not None and timeout_s <= 0:
        raise InvalidValue("timeout_s must be > 0")
    spec = KindSpec(
        name,
        target,
        retryable,
        max_attempts,
        timeout_s,
        cancel_on_timeout,
        check_spec(limit_key),
        poll,
        on_webhook,
        cancel_remote,
    )
    with _LOCK:
        _KINDS[name] = spec
    return spec


def _retryable(name: str, retryable: Any, max_attempts: Any) -> bool:
    """The kind's retry flag: ``max_attempts`` above 1 implies it."""
    if retryable is not None and not isinstance(retryable, bool):
        raise InvalidType(f"kind {name!r}: retryable must be True or False, got {retryable!r}")
    if max_attempts is None:
        return bool(retryable)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise InvalidType(
            f"kind {name!r}: max_attempts must be a whole number, got {max_attempts!r}"
        )
    if max_attempts < 1:
        raise InvalidValue(f"kind {name!r}: max_attempts must be >= 1, got {max_attempts}")
    if max_attempts > 1 and retryable is False:
        raise InvalidValue(
            f"kind {name!r}: max_attempts={max_attempts} asks for retries but retryable=False"
            " forbids them; drop retryable=False, or max_attempts"
        )
    return retryable is True or max_attempts > 1


def unregister_kind(name: str) -> None:
    with _LOCK:
        _KINDS.pop(name, None)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        with _LOCK:
            _KINDS.setdefault(ep.name, KindSpec(ep.name, ep.value))


def kind_spec(name: str) -> KindSpec | None:
    _load_entry_points()
    with _LOCK:
        return _KINDS.get(name)


def registered_kinds() -> list[str]:
    _load_entry_points()
    with _LOCK:
        return sorted(_KINDS)
