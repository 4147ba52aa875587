"""Fixtures of the integration tests beyond nsq_testing's: ``browser``, Debian's Chromium
driven by Playwright, headless, for nsqadmin's browser tests (``_browser`` has their helpers;
skipped, saying why, where either is missing), and ``etcd_client``, an etcd client of the
``etcd`` fixture's server for the replication tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nsq_testing import DEADLINE, Etcd
from nsqd.replication.etcd import EtcdClient

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=ARGS)
        sync_api.expect.set_options(timeout=DEADLINE * 1000)  # (5 s by default)
        try:
            yield browser
        finally:
            sync_api.expect.set_options(timeout=5_000)
            browser.close()


@pytest.fixture
async def etcd_client(etcd: Etcd) -> AsyncIterator[EtcdClient]:
    """A client of the test's etcd (what the replication tests read placements and states with)."""
    client = EtcdClient([etcd.endpoint])
    try:
        yield client
    finally:
        await client.aclose()
