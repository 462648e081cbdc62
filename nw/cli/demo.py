"""``nw-jobs demo``: the simulated pipeline, on the embedded store."""

from __future__ import annotations

import argparse
import os

from nw.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    UserError,
    make_console,
    print_json,
)


def cmd_demo(args: argparse.Namespace) -> int:
    from nw.demo import DEMO_DIR, run_demo

    if os.environ.pop("NW_JOBS_DATABASE_URL", None):
        # The demo shows the embedded store; it must not write demo jobs into a database.
        make_console(stderr=True).print(
            "the demo uses the embedded store; NW_JOBS_DATABASE_URL ignored"
        )
    from pathlib import Path

    root = Path(args.project or DEMO_DIR)
    if root.exists() and not root.is_dir():
        raise UserError(f"--project {root}: not a folder (give a folder for the demo project)")
    # With --json the live view goes to stderr, so stdout is only the JSON.
    try:
        result = run_demo(
            root,
            console=make_console(stderr=args.json),
            plain=True if (args.plain or args.json) else None,
            speed=args.speed,
        )
    except OSError as exc:  # a folder that cannot be made or written
        raise UserError(f"--project {root}: {exc.strerror or exc}") from None
    if args.json:
        print_json(result)
    return EXIT_OK if result["finished"] else EXIT_ERROR
