"""A headless Chromium for the browser tests.

Driven by Selenium through Debian's ``chromium-driver`` (the driver is built
from the same source as ``chromium``, so the two versions always match, and
nothing is downloaded at test time). Skipped when either binary or Selenium
is missing, unless ``NW_REQUIRE_BROWSER=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.helpers import HEADLESS_CHROMIUM_FLAGS


def _browser_or_skip():
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    reason = None
    if missing:
        reason = f"needs {' and '.join(missing)} (apt-get install chromium chromium-driver)"
    else:
        try:
            import selenium  # noqa: F401
        except ImportError:
            reason = "needs selenium (pip install 'nw-jobs[test]')"
    if reason:
        if os.environ.get("NW_REQUIRE_BROWSER") == "1":
            pytest.fail(f"NW_REQUIRE_BROWSER=1 but the browser test {reason}")
        pytest.skip(reason)


@pytest.fixture
def browser():
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="nw-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        *HEADLESS_CHROMIUM_FLAGS,
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=Service(executable_path=shutil.which("chromedriver"))
    )
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
