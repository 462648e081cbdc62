"""``nw-jobs``: the command line over the facade.

Each subcommand is a thin call into ``nw.jobs``; what a person sees is in
``nw.cli.render`` (rich on a terminal, plain lines in a pipe, ``--json`` for
scripts). What nw raises on purpose (``nw.errors``: a bad id, a missing
project, malformed JSON, a broken setting, an unreachable store) ends in one
line on stderr and exit status 1; set ``NW_JOBS_DEBUG=1`` to see the traceback
anyway. Anything else is a bug and keeps its traceback.

Exit statuses: 0 ok (``watch``: the job succeeded), 1 error, 2 usage,
3 ``watch``: the job failed, 4 ``watch``: the job was cancelled,
124 ``watch --timeout`` ran out, 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from nw.cli.common import (
    DEBUG_ENV,
    EXIT_CANCELLED,
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    PROJECT_ENV,
    TOKEN_ENV,
    WATCH_EXIT,
    UserError,
)
from nw.cli.parser import build_parser
from nw.errors import NwJobsError

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "PROJECT_ENV",
    "TOKEN_ENV",
    "WATCH_EXIT",
    "UserError",
    "build_parser",
    "main",
]


#: Options whose value may look like a flag to argparse (``--older-than -5d``):
#: joined to it, so the value's own check says what is wrong with it.
VALUE_OPTIONS = ("--older-than", "--since")


def _joined(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in VALUE_OPTIONS and arg[:1] == "-" and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(_joined(sys.argv[1:] if argv is None else argv))
    if args.version:
        from nw import __version__

        print(f"nw-jobs {__version__}")
        return EXIT_OK
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if getattr(args, "func", None) is None:  # `nw-jobs db` alone
        args.parser.print_help()
        return EXIT_USAGE
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except NwJobsError as exc:
        # Raised on purpose with a message for a person: the input, the setup or
        # the store. Anything else is a bug and keeps its traceback.
        if os.environ.get(DEBUG_ENV):
            raise
        from nw.canonical import escaped

        # one line, whatever the message carries (a caller's text, a stored name)
        message = escaped(str(exc) or type(exc).__name__)
        sys.stderr.write(f"nw-jobs: error: {message}\n")
        return EXIT_ERROR
