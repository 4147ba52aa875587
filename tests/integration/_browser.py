"""What nsqadmin's browser tests share (their ``browser`` fixture is conftest's): Playwright
(the tests are skipped where it is missing), an nsqadmin process to point it at, a page with
the deadlines of a busy machine, and screenshots into artifacts/screenshots/."""

from __future__ import annotations

from pathlib import Path

import pytest
from nsq_testing import DEADLINE

sync_api = pytest.importorskip("playwright.sync_api")

SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


def shoot(target, name: str, *, full_page: bool = True) -> Path:
    """A screenshot of ``target`` (a page, whole unless ``full_page`` is False, or a
    locator: then False) as ``nsqadmin-<name>.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"nsqadmin-{name}.png"
    target.screenshot(path=str(path), **({"full_page": True} if full_page else {}))
    assert path.stat().st_size > 0
    return path


def new_page(browser, width=1280, height=900):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(DEADLINE * 1000)  # a busy machine renders slowly
    return page


def nsqadmin_for(run_daemon, nsqd, *flags: str) -> str:
    """An nsqadmin process watching ``nsqd`` (``flags`` beside); its base URL."""
    admin = run_daemon("nsqadmin", f"--nsqd-http-address={nsqd.http_address}",
                       "--http-address=127.0.0.1:0", *flags, expect=("HTTP",))
    return f"http://{admin.http_address}"
