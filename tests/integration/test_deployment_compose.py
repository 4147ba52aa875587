"""compose.yaml and the Dockerfile, checked without a Docker engine.

- compose.yaml is valid against the Compose specification's JSON schema (vendored in deploy/);
- every command line in it (and the image's default command) is accepted by the daemon's own
  parser and start-up checks, exactly as the daemon would run it;
- its topology is the one `nsq-cluster up` starts: same services, programs, flags and ports,
  apart from hosts and paths (the optional services of the ``monitoring`` profile, Prometheus
  and Grafana, are checked apart: test_metrics_deploy.py);
- the Dockerfile installs the daemons from uv.lock without development packages, runs as an
  unprivileged user, and exposes the ports the services listen on.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import nsqadmin.__main__
import nsqadmin.options
import nsqd.__main__
import nsqd.options
import nsqlookupd.options
import pytest
import yaml
from nsq_cluster import plan
from nsq_common import FlagSet

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
SCHEMA = ROOT / "deploy" / "compose-spec.json"
DOCKERFILE = ROOT / "Dockerfile"

FLAGSETS = {"nsqd": nsqd.options.build_flagset, "nsqlookupd": nsqlookupd.options.flag_set,
            "nsqadmin": nsqadmin.options.build_flagset}
ADDRESS_FLAGS = {"tcp-address", "http-address", "lookupd-tcp-address", "lookupd-http-address",
                 "lmstfy-http-address", "lmstfy-admin-http-address"}


def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def nsq_services(document: dict) -> dict:
    """``document`` without the services of a profile (monitoring) and etcd (replication's
    coordinator, checked on its own): those are not NSQ's."""
    services = {n: s for n, s in document["services"].items()
                if not s.get("profiles") and n != "etcd"}
    return {**document, "services": services}


@pytest.fixture(scope="module")
def compose() -> dict:
    """compose.yaml's NSQ services (see ``nsq_services``)."""
    return nsq_services(load_compose())


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def start_up_check(argv: list[str]) -> None:
    """Run ``argv`` through the daemon's command line handling, up to (not including) serving.

    Raises:
        AssertionError: the daemon would refuse it (its own message included).
    """
    program, args = argv[0], argv[1:]
    flags: FlagSet = FLAGSETS[program]()
    _, _, positional = flags.parse(args)
    assert not positional, f"{program}: stray arguments {positional} (flags after them are ignored)"
    try:
        if program == "nsqd":
            nsqd.__main__.parse_options(args)
        elif program == "nsqadmin":
            nsqadmin.__main__.parse_options(args)
        else:
            nsqlookupd.options.parse_args(args)
    except SystemExit as exc:
        raise AssertionError(f"{shlex.join(argv)} is refused (exit {exc.code})") from None


def flag_values(argv: list[str]) -> dict[str, str]:
    values = {}
    for arg in argv[1:]:
        name, _, value = arg.lstrip("-").partition("=")
        values[name] = value
    return values


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


# -- the schema ---------------------------------------------------------------------------------


