"""What the four consuming tools (nsq_tail, nsq_to_file, nsq_to_http, nsq_to_nsq) share: their
common flags, declared once, and the checks of them made before anything connects."""

from __future__ import annotations

from collections.abc import Sequence

from nsq_common import FlagSet, is_valid_name

from .._discovery import lookupd_url
from ._common import fatal


def consumer_flags(program: str, *, channel: str, nsq: str = "nsq", one_topic: bool = False,
                   see: bool = False) -> FlagSet:
    """The flags of ``program``, a tool that consumes (nsq_tail, nsq_to_file, nsq_to_http,
    nsq_to_nsq), with those they all have, worded as each Go tool words them; the tool adds
    its own.

    Args:
        program: the tool's name (in its usage text).
        channel: the ``--channel`` default.
        nsq: how the help spells NSQ (nsq_tail says ``NSQ``).
        one_topic: ``--topic`` takes one topic (nsq_to_http), not several.
        see: ``--consumer-opt``'s help says "see" before go-nsq's link (nsq_to_nsq).
    """
    flags = FlagSet(program)
    flags.add("version", "bool", False, "print version string")
    flags.add("channel", "string", channel, f"{nsq} channel")
    flags.add("max-in-flight", "int", 200, "max number of messages to allow in flight")
    flags.add("nsqd-tcp-address", "strings", [], "nsqd TCP address (may be given multiple times)")
    flags.add("lookupd-http-address", "strings", [],
              "lookupd HTTP address (may be given multiple times)")
    if one_topic:
        flags.add("topic", "string", "", f"{nsq} topic")
    else:
        flags.add("topic", "strings", [], f"{nsq} topic (may be given multiple times)")
    flags.add("consumer-opt", "strings", [], "option to passthrough to nsq.Consumer (may be given "
              f"multiple times, {'see ' if see else ''}http://godoc.org/github.com/nsqio/go-nsq#Config)")
    return flags


def require_one_source(nsqd: Sequence[str], lookupd: Sequence[str],
                       names: tuple[str, str] = ("--nsqd-tcp-address", "--lookupd-http-address")) -> None:
    """NSQ's tools take nsqd addresses or lookupd addresses, one kind, at least one."""
    if not nsqd and not lookupd:
        fatal(f"{names[0]} or {names[1]} required")
    if nsqd and lookupd:
        fatal(f"use {names[0]} or {names[1]} not both")


def validate_consumer_args(topics: Sequence[str], channel: str, lookupd: Sequence[str]) -> None:
    """What ``Consumer`` would refuse, refused up front with go-nsq's words."""
    for topic in topics:
        if not is_valid_name(topic):
            fatal("invalid topic name")
    if not is_valid_name(channel):
        fatal("invalid channel name")
    for address in lookupd:
        try:
            lookupd_url(address, topic="x")
        except ValueError as exc:
            fatal(str(exc))
