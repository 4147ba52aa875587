"""Fixtures of the integration tests beyond nsq_testing's: ``browser``, Debian's Chromium
driven by Playwright, headless, for nsqadmin's browser tests (``_browser`` has their helpers;
skipped, saying why, where either is missing); ``etcd_client``, an etcd client of the
``etcd`` fixture's server for the replication tests; ``small_tmpfs``, a small disk to fill."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
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


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted on a fresh directory (needs root, which CI has; skipped with the
    reason elsewhere). Listed before ``run_daemon`` so that the daemons stop before it is
    unmounted."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount/umount command here to make a small tmpfs for a full disk")
    where = tmp_path / "small-fs"
    where.mkdir()
    done = subprocess.run([mount, "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill up (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run([umount, str(where)], capture_output=True, check=False).returncode:
            subprocess.run([umount, "-l", str(where)], capture_output=True, check=False)
        shutil.rmtree(where, ignore_errors=True)
