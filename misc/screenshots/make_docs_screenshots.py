"""Regenerate the documentation site's pictures: docs-front.png, docs-tutorial-end.png.

    mkdocs build --strict && PYTHONPATH=. python misc/screenshots/make_docs_screenshots.py

Needs the ``docs`` extra (for the build), Debian ``chromium`` and
``chromium-driver`` and ``selenium``. It opens the built site (``site/``)
from disk: the front page as a reader first sees it, and the tutorial
scrolled to its end.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

from tests.helpers import HEADLESS_CHROMIUM_FLAGS, wait_until  # noqa: E402

SITE = ROOT / "site"
SHOTS = {
    "docs-front.png": ("index.html", False),
    "docs-tutorial-end.png": ("tutorial/index.html", True),
}


def main() -> None:
    if not (SITE / "index.html").exists():
        sys.exit("no site/index.html: run `mkdocs build --strict` first")
    options = webdriver.ChromeOptions()
    for flag in (*HEADLESS_CHROMIUM_FLAGS, "--hide-scrollbars", "--window-size=1280,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=Service(executable_path=shutil.which("chromedriver"))
    )
    try:
        for name, (page, to_end) in SHOTS.items():
            driver.get((SITE / page).as_uri())
            wait_until(
                lambda: driver.execute_script("return document.readyState") == "complete",
                timeout=20,
            )
            if to_end:
                driver.execute_script("window.scrollTo(0, document.body.scrollHeight)")
                wait_until(
                    lambda: driver.execute_script(
                        "return window.innerHeight + window.scrollY"
                        " >= document.body.scrollHeight - 2"
                    ),
                    timeout=20,
                )
            driver.save_screenshot(str(HERE / name))
            print(HERE / name)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