def test_compose_yaml_is_valid_against_the_compose_specification(validator):
    errors = sorted(validator.iter_errors(load_compose()), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


@pytest.mark.parametrize("breakage", [
    lambda c: c["services"]["nsqd-1"].update(restart=["always"]),
    lambda c: c["services"]["nsqd-1"].update(healthcheck={"test": 42}),
    lambda c: c["services"]["nsqadmin"].update(depends_on={"nsqlookupd": {"condition": "up"}}),
    lambda c: c["services"]["nsqlookupd"].update(comand=["nsqlookupd"]),
    lambda c: c.update(volumes=["nsqd-1-data"]),
], ids=["restart", "healthcheck", "depends_on", "typo", "volumes"])
def test_the_schema_does_catch_mistakes(breakage, validator):
    broken = load_compose()
    breakage(broken)
    assert list(validator.iter_errors(broken))


# -- the command lines --------------------------------------------------------------------------


def test_every_command_is_accepted_by_its_daemon(compose):
    assert set(compose["services"]) == {"nsqlookupd", "nsqd-1", "nsqd-2", "nsqadmin"}
    for name, service in compose["services"].items():
        command = service["command"]
        assert command[0] in FLAGSETS, f"{name}: unknown program {command[0]}"
        start_up_check(command)


def test_services_find_each_other_by_service_name(compose):
    services = compose["services"]
    lookupd = flag_values(services["nsqlookupd"]["command"])
    assert lookupd["broadcast-address"] == "nsqlookupd"
    nsqds = {n: s for n, s in services.items() if s["command"][0] == "nsqd"}
    assert len(nsqds) == 2
    for name, service in nsqds.items():
        flags = flag_values(service["command"])
        assert flags["broadcast-address"] == name, "consumers must reach it by its service name"
        assert flags["lookupd-tcp-address"] == f"nsqlookupd:{port_of(lookupd['tcp-address'])}"
        assert service["depends_on"]["nsqlookupd"]["condition"] == "service_healthy"
    admin = flag_values(services["nsqadmin"]["command"])
    assert admin["lookupd-http-address"] == f"nsqlookupd:{port_of(lookupd['http-address'])}"
    assert port_of(admin["http-address"]) == 4171


def test_each_nsqd_keeps_its_data_in_its_own_named_volume(compose):
    volumes = []
    for service in compose["services"].values():
        if service["command"][0] != "nsqd":
            assert "volumes" not in service
            continue
        data_path = flag_values(service["command"])["data-path"]
        (mount,) = service["volumes"]
        volume, target = mount.split(":")
        assert target == data_path == "/data"
        volumes.append(volume)
    assert len(set(volumes)) == 2
    others = {"prometheus-data", "grafana-data", "etcd-data"}  # monitoring's, etcd's
    assert set(compose["volumes"]) == set(volumes) | others


def test_healthchecks_ping_the_services_own_http_port_and_restart_policies(compose):
    for name, service in compose["services"].items():
        http_port = port_of(flag_values(service["command"])["http-address"])
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD"
        (url,) = re.findall(r"http://[^'\"]+", " ".join(test))
        assert url == f"http://127.0.0.1:{http_port}/ping", name
        assert service["restart"] == "unless-stopped"
        assert service["stop_grace_period"] == "30s"


def test_published_ports_are_the_listening_ports_on_loopback(compose):
    for name, service in compose["services"].items():
        flags = flag_values(service["command"])
        listening = {port_of(flags[f]) for f in ("tcp-address", "http-address",
                                                 "lmstfy-http-address",
                                                 "lmstfy-admin-http-address") if f in flags}
        published = set()
        for mapping in service["ports"]:
            host_ip, host_port, container_port = mapping.split(":")
            assert host_ip == "127.0.0.1"
            assert host_port == container_port
            published.add(int(container_port))
        assert published == listening, name


# -- the same topology as nsq-cluster -----------------------------------------------------------


def test_the_local_cluster_runs_the_compose_topology(compose, tmp_path):
    local = {s.name: s.argv for s in plan(nsqd_count=2, data_dir=tmp_path, replicas=2).services
             if s.program != "etcd"}
    remote = {name: service["command"] for name, service in compose["services"].items()}
    assert set(local) == set(remote)
    for name, argv in local.items():
        assert argv[0] == remote[name][0], name
        mine, theirs = flag_values(argv), flag_values(remote[name])
        assert set(mine) == set(theirs), f"{name}: flags differ"
        for flag, value in mine.items():
            if flag in ADDRESS_FLAGS:  # the same port, on another host
                assert port_of(value) == port_of(theirs[flag]), f"{name} --{flag}"
            elif flag == "broadcast-address":
                assert (value, theirs[flag]) == ("127.0.0.1", name)
            elif flag == "data-path":
                assert Path(value) == tmp_path / name and theirs[flag] == "/data"
            elif flag == "etcd-endpoints":  # the same port, on etcd's service name
                assert (value, theirs[flag]) == ("http://127.0.0.1:4179", "http://etcd:4179")
            else:
                assert value == theirs[flag], f"{name} --{flag}"


def test_etcd_is_the_one_the_nsqds_name_and_keeps_its_data_in_a_volume(tmp_path):
    etcd = load_compose()["services"]["etcd"]
    flags = flag_values(etcd["command"])
    assert etcd["command"][0] == "etcd"
    assert flags["advertise-client-urls"] == "http://etcd:4179"
    assert port_of(flags["listen-client-urls"]) == 4179
    (mount,) = etcd["volumes"]
    assert mount == f"etcd-data:{flags['data-dir']}"
    assert etcd["healthcheck"]["test"][-3:] == ["--endpoints=http://127.0.0.1:4179", "endpoint",
                                                "health"]
    local = plan(nsqd_count=2, replicas=2, data_dir=tmp_path).etcd
    assert local is not None
    mine = flag_values(local.argv)
    assert set(mine) == set(flags)
    assert {k: v for k, v in mine.items() if "url" not in k and "cluster" not in k
            and k != "data-dir"} == {k: v for k, v in flags.items() if "url" not in k
                                     and "cluster" not in k and k != "data-dir"}
    for name, service in nsq_services(load_compose())["services"].items():
        if service["command"][0] == "nsqd":
            assert flag_values(service["command"])["etcd-endpoints"] == "http://etcd:4179"
            assert service["depends_on"]["etcd"]["condition"] == "service_healthy", name


def test_the_local_cluster_command_lines_are_accepted_too(tmp_path):
    for service in plan(nsqd_count=3, data_dir=tmp_path).services:
        start_up_check(service.argv)


# -- the Dockerfile -----------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_final_stage_is_slim_unprivileged_and_runs_a_daemon(compose):
    instructions = dockerfile_instructions()
    args = dict(rest.split("=", 1) for kw, rest in instructions if kw == "ARG" and "=" in rest)
    stages = [i for i, (kw, _) in enumerate(instructions) if kw == "FROM"]
    assert len(stages) == 2, "a build stage and a run stage"
    final = instructions[stages[-1]:]
    base = final[0][1].replace("${PYTHON_IMAGE}", args["PYTHON_IMAGE"])
    assert base == "python:3.11-slim"
    user = [rest for kw, rest in final if kw == "USER"]
    assert user and user[-1] not in ("root", "0")
    copies = [rest for kw, rest in final if kw == "COPY"]
    assert copies == ["--from=build /opt/nsq /opt/nsq"], "only the built virtualenv"
    assert not [rest for kw, rest in final if kw == "RUN" and ("pip" in rest or "uv" in rest)]
    (cmd,) = [json.loads(rest) for kw, rest in final if kw == "CMD"]
    assert [json.loads(rest) for kw, rest in final if kw == "ENTRYPOINT"] == [[]]
    start_up_check(cmd)
    exposed = {int(p) for kw, rest in final if kw == "EXPOSE" for p in rest.split()}
    assert {4150, 4151, 4160, 4161, 4171} <= exposed
    # every program compose runs is installed in the image, as a console script
    for service in compose["services"].values():
        program = service["command"][0]
        assert f'{program} = "{program}.__main__:main"' in (
            ROOT / "packages" / program / "pyproject.toml").read_text()


def test_dockerfile_copies_only_what_exists_and_dockerignore_keeps_tests_out():
    for kw, rest in dockerfile_instructions():
        if kw == "COPY" and not rest.startswith("--from"):
            *sources, _ = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), source
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore and "packages/*/tests/" in ignore


