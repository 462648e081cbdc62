"""Pipelines as plain data: a spec's steps read or refused, its identity, its
order, what a new waiting job starts as, and a pipeline's progress and ETA.

A spec maps a step name to ``{"kind", "params", "after": [names]}`` (and a
step's optional ``label``, ``idempotency_key``, ``priority``, ``limit_key``,
``not_before``). ``after`` names steps; an entry may be ``{"step": name,
"allow_failure": true}`` to run even when that step fails or is cancelled.
Nothing here touches a store or a clock it is not handed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nw import canonical
from nw.errors import InvalidType, InvalidValue
from nw.jobs.core.checks import check_name
from nw.jobs.core.model import TERMINAL_STATUSES
from nw.jobs.core.records import to_dict

#: The fields a step may carry (besides ``kind``, ``params`` and ``after``).
STEP_FIELDS = (
    "kind",
    "params",
    "after",
    "label",
    "idempotency_key",
    "priority",
    "limit_key",
    "not_before",
)
#: At most this many steps in one pipeline (one transaction writes them all).
MAX_STEPS = 10_000
#: The record fields that tie a job to its pipeline.
PIPELINE_FIELD, STEP_FIELD, AFTER_FIELD = "pipeline_id", "step", "after"


@dataclass(frozen=True)
class Edge:
    """``job_id`` waits on ``upstream_id``; ``step`` is the upstream's step name
    (its result's key in the dependent's ``inputs``; None for ``after=`` job ids)."""

    upstream_id: str
    job_id: str
    step: str | None
    allow_failure: bool = False

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Step:
    """One step as read from a spec: its fields, and what it comes after."""

    name: str
    fields: dict[str, Any]
    after: tuple[tuple[str, bool], ...]  # (step name, allow_failure)


def read_steps(steps: Any) -> dict[str, Step]:
    """The spec's steps, checked: names, fields, ``after`` naming known steps, no
    cycle. Raises ``InvalidInput`` (one line, naming the step) before anything
    else is done."""
    if not isinstance(steps, Mapping):
        raise InvalidType(
            f"steps must be a mapping of step name to step, not {type(steps).__name__}"
        )
    if not steps:
        raise InvalidValue("a pipeline needs at least one step")
    if len(steps) > MAX_STEPS:
        raise InvalidValue(f"a pipeline has at most {MAX_STEPS} steps, got {len(steps)}")
    out: dict[str, Step] = {}
    for name, step in steps.items():
        name = check_name(name, "step name")
        if not isinstance(step, Mapping):
            raise InvalidType(f"step {name!r}: a step is a mapping, not {type(step).__name__}")
        unknown = sorted(set(map(str, step)) - set(STEP_FIELDS) - {"allow_failure"})
        if unknown:
            raise InvalidType(
                f"step {name!r}: unknown field(s) {', '.join(map(repr, unknown))}; a step has "
                f"{', '.join(STEP_FIELDS)}"
            )
        if "kind" not in step:
            raise InvalidValue(f"step {name!r}: a step needs a 'kind'")
        out[name] = Step(name, dict(step), _read_after(name, step.get("after")))
    for step in out.values():
        for up, _ in step.after:
            if up not in out:
                raise InvalidValue(f"step {step.name!r}: 'after' names unknown step {up!r}")
    order(out)  # refuses a cycle
    return out


def _read_after(name: str, after: Any) -> tuple[tuple[str, bool], ...]:
    if after is None:
        return ()
    if isinstance(after, (str, bytes, Mapping)) or not isinstance(after, Sequence):
        raise InvalidType(f"step {name!r}: 'after' must be a list of step names")
    seen: dict[str, bool] = {}
    for entry in after:
        if isinstance(entry, Mapping):
            extra = sorted(set(map(str, entry)) - {"step", "allow_failure"})
            if extra or "step" not in entry:
                raise InvalidType(
                    f"step {name!r}: an 'after' entry is a step name or "
                    "{'step': name, 'allow_failure': true}"
                )
            up, allow = entry["step"], entry.get("allow_failure", False)
            if not isinstance(allow, bool):
                raise InvalidType(f"step {name!r}: 'allow_failure' must be true or false")
        else:
            up, allow = entry, False
        if not isinstance(up, str):
            raise InvalidType(f"step {name!r}: 'after' must name steps, got {up!r}")
        if up == name:
            raise InvalidValue(f"pipeline has a cycle: {name} -> {name}")
        seen[up] = seen.get(up, False) or allow
    return tuple(seen.items())


def order(steps: Mapping[str, Step]) -> list[str]:
    """The step names, each after every step it comes after (Kahn's algorithm,
    ties in spec order); a cycle is ``InvalidValue`` naming one."""
    below: dict[str, list[str]] = {name: [] for name in steps}
    missing = {name: len(step.after) for name, step in steps.items()}
    for name, step in steps.items():
        for up, _ in step.after:
            below[up].append(name)
    ready = [name for name, n in missing.items() if n == 0]
    out: list[str] = []
    while ready:
        name = ready.pop(0)
        out.append(name)
        for down in below[name]:
            missing[down] -= 1
            if missing[down] == 0:
                ready.append(down)
    if len(out) < len(steps):
        raise InvalidValue(f"pipeline has a cycle: {' -> '.join(_a_cycle(steps, set(out)))}")
    return out


def _a_cycle(steps: Mapping[str, Step], done: set[str]) -> list[str]:
    """One cycle among the steps Kahn's algorithm could not order."""
    name = next(n for n in steps if n not in done)
    path: list[str] = []
    while name not in path:
        path.append(name)
        name = next(up for up, _ in steps[name].after if up not in done)
    cycle = [*path[path.index(name) :], name]
    return list(reversed(cycle))


