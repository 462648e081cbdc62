"""nw.jobs.web: the JSON API and the live tray page, as one mountable ASGI app.

Needs the ``web`` extra (``pip install 'nw-jobs[web]'``: Starlette, uvicorn).
"""

from nw.jobs.web.app import create_app

__all__ = ["create_app"]
