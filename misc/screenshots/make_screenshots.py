"""Regenerate the pictures in ``misc/screenshots/``: demo, tray, narrow, detail.

    PYTHONPATH=. python misc/screenshots/make_screenshots.py

Needs Debian ``chromium`` and ``chromium-driver``, plus ``selenium`` and the
``web`` extra. Everything runs in a temporary folder and stops when done.

demo.png: the second run of ``nw-jobs demo`` mid-flight (learned ETAs, a
cancellation, a refusal, a lower-bound cost), recorded by rich as SVG and
rendered to PNG by headless Chromium. tray.png: the web tray over that
project's history plus a few live jobs (a learned ETA, an observed one, one
still estimating, one with an unpriced call), captured through Selenium.
narrow.png: that tray 420 px wide. detail.png: the failed narration's own
view (``#job=<id>``).
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from rich.console import Console  # noqa: E402

from nw import Project  # noqa: E402
from nw.demo import DEMO_CONFIG, DemoRun, frame, next_run_number, pipeline, run_demo  # noqa: E402
from nw.jobs import JobCancelled, cancel_job, enqueue, get_job, list_jobs, to_dict  # noqa: E402
from nw.jobs.execution.runtimes import shutdown_runtimes  # noqa: E402
from tests.helpers import HEADLESS_CHROMIUM_FLAGS, wait_until  # noqa: E402

WIDTH = 150
CHROMIUM_FLAGS = [
    *HEADLESS_CHROMIUM_FLAGS,
    "--hide-scrollbars",
    "--disable-breakpad",
    "--disable-crash-reporter",
]


def demo_svg(root: Path) -> str:
    """Run the demo once quietly (to teach ETAs), then record run 2 mid-flight."""
    run_demo(root, console=Console(file=io.StringIO()), plain=True)
    project = Project(root)
    run = DemoRun(project, next_run_number(project, DEMO_CONFIG), pipeline(), DEMO_CONFIG)
    started = time.monotonic()
    shot = None
    while not run.finished:
        run.tick()
        by_name = run.jobs
        moment = (
            by_name.get("score", {}).get("status") == "cancelled"
            and by_name.get("narration", {}).get("status") == "failed"
            and any((by_name.get(a, {}).get("pct") or 0) > 30 for a in ("animate1", "animate2"))
        )
        if moment and shot is None:
            console = Console(
                record=True,
                width=WIDTH,
                force_terminal=True,
                color_system="truecolor",
                file=io.StringIO(),
            )
            console.print(frame(run, time.monotonic() - started, WIDTH))
            shot = console.export_svg(title="nw-jobs demo")
        time.sleep(0.05)
    shutdown_runtimes()
    if shot is None:
        raise SystemExit("the demo ended before the moment to capture")
    return shot


def svg_to_png(svg: str, out: Path, work: Path) -> None:
    width, height = (
        int(float(v)) for v in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups()
    )
    source = work / "demo.svg"
    source.write_text(svg, encoding="utf-8")
    subprocess.run(
        [
            shutil.which("chromium"),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={work / 'profile-svg'}",
            f"--window-size={width},{height}",
            f"--screenshot={out}",
            source.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )


class Hold:
    """A body that reports what it is told and then waits for the script to end."""

    def __init__(self, events, stop: threading.Event):
        self.events, self.stop = events, stop

    def __call__(self, project, params, *, on_event, should_cancel):
        for event in self.events:
            on_event(event)
            time.sleep(0.3)
        while not self.stop.wait(0.1):
            if should_cancel():
                raise JobCancelled("stopped")
        return {}


def tray_png(root: Path, out: Path, work: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from nw.jobs.web import create_app
    from tests.web.server import serving

    project = Project(root)
    stop = threading.Event()
    live = []

    def start(kind, params, events):
        job = enqueue(
            project, kind, params, dispatch={kind: Hold(events, stop)}, config=DEMO_CONFIG
        )
        live.append(job.job_id)
        return job

    start(
        "music.score",
        {"title": "Score: end credits", "model": "suno", "operation": "song-v2"},
        [
            {"stage_index": 1, "stage_count": 4, "current_transform": "arrange"},
            {"fraction": 0.42, "current_transform": "orchestrate"},
        ],
    )
    start(
        "panel.upscale",
        {
            "title": "Upscale panel 2 to 4K",
            "model": "esrgan",
            "operation": "x4",
            "output_kind": "image",
            "estimated_usd": 0.02,
        },
        [
            {
                "stage_index": 0,
                "stage_count": 2,
                "current_transform": "tile",
                "actual_usd": 0.12,
                "has_unknown_costs": True,
            }
        ],
    )
    start(
        "assemble.animatic",
        {"title": "Assemble animatic", "model": "ffmpeg", "operation": "concat"},
        [],
    )
    learned = start(
        "panel.animate",
        {
            "title": "Animate panel 3",
            "model": "kling-v2",
            "operation": "i2v",
            "output_kind": "video",
            "duration_s": 5,
            "estimated_usd": 0.35,
        },
        [{"stage_index": 1, "stage_count": 4, "current_transform": "generate"}],
    )
    profile = work / "profile-tray"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1100,900"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=Service(executable_path=shutil.which("chromedriver"))
    )
    try:
        with serving(create_app([project], poll_interval_s=0.2)) as url:
            driver.get(url + "/")
            wait_until(
                lambda: len(driver.find_elements("css selector", "article.job")) == 4,
                what="four active cards",
            )

            def pct() -> float:
                job = get_job(project, learned.job_id, config=DEMO_CONFIG)
                return to_dict(job).get("pct") or 0

            wait_until(lambda: pct() >= 35, what="the learned job to be a third done")
            time.sleep(0.6)  # let the page draw the last event (a picture, not an assertion)
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1100, min(int(height) + 20, 1150))
            time.sleep(0.3)
            driver.save_screenshot(str(out))
            # The same tray on a phone-sized window: nothing is cut off or scrolls sideways.
            driver.set_window_size(420, 1150)
            time.sleep(0.6)
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(420, min(int(height) + 20, 2200))
            time.sleep(0.4)
            driver.save_screenshot(str(out.with_name("narrow.png")))
            # A failed job's own view: error, grade, attempts, trail, cost, params, Retry.
            failed = list_jobs(project, status="failed", limit=1, config=DEMO_CONFIG)[0]
            driver.set_window_size(1100, 1150)
            driver.get(f"{url}/#job={failed.job_id}")
            wait_until(
                lambda: driver.find_elements("css selector", "#detail table.trail"),
                what="the job's view with its trail",
            )
            time.sleep(1.2)  # the trail and a live event drawn
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1100, min(int(height) + 20, 1600))
            time.sleep(0.4)
            driver.save_screenshot(str(out.with_name("detail.png")))
    finally:
        driver.quit()
        stop.set()
        for job_id in live:
            cancel_job(project, job_id, config=DEMO_CONFIG)
        shutdown_runtimes()


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="nw-shots-"))
    try:
        root = work / "nw-demo"
        svg = demo_svg(root)
        svg_to_png(svg, HERE / "demo.png", work)
        tray_png(root, HERE / "tray.png", work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote demo.png, tray.png, narrow.png and detail.png in {HERE}")


if __name__ == "__main__":
    main()