def spec_hash(project_id: str, steps: Mapping[str, Step]) -> str:
    """The pipeline's identity: its project and its steps (kinds, params, order,
    options), in canonical form; the same steps resubmitted hash the same."""
    spec = {
        name: {
            **{k: v for k, v in step.fields.items() if k not in ("after", "label")},
            "after": sorted([up, allow] for up, allow in step.after),
        }
        for name, step in steps.items()
    }
    return canonical.ID_FORM.sha256({"project": project_id, "steps": spec}, "steps")


def pipeline_id_of(digest: str) -> str:
    return f"pl-{digest[:32]}"


# ----- a new waiting job -----------------------------------------------------------------
@dataclass(frozen=True)
class Start:
    """How a create's new waiting jobs start: each one's count of upstreams not
    ended (``unmet``), those free to run now (``released``), those an upstream
    that already failed or was cancelled stops (``doomed``: job id -> the
    upstream step that stops it and that step's state)."""

    unmet: dict[str, int]
    released: list[str]
    doomed: dict[str, tuple[str, str]]


def start_of(
    waiting: Sequence[str], edges: Sequence[Edge], states: Mapping[str, tuple[str, str | None]]
) -> Start:
    """``states``: each upstream's job state and step name, read under the
    create's lock (a missing upstream is ``InvalidValue``)."""
    ups: dict[str, list[Edge]] = {job: [] for job in waiting}
    for edge in edges:
        if edge.job_id in ups:
            ups[edge.job_id].append(edge)
    unmet: dict[str, int] = {}
    released: list[str] = []
    doomed: dict[str, tuple[str, str]] = {}
    for job in waiting:
        n = 0
        for edge in ups[job]:
            got = states.get(edge.upstream_id)
            if got is None:
                raise InvalidValue(f"'after' names no job of this project: {edge.upstream_id}")
            state, step = got
            if state in ("queued", "running", "cancelling", "pending"):
                n += 1
            elif state != "succeeded" and not edge.allow_failure and job not in doomed:
                doomed[job] = (step or edge.step or edge.upstream_id, state)
        unmet[job] = n
        if n == 0 and job not in doomed:
            released.append(job)
    return Start(unmet, released, doomed)


def stopped_by(via: str, state: str) -> str:
    """The error of a job an upstream stopped (the stores' trigger and
    statement say the same)."""
    how = "failed" if state == "failed" else "was cancelled"
    return f"cancelled: upstream step '{via}' {how}"


