"""fal's queue as parked jobs (the ``fal`` extra): submit, then let the slot go.

``FalQueue("fal-ai/kling-video/v2/master/text-to-video", arguments)`` makes,
for one fal application, the body (submits the request, or re-attaches to
the one a retry resumes, and returns ``Submitted``), ``poll`` (the request's
status: ``Pending`` with its queue position, then its result), ``on_webhook``
(fal's completion payload) and ``cancel_remote``; ``register(name)`` binds
them to a kind. ``arguments(params)`` turns a job's params into the
application's input; ``result(output, units)`` (optional) the output into the
job's result (``cost_usd_actual`` included, when the caller prices it; fal's
billable units are kept as ``billable_units``).

The key: a body's ``secrets["fal"]`` (a worker's ``NW_SECRET_FAL``), else the
one falaw has bound (``falaw.using_fal_credentials``: the worker binds a
job's key around its poll as around its body), else ``FAL_KEY``.

It speaks fal's documented queue routes over urllib3 (``POST {queue}/{app}``
with ``fal_webhook``, ``GET .../requests/{id}/status``, ``GET
.../requests/{id}``, ``PUT .../requests/{id}/cancel``) rather than through
``fal-client``: fal-client's queue URL is ``https://`` + a host fixed at its
import (``FAL_QUEUE_RUN_HOST``), so it cannot be pointed at a local plain-HTTP
fake, which is the only fal these machines can reach (see
misc/ARCHITECTURE.md). ``NW_FAL_QUEUE_URL`` (or ``queue_url=``) points this
module at another queue.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import urllib3

from nw.errors import ConfigError, InvalidValue
from nw.jobs.core.errors import JobRefused
from nw.jobs.core.kinds import KindSpec, register_kind
from nw.jobs.core.parked import Pending, Submitted
from nw.jobs.execution import credentials

PROVIDER = "fal"
QUEUE_URL = "https://queue.fal.run"
QUEUE_URL_ENV = "NW_FAL_QUEUE_URL"
UNITS_HEADER = "x-fal-billable-units"
TIMEOUT_S = 30.0

Arguments = Callable[[Mapping[str, Any]], Mapping[str, Any]]
Result = Callable[[Mapping[str, Any], float | None], Mapping[str, Any]]


class FalQueue:
    """One fal application's queue as a parked kind's four callables."""

    def __init__(
        self,
        app_id: str,
        arguments: Arguments,
        *,
        result: Result | None = None,
        deadline_s: float | None = None,
        queue_url: str | None = None,
        timeout_s: float = TIMEOUT_S,
    ):
        parts = [p for p in str(app_id).split("/") if p]
        if len(parts) < 2 or any(p in (".", "..") for p in parts):
            raise InvalidValue(
                f"a fal application id looks like 'owner/app[/path]', got {app_id!r}"
            )
        self.app_id = "/".join(parts)
        # status, result and cancel live under the application's owner/alias only
        self._requests = f"{parts[0]}/{parts[1]}/requests"
        self.arguments = arguments
        self.result = result
        self.deadline_s = deadline_s
        self._queue_url = queue_url
        self._timeout_s = timeout_s
        self._http: urllib3.PoolManager | None = None
        self._lock = threading.Lock()

    # ----- the kind's callables ---------------------------------------------------
    def body(
        self,
        project: Any,
        params: dict[str, Any],
        *,
        resume: Mapping[str, Any] | None = None,
        webhook_url: str | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> Submitted:
        """Submit (or re-attach to the request a retry resumes) and park."""
        if resume and resume.get("request_id"):
            return Submitted(
                str(resume["request_id"]), provider=PROVIDER, deadline_s=self.deadline_s
            )
        query = {"fal_webhook": webhook_url} if webhook_url else None
        answer = self._call(
            "POST", self.app_id, secrets, json_body=dict(self.arguments(params)), query=query
        )
        data = answer.json()
        request_id = data.get("request_id") if isinstance(data, Mapping) else None
        if not isinstance(request_id, str) or not request_id:
            raise RuntimeError("fal's queue answered a submit without a request_id")
        position = data.get("queue_position")
        return Submitted(
            request_id,
            provider=PROVIDER,
            deadline_s=self.deadline_s,
            position=position if isinstance(position, int) and position >= 0 else None,
        )

    def poll(self, project: Any, params: dict[str, Any], request_id: str) -> Any:
        """``Pending`` while queued or running at fal; the result once completed."""
        status = self._call("GET", f"{self._request(request_id)}/status", None).json()
        state = status.get("status") if isinstance(status, Mapping) else None
        if state == "COMPLETED":
            if status.get("error"):
                raise RuntimeError(f"fal: {status['error']}")
            return self._fetch(request_id)
        if state == "IN_QUEUE":
            position = status.get("queue_position")
            return Pending(position=position if isinstance(position, int) else None)
        if state == "IN_PROGRESS":
            return Pending(position=0)
        raise RuntimeError(f"fal's queue answered an unknown status: {str(state)[:80]!r}")

    def on_webhook(
        self, project: Any, params: dict[str, Any], request_id: str, payload: Any
    ) -> Any:
        """fal's completion payload: ``{"status": "OK", "payload": {...}}`` or an error."""
        if not isinstance(payload, Mapping):
            raise RuntimeError("fal's webhook payload is not a JSON object")
        if payload.get("status") == "OK":
            output = payload.get("payload")
            if not isinstance(output, Mapping):  # too large to deliver: fetch it
                return self._fetch(request_id)
            return self._shaped(output, None)
        detail = payload.get("error") or payload.get("payload_error") or "failed"
        raise RuntimeError(f"fal: {str(detail)[:500]}")

    def cancel_remote(self, project: Any, params: dict[str, Any], request_id: str) -> None:
        self._call("PUT", f"{self._request(request_id)}/cancel", None, ok=(200, 202, 400))

    def register(self, name: str, **kind: Any) -> KindSpec:
        """``register_kind(name, ...)`` with this application's callables."""
        return register_kind(
            name,
            self.body,
            poll=self.poll,
            on_webhook=self.on_webhook,
            cancel_remote=self.cancel_remote,
            **kind,
        )

    # ----- fal's queue ------------------------------------------------------------
    def _client(self) -> urllib3.PoolManager:
        """One pool per application and process (kept-alive connections: a poll
        is a round trip, not a new connection)."""
        if self._http is None:
            with self._lock:
                if self._http is None:
                    timeout = urllib3.Timeout(total=self._timeout_s)
                    self._http = urllib3.PoolManager(maxsize=8, timeout=timeout, retries=False)
        return self._http

    def _request(self, request_id: str) -> str:
        return f"{self._requests}/{quote(request_id, safe='')}"

    def _fetch(self, request_id: str) -> dict[str, Any]:
        answer = self._call("GET", self._request(request_id), None)
        units = _units(answer.headers.get(UNITS_HEADER))
        output = answer.json()
        if not isinstance(output, Mapping):
            raise RuntimeError("fal's result is not a JSON object")
        return self._shaped(output, units)

    def _shaped(self, output: Mapping[str, Any], units: float | None) -> dict[str, Any]:
        shaped = dict(self.result(output, units) if self.result is not None else output)
        if units is not None:
            shaped.setdefault("billable_units", units)
        return shaped

    def _base(self) -> str:
        return (self._queue_url or os.environ.get(QUEUE_URL_ENV) or QUEUE_URL).rstrip("/")

    def _call(
        self,
        method: str,
        path: str,
        secrets: Mapping[str, str] | None,
        *,
        ok: tuple[int, ...] = (200, 202),
        json_body: Any = None,
        query: Mapping[str, str] | None = None,
    ) -> Answer:
        headers = {"Authorization": f"Key {_key(secrets)}", "Accept": "application/json"}
        url = f"{self._base()}/{path}"
        if query:
            url += "?" + urlencode(query)
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        try:
            raw = self._client().request(method, url, body=body, headers=headers)
        except urllib3.exceptions.HTTPError as exc:
            raise ConnectionError(f"fal's queue could not be reached: {exc}") from None
        answer = Answer(raw.status, raw.data, raw.headers)
        if answer.status_code in (401, 403):
            raise JobRefused(f"fal refused the key ({answer.status_code})")
        if answer.status_code == 422:
            raise JobRefused(f"fal refused the arguments: {answer.text[:300]}")
        if answer.status_code not in ok:
            raise RuntimeError(f"fal's queue answered {answer.status_code}: {answer.text[:200]}")
        return answer


class Answer:
    """One answer of fal's queue: its status, body and headers."""

    def __init__(self, status_code: int, data: bytes, headers: Mapping[str, str]):
        self.status_code, self.data, self.headers = status_code, data, headers

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    def json(self) -> Any:
        try:
            return json.loads(self.data)
        except ValueError:
            shown = self.text[:80]
            raise RuntimeError(f"fal's queue answered something not JSON: {shown!r}") from None


def _key(secrets: Mapping[str, str] | None) -> str:
    key = (secrets or {}).get(credentials.FAL) or credentials.ambient_fal_key()
    key = key or os.environ.get("FAL_KEY")
    if not key:
        raise ConfigError(
            "no fal key: give the worker NW_SECRET_FAL, bind one with falaw, or set FAL_KEY"
        )
    return key


def _units(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
