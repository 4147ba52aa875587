"""The operator docs stay true: the configuration reference is what the parsers define, and the
operations page explains every field nsqd's /stats returns."""

from __future__ import annotations

import importlib.util
import json
import re
import urllib.request
from pathlib import Path

import trio
from nsq_testing import WireClient

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs",
                                                  ROOT / "scripts" / "gen_config_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_reference_is_current():
    generator = load_generator()
    committed = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert committed == generator.render(), (
        "docs/configuration.md is out of date with the daemons' flags: run `make docs`")


def test_configuration_reference_names_every_flag_of_every_daemon():
    generator = load_generator()
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for program, build, _ in generator.DAEMONS:
        section = text.split(f"## {program}\n", 1)[1].split("\n## ", 1)[0]
        for name in build().flags:
            assert f"| `--{name}` |" in section, f"{program} --{name}"


def test_docs_exist_and_the_readme_points_to_them():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("getting-started", "configuration", "operations", "compatibility",
                 "troubleshooting"):
        assert (DOCS / f"{page}.md").exists(), page
        assert f"docs/{page}.md" in readme, page
    for text in [readme, *(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\((?!https?:|#)([^)#]+)", text):
            assert (ROOT / target).exists() or (DOCS / target).exists(), target


def _keys(value, found: set[str]) -> set[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            found.add(key)
            _keys(item, found)
    elif isinstance(value, list):
        for item in value:
            _keys(item, found)
    return found


async def test_operations_page_explains_every_stats_field(run_daemon):
    nsqd = run_daemon("nsqd", "--e2e-processing-latency-percentile=0.99")
    client = await WireClient.connect(nsqd.tcp_address)
    await client.identify(user_agent="docs-test")
    await client.pub("docs", b"x")
    await client.subscribe("docs", "c", rdy=1)
    await client.message()
    with urllib.request.urlopen(f"http://{nsqd.http_address}/stats?format=json", timeout=5) as r:
        stats = json.loads(r.read())
    await client.aclose()
    await trio.sleep(0)
    page = (DOCS / "operations.md").read_text(encoding="utf-8")
    missing = sorted(k for k in _keys(stats, set()) if f"`{k}`" not in page)
    assert not missing, f"docs/operations.md does not explain /stats fields {missing}"