# ----- a pipeline as read ------------------------------------------------------------------
def status_of(states: Sequence[str]) -> str:
    """A pipeline's status from its steps': running while any step is live (a
    cancel asked: cancelling), else succeeded when all did, failed when any
    failed, else cancelled."""
    live = {"queued", "running", "cancelling"}
    if any(s in live for s in states):
        if "cancelling" in states:
            return "cancelling"
        return "running" if any(s != "queued" for s in states) else "queued"
    if all(s == "succeeded" for s in states):
        return "succeeded"
    return "failed" if "failed" in states else "cancelled"


def critical_eta(
    after: Mapping[str, Sequence[str]],
    remaining: Mapping[str, float | None],
    states: Mapping[str, str],
) -> tuple[dict[str, float | None], float | None]:
    """Seconds from now until each step ends, along the longest path of its
    upstreams: a finished step 0, a live one its own ``remaining`` (learned
    duration, plus its queue wait while queued) after its last upstream ends;
    None when a step on the path cannot be timed. Returns (per step, the
    pipeline's: the latest of its steps)."""
    done: dict[str, float | None] = {}

    def end(name: str) -> float | None:
        if name in done:
            return done[name]
        if states[name] in ("succeeded", "failed", "cancelled"):
            done[name] = 0.0
            return 0.0
        own = remaining.get(name)
        starts = [end(up) for up in after.get(name, ())]
        if own is None or any(s is None for s in starts):
            done[name] = None
            return None
        done[name] = max([0.0, *(s for s in starts if s is not None)]) + own
        return done[name]

    for name in order_names(after):
        end(name)
    live = [done[n] for n in done if states[n] not in ("succeeded", "failed", "cancelled")]
    if any(v is None for v in live):
        return done, None
    return done, max([0.0, *(v for v in live if v is not None)])


def order_names(after: Mapping[str, Sequence[str]]) -> list[str]:
    """Step names, upstreams first (the stored spec is acyclic)."""
    steps = {name: Step(name, {}, tuple((up, False) for up in ups)) for name, ups in after.items()}
    return order(steps)


# ----- what a caller reads -----------------------------------------------------------------
@dataclass(frozen=True)
class PipelineStep:
    """One step of a pipeline as read: its job, what it comes after, and when
    it is expected to end (``eta_s``: seconds from now along its upstreams'
    longest path; 0 once ended, None when that cannot be said)."""

    name: str
    job: Any  # nw.jobs.Job
    after: list[str]
    allow_failure: list[str]
    eta_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "job": to_dict(self.job),
            "after": list(self.after),
            "allow_failure": list(self.allow_failure),
            "eta_s": self.eta_s,
        }


@dataclass(frozen=True)
class Pipeline:
    """A pipeline as read (``jobs.get_pipeline``): its status (``queued``,
    ``running``, ``cancelling``, ``succeeded``, ``failed``, ``cancelled``), its
    steps in order, ``pct`` (the share of steps ended, 0-100), its ``quote``
    (the sum of its steps' quotes when enqueued: ``estimated_usd``, and
    ``lower_bound`` when a step's cost is unknown), ``actual_usd`` spent so far,
    and ``eta_s`` / ``eta_ts`` along the critical path (None: cannot be said),
    ``eta_confidence`` ``learned`` or ``prior`` (a live step's duration is only
    its kind's prior so far).
    ``created``: this call created it (False: it existed, a resubmission)."""

    pipeline_id: str
    label: str | None
    actor: dict[str, str] | None
    created_at: float
    status: str
    steps: list[PipelineStep]
    pct: float
    quote: dict[str, Any]
    actual_usd: float
    eta_s: float | None
    eta_ts: float | None
    eta_confidence: str | None = None
    created: bool = False

    def step(self, name: str) -> PipelineStep:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline_id": self.pipeline_id,
            "label": self.label,
            "actor": self.actor,
            "created_at": self.created_at,
            "status": self.status,
            "pct": self.pct,
            "quote": dict(self.quote),
            "actual_usd": self.actual_usd,
            "eta_s": self.eta_s,
            "eta_ts": self.eta_ts,
            "eta_confidence": self.eta_confidence,
            "created": self.created,
            "steps": [s.to_dict() for s in self.steps],
        }
