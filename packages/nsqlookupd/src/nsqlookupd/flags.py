"""nsqlookupd's flags: NSQ's names, defaults and help texts.

Apart from ``options`` (which makes the frozen ``Options`` of them) so that the command parses
its flags without loading attrs: the early start waits for them (docs/performance.md).
"""

from __future__ import annotations

import socket

from nsq_common import FlagSet


def flag_set() -> FlagSet:
    flags = FlagSet("nsqlookupd")
    flags.add("config", "string", "", "path to config file")
    flags.add("version", "bool", False, "print version string")
    flags.add("log-level", "string", "info",
              "set log verbosity: debug, info, warn, error, or fatal")
    flags.add("log-prefix", "string", "[nsqlookupd] ", "log message prefix")
    flags.add("verbose", "bool", False, "[deprecated] has no effect, use --log-level",
              deprecated=True)
    flags.add("tcp-address", "string", "0.0.0.0:4160",
              "<addr>:<port> to listen on for TCP clients")
    flags.add("http-address", "string", "0.0.0.0:4161",
              "<addr>:<port> to listen on for HTTP clients")
    flags.add("broadcast-address", "string", socket.gethostname(),
              "address of this lookupd node, (default to the OS hostname)")
    flags.add("inactive-producer-timeout", "duration", 300.0,
              "duration of time a producer will remain in the active list since its last ping")
    flags.add("tombstone-lifetime", "duration", 45.0,
              "duration of time a producer will remain tombstoned if registration remains")
    return flags
