"""Every exception nw raises on purpose: one tree under ``NwJobsError``.

```
NwJobsError
├── InvalidInput                  the caller's input is wrong; nothing was written
│   ├── InvalidValue (ValueError)     a value out of range or of the wrong form
│   │   ├── InvalidJobId                  an id that cannot name a job
│   │   ├── ProjectError                  a folder that is not a usable project
│   │   └── PlanError                     a value that cannot be read as a plan
│   │       └── NonCanonicalPlan (+ InvalidType)
│   ├── InvalidType (TypeError)       a value of a type nw cannot take (params not JSON)
│   └── UnknownKind (KeyError)        a kind neither dispatched nor registered
├── BudgetExceeded                the spend cap refused the job; nothing was written
├── ConfigError                   the setup is wrong, not the request
│   ├── InvalidSetting (ValueError)   a JobsConfig value, the database URL, an app setting
│   ├── RateTableError (ValueError)   a rate table file that cannot be used
│   └── KindImportError (ImportError) a registered kind's target does not import
├── JobStoreError (RuntimeError)  the job store cannot be read or written
├── JobRefused, JobCancelled      a body's own word on how it ended
└── Unpriceable                   a pricer's answer to the quote (never escapes it)
```

The split is what a surface answers: ``InvalidInput`` is the caller's to fix
(HTTP 400, one line from the CLI); ``BudgetExceeded`` needs an approval (402);
``JobStoreError`` may pass (503); ``ConfigError`` is the operator's; anything
outside the tree is a bug. Each class keeps the built-in base the public API
documents (``enqueue`` raises ``KeyError`` for an unknown kind, ``TypeError``
for params that are not JSON, ``ValueError`` for malformed ``units``), so
``except KeyError`` in a caller still works.

The tree lives here, beneath both ``nw.project`` / ``nw.plans`` /
``nw.pricing`` and ``nw.jobs``, because importing anything under ``nw.jobs``
runs that package's facade, which imports ``nw.project``: a lower module
cannot import its errors from ``nw.jobs`` without a cycle. ``nw.jobs.core.errors``
re-exports it all and is where the job API documents it.
"""

from __future__ import annotations

from typing import Any


class NwJobsError(Exception):
    """The root: an exception nw raised on purpose, with a message for a person."""


# ----- the caller's input ------------------------------------------------------------------
class InvalidInput(NwJobsError):
    """The caller's input is wrong (a bad id, params, kind, status, project);
    nothing was read or written on its account."""


class InvalidValue(InvalidInput, ValueError):
    """A value of the right type but the wrong form (``units``, ``status``, ``limit``)."""


class InvalidType(InvalidInput, TypeError):
    """A value of a type nw cannot take (params that are not JSON, naming the key)."""


class UnknownKind(InvalidInput, KeyError):
    """A kind that is neither in ``dispatch`` nor registered."""

    def __str__(self) -> str:  # KeyError's own str() quotes the message
        return str(self.args[0]) if self.args else ""


class InvalidJobId(InvalidValue):
    """An id from outside that cannot name a job."""


class ProjectError(InvalidValue):
    """The folder is not a usable project (missing, not a folder, bad metadata)."""


class PlanError(InvalidValue):
    """A value that cannot be read as a plan (wrong shape, unknown schema)."""


class NonCanonicalPlan(PlanError, InvalidType):
    """A plan holds a value with no canonical form, so it cannot be identified.

    Also a ``TypeError``, like every other params value that is not JSON.
    """

    def __init__(self, path: str, what: str):
        super().__init__(f"{path} has no canonical form ({what}); the plan cannot be identified")
        self.path = path
        self.what = what


# ----- the spend cap -----------------------------------------------------------------------
class BudgetExceeded(NwJobsError):
    """``enqueue`` refused a job the project's spend cap (or its actor's,
    ``actor`` then names it) does not allow; nothing was written. The message
    names the cap, the committed spend and the quote."""

    def __init__(
        self,
        *,
        cap_usd: float,
        committed_usd: float,
        quote_usd: float | None,
        committed_is_lower_bound: bool = False,
        needs_approval: bool = False,
        actor: str | None = None,
        budget: str | None = None,
    ):
        self.cap_usd = cap_usd
        self.actor = actor
        self.budget = budget
        """The key of the stored budget that refused (``jobs.list_budgets``), or None
        for the caller's config caps."""
        self.committed_usd = committed_usd
        self.quote_usd = quote_usd
        self.committed_is_lower_bound = committed_is_lower_bound
        self.needs_approval = needs_approval
        at_least = "at least " if committed_is_lower_bound else ""
        committed = f"{at_least}{_money(committed_usd)} is committed (spent plus live estimates)"
        if quote_usd is not None:
            why = f"this job's quote of {_money(quote_usd)} would take it past the cap"
        elif needs_approval:
            why = "this job's cost is unknown, so it needs explicit approval (approved=True)"
        else:
            why = "nothing is left under the cap for a job whose cost is unknown"
        whose = f"spend cap of {actor}" if actor else "spend cap"
        if budget is not None:
            whose = f"budget {budget!r}"
        super().__init__(f"{whose} {_money(cap_usd)}: {committed}; {why}")


class ApprovalRequired(BudgetExceeded):
    """The stored approval policy is ``required`` (``jobs.set_approval``) and
    this job's estimate needs approval: it is enqueued only with
    ``approved=True``; nothing was written."""

    def __init__(self, *, quote_usd: float | None, threshold_usd: float):
        self.cap_usd = threshold_usd
        self.actor = None
        self.budget = None
        self.committed_usd = 0.0
        self.quote_usd = quote_usd
        self.committed_is_lower_bound = False
        self.needs_approval = True
        self.threshold_usd = threshold_usd
        cost = "its cost is unknown" if quote_usd is None else f"its quote is {_money(quote_usd)}"
        NwJobsError.__init__(
            self,
            f"approval required: {cost}, at or above the approval threshold of "
            f"{_money(threshold_usd)}, and the approval policy is 'required'; "
            "enqueue it with approved=True (--approve)",
        )


def _money(usd: float) -> str:
    """Cents, unless that would hide a sub-cent figure."""
    return f"${usd:.2f}" if abs(round(usd, 2) - usd) < 1e-9 else f"${usd:.6g}"


# ----- the system --------------------------------------------------------------------------
class ConfigError(NwJobsError):
    """The setup is wrong, not the request: the operator's to fix."""


class InvalidSetting(ConfigError, ValueError):
    """A setting that cannot work (a ``JobsConfig`` value, the database URL,
    a server or worker option)."""


class RateTableError(ConfigError, ValueError):
    """A rate table file that cannot be used (names the file and the problem)."""


class KindImportError(ConfigError, ImportError):
    """A registered kind's target does not import."""


class JobStoreError(NwJobsError, RuntimeError):
    """The job store cannot be read or written (corrupt file, lost database)."""


class JobStoreUnreachable(JobStoreError):
    """The job store's database could not be reached (connection lost, retries spent)."""


# ----- signals between parts -----------------------------------------------------------------
class JobRefused(NwJobsError):
    """A body declines the work with a message for the person (not a bug)."""

    def __init__(self, message: str, *, detail: Any = None):
        super().__init__(message)
        self.detail = detail


class JobCancelled(NwJobsError):
    """A body stopped at a boundary because ``should_cancel()`` turned true."""


class Unpriceable(NwJobsError):
    """A pricer cannot price this basis; the message says why (for the quote)."""
