"""Identity: params hashing, job ids and their validation (JSON forms: nw.canonical).

A job id is ``sha256(project_id : kind : basis)``: the basis is an explicit
idempotency key, a plan hash, or the canonical hash of the params. Ids are
always 64 lowercase hex characters, so an id from outside is checked by one
regular expression before it reaches any store.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from nw import canonical
from nw.errors import InvalidJobId, InvalidType, InvalidValue

_JOB_ID = re.compile(r"[0-9a-f]{64}")

MAX_UNITS = 1_000_000_000
"""``params["units"]``'s largest: a job's predicted seconds scale with it."""


def check_job_id(job_id: object) -> str:
    """The id if it could name a job, else ``InvalidJobId`` (never a path)."""
    if isinstance(job_id, str) and _JOB_ID.fullmatch(job_id):
        return job_id
    shown = repr(job_id)[:80]
    raise InvalidJobId(f"not a job id: {shown} (expected 64 hex characters)")


def is_job_id(job_id: object) -> bool:
    return isinstance(job_id, str) and _JOB_ID.fullmatch(job_id) is not None


def job_id_for(project_id: str, kind: str, basis: str) -> str:
    return hashlib.sha256(f"{project_id}:{kind}:{basis}".encode()).hexdigest()


def check_json_params(params: Any) -> dict[str, Any]:
    """A JSON-able dict of params, or ``InvalidType`` (a ``TypeError``) naming the offending key."""
    if not isinstance(params, Mapping):
        raise InvalidType(f"params must be a dict, not {type(params).__name__}")
    found = canonical.first_unjsonable(params, "params")
    if found is not None:
        where, what = found
        raise InvalidType(f"{where} is not JSON-serializable ({what})")
    return dict(params)


def params_hash(params: Mapping[str, Any]) -> str:
    """The job-id basis of params without a plan (``nw.canonical.ID_FORM``)."""
    return canonical.ID_FORM.sha256(params, "params")


def check_units(params: Mapping[str, Any]) -> int | None:
    """``params["units"]`` as a positive int, None when absent; else ``InvalidValue``."""
    if "units" not in params or params["units"] is None:
        return None
    units = params["units"]
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise InvalidValue(f"params['units'] must be a positive int, got {units!r}")
    if units > MAX_UNITS:
        raise InvalidValue(f"params['units'] must be at most {MAX_UNITS}, got {units}")
    return units