def _uv() -> str | None:
    local = ROOT / ".tools" / "bin" / "uv"
    return str(local) if local.exists() else shutil.which("uv")


@pytest.mark.skipif(_uv() is None, reason="uv is not installed (make install puts it in .tools)")
def test_dockerfile_installs_the_daemons_pinned_dependencies_and_no_dev_packages():
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    (export,) = re.findall(r"uv export (.*?) -o /tmp/requirements.txt", text)
    result = subprocess.run([_uv(), "export", *shlex.split(export), "--no-header"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    pinned = {line.split("==")[0] for line in result.stdout.splitlines() if "==" in line
              and not line.startswith((" ", "#"))}
    assert {"trio", "starlette", "httptools", "httpx", "jinja2", "attrs"} <= pinned
    assert not pinned & {"pytest", "pytest-trio", "hypothesis", "ruff", "playwright", "pynsq",
                         "tornado", "py-spy", "jsonschema", "pyyaml", "trustme"}
    installed = re.findall(r"\./packages/(\w+)", text)
    assert sorted(installed) == ["common", "nsqadmin", "nsqd", "nsqlookupd", "serving"]


def test_the_image_creates_every_data_path_nsqd_is_given(compose):
    """nsqd refuses a --data-path that does not exist (as Go's does), so the image must make
    the one its default command and compose's nsqds use, writable by the user it runs as."""
    instructions = dockerfile_instructions()
    final = instructions[[i for i, (kw, _) in enumerate(instructions) if kw == "FROM"][-1]:]
    runs = " && ".join(rest for kw, rest in final if kw == "RUN")
    made = set(re.findall(r"mkdir (?:-p )?(\S+)", runs))
    owned = set(re.findall(r"chown nsq:nsq (\S+)", runs))
    (cmd,) = [json.loads(rest) for kw, rest in final if kw == "CMD"]
    paths = {flag_values(cmd)["data-path"]}
    paths |= {flag_values(s["command"])["data-path"] for s in compose["services"].values()
              if s["command"][0] == "nsqd"}
    assert paths == {"/data"}
    assert paths <= made and paths <= owned
