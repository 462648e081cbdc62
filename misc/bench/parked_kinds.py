"""The bench's parked kind: fal's queue (``nw.providers.fal``) against the local fake."""

from __future__ import annotations

from nw.providers.fal import FalQueue


def arguments(params):
    return {"prompt": params["prompt"]}


RENDER = FalQueue("fal-ai/kling-video/v2/master/text-to-video", arguments)
RENDER.register("bench.fal")
