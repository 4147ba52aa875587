"""The operator docs stay true: the configuration reference is what the parsers define, the
operations page explains every field nsqd's /stats returns, and every package has a README
that names its whole public API where it lists it, and only its own flags."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import urllib.request
from pathlib import Path

import trio
from nsq_testing import DEADLINE, WireClient

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
    base = f"http://{nsqd.http_address}"
    # and our keys: a retention (with the offsets it brings) and the offsets asked for
    urllib.request.urlopen(urllib.request.Request(
        f"{base}/topic/create?topic=docs&retention=1h&retention_bytes=1000000", method="POST"),
        timeout=DEADLINE).close()
    found: set[str] = set()
    for query in ("", "&include_offsets=true"):
        with urllib.request.urlopen(f"{base}/stats?format=json{query}", timeout=DEADLINE) as r:
            _keys(json.loads(r.read()), found)
    await client.aclose()
    await trio.sleep(0)
    assert {"retention", "earliest_offset", "mark_delete_offset"} <= found
    page = (DOCS / "operations.md").read_text(encoding="utf-8")
    missing = sorted(k for k in found if f"`{k}`" not in page)
    assert not missing, f"docs/operations.md does not explain /stats fields {missing}"


# -- what the docs claim about features ---------------------------------------------------------

def _all_docs() -> dict[str, str]:
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted(ROOT.glob("packages/*/README.md"))]
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in pages}


def _passages(text: str) -> list[str]:
    """Paragraphs, and each line of a table on its own (a row is one claim)."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            out.extend(lines)
        else:
            out.append(" ".join(lines))
    return out


MISSING = re.compile(r"not (?:yet )?(?:implemented|supported|available)|unsupported|"
                     r"no support|isn't there|is not there", re.IGNORECASE)
FEATURES = {"TLS": ("tls-cert", "tls-key", "tls-required", "https-address"),
            "snappy": ("snappy",), "deflate": ("deflate", "max-deflate-level")}


def test_no_doc_says_tls_snappy_or_deflate_are_missing():
    """nsqd offers them (its flags, and IDENTIFY negotiates them): no page may say otherwise."""
    generator = load_generator()
    nsqd_flags = dict(generator.DAEMONS[0][1]().flags)
    assert generator.DAEMONS[0][0] == "nsqd"
    wrong = []
    for feature, flags in FEATURES.items():
        assert all(flag in nsqd_flags for flag in flags), feature
        word = re.compile(rf"\b{feature}\b", re.IGNORECASE)
        for page, text in _all_docs().items():
            for passage in _passages(text):
                if word.search(passage) and MISSING.search(passage):
                    wrong.append(f"{page}: {passage[:120]}")
    assert not wrong, "docs say an implemented feature is missing:\n" + "\n".join(wrong)


def test_flags_the_not_implemented_table_names_are_accepted():
    """compatibility.md's "Not implemented yet" flags are accepted (that is its promise)."""
    generator = load_generator()
    known = {name for _, build, _ in generator.DAEMONS for name in build().flags}
    text = (DOCS / "compatibility.md").read_text(encoding="utf-8")
    section = text.split("## Not implemented yet\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`--([a-z0-9-]+)`", section))
    assert named and named <= known, named - known


def test_start_up_errors_are_quoted_as_the_daemons_print_them():
    """The start-up failures the docs quote are Go's texts, which the daemons print
    (tests/integration/test_startup_errors.py), not the Python ones they replaced."""
    docs = _all_docs()
    everything = "\n".join(docs.values())
    for stale in ("Address already in use", "[Errno", "--data-path=... in use"):
        assert stale not in everything, stale
    trouble = docs["docs/troubleshooting.md"]
    for current in ("failed to instantiate nsqd - listen (127.0.0.1:4150) failed - listen tcp "
                    "127.0.0.1:4150: bind: address already in use",
                    "failed to lock data-path: open ...: no such file or directory",
                    "cannot flock directory ... (possibly in use by another instance of nsqd)"):
        assert current in trouble, current


# -- the packages' READMEs ----------------------------------------------------------------------

PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
DAEMON_PACKAGES = {"nsqd": "nsqd", "nsqlookupd": "nsqlookupd", "nsqadmin": "nsqadmin",
                   "nsq_auth": "authd"}


def _public_names(package: Path) -> list[str]:
    """What the package's ``__init__.py`` lists in ``__all__`` (``=`` and ``+=``), read
    without importing it."""
    names: list[str] = []
    for init in package.glob("src/*/__init__.py"):
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            target = (node.target if isinstance(node, ast.AugAssign)
                      else node.targets[0] if isinstance(node, ast.Assign) else None)
            if isinstance(target, ast.Name) and target.id == "__all__":
                names += ast.literal_eval(node.value)
    return names


def test_every_package_has_a_readme_whose_links_resolve():
    for package in PACKAGES:
        readme = package / "README.md"
        assert readme.exists(), f"{package.name} has no README.md"
        for target in re.findall(r"\]\((?!https?:|#)([^)#]+)", readme.read_text(encoding="utf-8")):
            assert (package / target).exists(), f"{readme.relative_to(ROOT)}: {target}"


def test_a_readme_that_gives_the_public_api_names_all_of_it():
    """A README that says it lists ``__all__`` lists every name in it."""
    checked = 0
    for package in PACKAGES:
        text = (package / "README.md").read_text(encoding="utf-8")
        if "__all__" not in text:
            continue
        names = _public_names(package)
        assert names, package.name
        missing = [name for name in names if not re.search(rf"`{re.escape(name)}\b", text)]
        assert not missing, f"packages/{package.name}/README.md does not name {missing}"
        checked += 1
    assert checked >= 7


def test_the_daemons_readmes_name_only_their_own_flags():
    """The flags a daemon's README tables under "## Flags" are flags of that daemon."""
    generator = load_generator()
    checked = 0
    for program, build, _ in generator.DAEMONS:
        text = (ROOT / "packages" / DAEMON_PACKAGES[program] / "README.md").read_text(
            encoding="utf-8")
        if "\n## Flags\n" not in text:
            continue
        section = text.split("\n## Flags\n", 1)[1].split("\n## ", 1)[0]
        rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
        named = {name for row in rows for name in re.findall(r"`--([a-z0-9-]+)", row)}
        assert named, program
        unknown = named - set(build().flags)
        assert not unknown, f"{program}'s README names flags it does not have: {sorted(unknown)}"
        checked += 1
    assert checked >= 3
