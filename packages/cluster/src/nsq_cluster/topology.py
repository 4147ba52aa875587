"""What a local cluster is made of: the services, their ports and their command lines.

The layout follows NSQ's own default ports, counted from a base port ``P`` (4150 by default):

============  =============  ==============  ===============================
service       TCP            HTTP            lmstfy HTTP (jobs, admin)
============  =============  ==============  ===============================
nsqd-1        P              P + 1           P + 3627, P + 3628
nsqd-2        P + 100        P + 101
nsqd-N        P + 100(N-1)   P + 100(N-1)+1
nsqlookupd    P + 10         P + 11
nsqadmin                     P + 21
etcd          P + 30 (peer)  P + 29 (client) with ``--replicas N`` only
============  =============  ==============  ===============================

so the defaults are 4150/4151, 4250/4251, ..., nsqlookupd 4160/4161, nsqadmin 4171, and
lmstfy's job-queue API and its admin API (served by nsqd-1) on lmstfy's own ports, 7777 and
7778. A base port of 0 lets the kernel choose every port (each daemon is told port 0 and
reports the one it bound).

The command lines here are the same as the services of ``compose.yaml`` apart from addresses
and paths; a test compares the two.

With ``replicas`` (``nsq-cluster up --replicas N``) the cluster replicates its topics
(docs/design/replication.md): a one-member etcd (Debian's ``etcd``, from ``etcd-server``)
keeps its state under ``<data dir>/etcd``, and every nsqd gets ``--etcd-endpoints`` and
``--default-replicas=N``. etcd cannot be told port 0: with a base port of 0 its two ports
are free ones found when planning.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from nsq_common import join_host_port

DEFAULT_BASE_PORT = 4150
DEFAULT_HOST = "127.0.0.1"
NSQD_PORT_STRIDE = 100
LOOKUPD_OFFSET = 10
ADMIN_OFFSET = 21
LMSTFY_OFFSET = 3627  # 7777 from 4150: lmstfy's data port (and its admin port after it)
ETCD_OFFSET = 29  # etcd's client port (4179), its peer port after it
ETCD_CLIENT, ETCD_PEER = "CLIENT", "PEER"  # the kinds of etcd's ports
MAX_NSQD = 50
LMSTFY, LMSTFY_ADMIN = "LMSTFY", "LMSTFY_ADMIN"  # the kinds of nsqd-1's lmstfy ports
_LABELS = {LMSTFY: "lmstfy HTTP", LMSTFY_ADMIN: "lmstfy admin HTTP",
           ETCD_CLIENT: "client", ETCD_PEER: "peer"}


@dataclass(frozen=True)
class Port:
    """One port a service listens on (0 = chosen by the kernel)."""

    kind: str  # as the daemons name them in their "listening on" lines: TCP, HTTP, LMSTFY, ...
    number: int

    @property
    def label(self) -> str:
        """What the port serves, for people: ``TCP``, ``HTTP``, ``lmstfy HTTP``, ..."""
        return _LABELS.get(self.kind, self.kind)


@dataclass(frozen=True)
class Service:
    name: str  # e.g. "nsqd-1"; also the log prefix
    program: str  # the executable: nsqd, nsqlookupd or nsqadmin
    args: tuple[str, ...]  # the flags, in NSQ's Go syntax
    ports: tuple[Port, ...]
    data_path: Path | None = None

    @property
    def argv(self) -> list[str]:
        return [self.program, *self.args]

    def port(self, kind: str) -> int:
        return next(p.number for p in self.ports if p.kind == kind)


@dataclass(frozen=True)
class Topology:
    """The services in start order: nsqlookupd, etcd (with replicas), the nsqds, then
    nsqadmin."""

    host: str
    lookupd: Service
    nsqds: tuple[Service, ...]
    admin: Service
    etcd: Service | None = None

    @property
    def services(self) -> tuple[Service, ...]:
        etcd = (self.etcd,) if self.etcd is not None else ()
        return (self.lookupd, *etcd, *self.nsqds, self.admin)


def is_wildcard(host: str) -> bool:
    return host in ("0.0.0.0", "::", "")


def local_address(host: str) -> str:
    """The address to reach a service listening on ``host`` from this machine."""
    if host == "::":
        return "::1"
    return "127.0.0.1" if is_wildcard(host) else host


def check_base_port(base_port: int, nsqd_count: int) -> None:
    """Raises ValueError when the layout does not fit in the port range."""
    if not 1 <= nsqd_count <= MAX_NSQD:
        raise ValueError(f"--nsqd must be between 1 and {MAX_NSQD}")
    if base_port == 0:
        return
    highest = base_port + NSQD_PORT_STRIDE * (nsqd_count - 1) + 1
    highest = max(highest, base_port + LMSTFY_OFFSET + 1)
    if base_port < 1 or highest > 65535:
        raise ValueError(f"--base-port {base_port} with {nsqd_count} nsqd needs ports up to "
                         f"{highest}; choose a base port between 1 and "
                         f"{65535 - max(NSQD_PORT_STRIDE * (nsqd_count - 1) + 1, LMSTFY_OFFSET + 1)}")


def plan(*, nsqd_count: int = 2, base_port: int = DEFAULT_BASE_PORT, host: str = DEFAULT_HOST,
         data_dir: Path = Path("data"), broadcast_address: str | None = None,
         nsqd_args: tuple[str, ...] = (), lookupd_args: tuple[str, ...] = (),
         admin_args: tuple[str, ...] = (), replicas: int = 0) -> Topology:
    """The services of a cluster of one nsqlookupd, ``nsqd_count`` nsqd and one nsqadmin;
    with ``replicas``, an etcd too, and topics replicated on that many nsqd by default.

    The nsqd command lines name nsqlookupd's TCP address and nsqadmin's names its HTTP address;
    with ``base_port=0`` those are filled in at start-up (see ``with_lookupd``).

    Raises:
        ValueError: the ports do not fit, ``nsqd_count`` is out of range, or ``replicas``
            is more than ``nsqd_count``.
    """
    check_base_port(base_port, nsqd_count)
    if replicas > nsqd_count:
        raise ValueError(f"--replicas {replicas} needs as many nsqd, not {nsqd_count}")
    local = local_address(host)  # where the services reach each other
    broadcast = broadcast_address or local  # what nsqd and nsqlookupd tell others

    def port(offset: int) -> int:
        return base_port + offset if base_port else 0

    etcd = None
    if replicas:
        client, peer = ((port(ETCD_OFFSET), port(ETCD_OFFSET + 1)) if base_port
                        else (free_port(host), free_port(host)))
        etcd = etcd_service(host, local, client, peer, data_dir / "etcd")
        nsqd_args = (f"--etcd-endpoints=http://{join_host_port(local, client)}",
                     f"--default-replicas={replicas}", *nsqd_args)

    lookupd_tcp, lookupd_http = port(LOOKUPD_OFFSET), port(LOOKUPD_OFFSET + 1)
    lookupd = Service(
        "nsqlookupd", "nsqlookupd",
        (f"--tcp-address={join_host_port(host, lookupd_tcp)}",
         f"--http-address={join_host_port(host, lookupd_http)}",
         f"--broadcast-address={broadcast}", *lookupd_args),
        (Port("TCP", lookupd_tcp), Port("HTTP", lookupd_http)))
    nsqds = []
    for i in range(1, nsqd_count + 1):
        tcp, http = port(NSQD_PORT_STRIDE * (i - 1)), port(NSQD_PORT_STRIDE * (i - 1) + 1)
        data = data_dir / f"nsqd-{i}"
        ports = [Port("TCP", tcp), Port("HTTP", http)]
        lmstfy: tuple[str, ...] = ()
        if i == 1:
            jobs, jobs_admin = port(LMSTFY_OFFSET), port(LMSTFY_OFFSET + 1)
            lmstfy = (f"--lmstfy-http-address={join_host_port(host, jobs)}",
                      f"--lmstfy-admin-http-address={join_host_port(host, jobs_admin)}")
            ports += [Port(LMSTFY, jobs), Port(LMSTFY_ADMIN, jobs_admin)]
        nsqds.append(Service(
            f"nsqd-{i}", "nsqd",
            (f"--tcp-address={join_host_port(host, tcp)}", f"--http-address={join_host_port(host, http)}",
             f"--broadcast-address={broadcast}",
             f"--lookupd-tcp-address={join_host_port(local, lookupd_tcp)}",
             f"--data-path={data}", f"--node-id={i}", *lmstfy, *nsqd_args),
            tuple(ports), data))
    admin_http = port(ADMIN_OFFSET)
    admin = Service(
        "nsqadmin", "nsqadmin",
        (f"--http-address={join_host_port(host, admin_http)}",
         f"--lookupd-http-address={join_host_port(local, lookupd_http)}", *admin_args),
        (Port("HTTP", admin_http),))
    return Topology(host, lookupd, tuple(nsqds), admin, etcd)


def etcd_service(host: str, local: str, client: int, peer: int, data: Path) -> Service:
    """A one-member etcd listening on ``host`` (its client and peer ports)."""
    client_url = f"http://{join_host_port(host, client)}"
    peer_url = f"http://{join_host_port(host, peer)}"
    peer_local = f"http://{join_host_port(local, peer)}"
    return Service(
        "etcd", "etcd",
        ("--name=nsq", f"--data-dir={data}", "--logger=zap", "--log-level=warn",
         f"--listen-client-urls={client_url}",
         f"--advertise-client-urls=http://{join_host_port(local, client)}",
         f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_local}",
         f"--initial-cluster=nsq={peer_local}"),
        (Port(ETCD_CLIENT, client), Port(ETCD_PEER, peer)), data)


def free_port(host: str) -> int:
    """A port nothing listens on now, on ``host``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def with_lookupd(service: Service, tcp_address: str, http_address: str) -> Service:
    """``service`` pointed at the nsqlookupd that really listens on these addresses."""
    args = []
    for arg in service.args:
        if arg.startswith("--lookupd-tcp-address="):
            arg = f"--lookupd-tcp-address={tcp_address}"
        elif arg.startswith("--lookupd-http-address="):
            arg = f"--lookupd-http-address={http_address}"
        args.append(arg)
    return Service(service.name, service.program, tuple(args), service.ports, service.data_path)
