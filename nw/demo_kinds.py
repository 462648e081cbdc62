"""The demo's kinds, registered on import: ``nw-jobs demo`` starts a worker
process with ``--import nw.demo_kinds``, and registers them in its own process
to enqueue its pipeline. Every kind runs ``nw.demo.simulated_render``."""

from __future__ import annotations

from nw.jobs.core.kinds import register_kind

KINDS = ("script.storyboard", "panel.render", "panel.animate", "voice.speak", "music.score")


def register() -> None:
    for kind in KINDS:
        register_kind(kind, "nw.demo:simulated_render")


register()
