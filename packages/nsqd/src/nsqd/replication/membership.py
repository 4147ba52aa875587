"""This node's membership: its lease and node key (docs/design/replication.md, transaction 1),
kept alive, and the *fence*: the moment after which the lease may have expired in etcd.

The lease is renewed every ``LEASE_TTL / 3``. Its validity is counted from when the last
answered keep-alive was *sent* (etcd counts from when it received it, which is later), so
``valid_until`` is never later than etcd's own expiry. A keep-alive answered with no TTL
means the lease is gone (it expired while this node could not reach etcd, or was revoked):
every key under it is gone too, so the node joins again with a new lease and
``lost`` is bumped, for whoever held something under the old one.
"""

from __future__ import annotations

import logging

import attrs
import trio

from ..clock import Clock, SystemClock
from .etcd import EtcdClient, EtcdError
from .keys import NodeInfo, node_key

log = logging.getLogger("nsqd")

#: seconds a node stays a member after its last keep-alive (its topics' leaders elect
#: another after this); etcd's smallest TTL is about 1.5 s
LEASE_TTL = 6
#: how long before ``valid_until`` a leader stops acting on its lease
FENCE_MARGIN = 1.0
#: between attempts while etcd cannot be reached
RETRY = 1.0


@attrs.define(eq=False)
class Membership:
    client: EtcdClient
    info: NodeInfo
    clock: Clock = attrs.field(factory=SystemClock)
    lease: int = 0
    #: the clock's ``now()`` until which the lease surely exists in etcd
    valid_until: float = 0.0
    #: times the lease was lost and a new one taken (a leader checks it did not change)
    lost: int = 0
    #: whether the last keep-alive got an answer
    reachable: bool = True
    changed: trio.Event = attrs.field(factory=trio.Event)

    @property
    def key(self) -> bytes:
        return node_key(self.info.node)

    def fenced(self) -> bool:
        """Whether the lease may have expired (or will within ``FENCE_MARGIN``)."""
        return self.clock.now() >= self.fence_from()

    def fence_from(self) -> float:
        """The clock's ``now()`` from which the lease may have expired (less the margin)."""
        return self.valid_until - FENCE_MARGIN

    async def join(self) -> None:
        """Take a lease and put the node key under it, revoking the lease of this node's
        previous process if its key is still there.

        Raises:
            EtcdError, EtcdUnavailable.
        """
        sent = self.clock.now()
        lease, ttl = await self.client.grant(LEASE_TTL)
        previous = await self.client.get(self.key)
        if previous is not None and previous.lease and previous.lease != lease:
            # this node's id is the address and port this process holds: the key is a
            # previous process's, whose leaderships the others may take over at once
            await self.client.revoke(previous.lease)
            log.info("replication: revoked lease %x of this node's previous process",
                     previous.lease)
        # the lease first: the watch may see the node key before the put is answered
        self.lease, self.valid_until = lease, sent + ttl
        await self.client.put(self.key, self.info.encode(), lease=lease)
        self._notify()
        log.info("replication: joined as %s (lease %x)", self.info.node, lease)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Join (retrying while etcd is unreachable), then keep the lease alive forever."""
        await self._join_until_joined()
        task_status.started()
        fence_logged = 0  # 1: fenced, 2: past the TTL, logged
        while True:
            await trio.sleep(LEASE_TTL / 3 if self.reachable else RETRY)
            sent = self.clock.now()
            try:
                ttl = await self.client.keepalive(self.lease)
            except EtcdError as exc:
                if self.reachable:
                    log.warning("replication: etcd unreachable, lease %x not renewed: %s",
                                self.lease, exc)
                    self.reachable = False
                    self._notify()
                if self.fenced() and fence_logged < 1:
                    log.warning("replication: lease %x may expire within %gs: fenced",
                                self.lease, FENCE_MARGIN)
                    fence_logged = 1
                if self.clock.now() >= self.valid_until and fence_logged < 2:
                    # nothing changes leadership while etcd is down; when it is back, it
                    # gives every lease its full TTL again before any can expire
                    log.warning("replication: lease %x outlived its TTL without renewal",
                                self.lease)
                    fence_logged = 2
                continue
            if not self.reachable:
                log.info("replication: etcd reachable again")
                self.reachable = True
            fence_logged = 0
            if ttl > 0:
                self.valid_until = sent + ttl
                self._notify()
                continue
            log.error("replication: lease %x lost (expired in etcd): joining again", self.lease)
            self.lost += 1
            self.valid_until = 0.0
            self._notify()
            await self._join_until_joined()

    async def _join_until_joined(self) -> None:
        """``join``, again every ``RETRY`` while etcd is unreachable."""
        while True:
            try:
                await self.join()
                return
            except EtcdError as exc:
                log.warning("replication: cannot join the cluster: %s", exc)
                await trio.sleep(RETRY)

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()
