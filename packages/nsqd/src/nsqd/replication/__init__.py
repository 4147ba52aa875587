"""Replicated topics, coordinated through etcd (docs/design/replication.md).

Imported only when nsqd runs with ``--etcd-endpoints``: an nsqd without it loads nothing of
this package.
"""
