"""Identity: canonical JSON, params hashing, job ids and their validation.

A job id is ``sha256(project_id : kind : basis)``: the basis is an explicit
idempotency key, a plan hash, or the canonical hash of the params. Ids are
always 64 lowercase hex characters, so an id from outside is checked by one
regular expression before it reaches any store.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from nw.errors import InvalidJobId, InvalidType, InvalidValue

_JOB_ID = re.compile(r"[0-9a-f]{64}")


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
    for key, value in params.items():
        if not isinstance(key, str):
            raise InvalidType(f"params key {key!r} is not a string")
        path = _first_unjsonable(value, key)
        if path is not None:
            where, what = path
            raise InvalidType(f"params[{where}] is not JSON-serializable ({what})")
    return dict(params)


def _first_unjsonable(value: Any, path: str) -> tuple[str, str] | None:
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (repr(path), f"{value!r}")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                return (f"{path!r}][{k!r}", "non-string key")
            found = _first_unjsonable(v, f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _first_unjsonable(v, f"{path}[{i}]")
            if found:
                return found
        return None
    return (repr(path), type(value).__name__)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, integral floats written as ints."""
    return json.dumps(_canon(value), sort_keys=True, separators=(",", ":"))


def _canon(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    return value


def params_hash(params: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(params).encode()).hexdigest()


def check_units(params: Mapping[str, Any]) -> int | None:
    """``params["units"]`` as a positive int, None when absent; else ``InvalidValue``."""
    if "units" not in params or params["units"] is None:
        return None
    units = params["units"]
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise InvalidValue(f"params['units'] must be a positive int, got {units!r}")
    return units
