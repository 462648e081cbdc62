"""The API's JSON answers: Starlette's, except that text no UTF-8 can carry
(a lone surrogate in a row stored before the door refused one) is written as
its ``\\uXXXX`` escape instead of failing the whole answer with a 500."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse as _StarletteJSON


class JSONResponse(_StarletteJSON):
    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:  # rare: only then is every non-ASCII character escaped
            return json.dumps(
                content, ensure_ascii=True, allow_nan=False, indent=None, separators=(",", ":")
            ).encode("ascii")
