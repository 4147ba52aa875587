"""nsq_to_file: archive topics to files, one message per line.

One consumer per topic (``--topic``, or every topic lookupd knows that matches
``--topic-pattern``, looked up again every ``--topic-refresh``). Messages are written as they
come and FINished only after the file is synced: when ``--max-in-flight`` of them are waiting,
when the consumer is starved (85% of its RDY in flight), or every ``--sync-interval``. File
naming, rotation and gzip are in ``_file_logger``. SIGHUP syncs and closes the files (the
next message opens a new one); SIGINT / SIGTERM sync, FIN what was written, give the rest
back, close the files and exit.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
from collections.abc import Sequence
from typing import Any

import httpx
import trio
from nsq_common import FlagSet

from .._config import Config
from .._consumer import Consumer
from .._discovery import get_v1, lookupd_url
from .._message import Message
from ._common import Fatal, fatal, parse_flags, run_tool, setup_logging, tool_config
from ._consuming import consumer_flags, require_one_source, validate_consumer_args
from ._file_logger import FileLogger, FileOptions, filename_format
from ._progress import Progress

PROGRAM = "nsq_to_file"
log = logging.getLogger("nsq_client.tools")


def flag_set() -> FlagSet:
    fs = consumer_flags(PROGRAM, channel="nsq_to_file")
    fs.add("log-level", "string", "info", "set log verbosity: debug, info, warn, error, or fatal")
    fs.add("log-prefix", "string", "[nsq_to_file] ", "log message prefix")
    fs.add("output-dir", "string", "/tmp", "directory to write output files to")
    fs.add("work-dir", "string", "", "directory for in-progress files before moving to output-dir")
    fs.add("datetime-format", "string", "%Y-%m-%d_%H",
           "strftime compatible format for <DATETIME> in filename format")
    fs.add("filename-format", "string", "<TOPIC>.<HOST><REV>.<DATETIME>.log",
           "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. <REV> "
           "is increased when file already exists)")
    fs.add("host-identifier", "string", "", "value to output in log filename in place of "
           "hostname. <SHORT_HOST> and <HOSTNAME> are valid replacement tokens")
    fs.add("gzip-level", "int", 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)")
    fs.add("gzip", "bool", False, "gzip output files.")
    fs.add("skip-empty-files", "bool", False, "skip writing empty files")
    fs.add("topic-refresh", "duration", 60.0, "how frequently the topic list should be refreshed")
    fs.add("topic-pattern", "string", "", "only log topics matching the following pattern")
    fs.add("rotate-size", "int", 0, "rotate the file when it grows bigger than `rotate-size` bytes")
    fs.add("rotate-interval", "duration", 0.0, "rotate the file every duration")
    fs.add("sync-interval", "duration", 30.0, "sync file to disk every duration")
    fs.add("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
    fs.add("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request")
    return fs


def file_options(opts: dict[str, Any]) -> FileOptions:
    return FileOptions(
        output_dir=opts["output_dir"], work_dir=opts["work_dir"] or opts["output_dir"],
        datetime_format=opts["datetime_format"], filename_format=opts["filename_format"],
        host_identifier=opts["host_identifier"], gzip_level=opts["gzip_level"], gzip=opts["gzip"],
        skip_empty_files=opts["skip_empty_files"], rotate_size=opts["rotate_size"],
        rotate_interval=opts["rotate_interval"])


class TopicArchiver:
    """One topic: its consumer feeding its file; FIN after sync."""

    def __init__(self, topic: str, opts: dict[str, Any], config: Config, progress: Progress) -> None:
        self.topic = topic
        self.opts = opts
        self.config = config
        self.progress = progress
        self.files = FileLogger(file_options(opts), topic, hostname=socket.gethostname(),
                                pid=os.getpid())
        self.pending: list[Message] = []
        self._wait: trio.CancelScope | None = None
        self._hup = False
        self._stopping = False

    def hup(self) -> None:
        self._hup = True
        if self._wait is not None:
            self._wait.cancel()

    def stop(self) -> None:
        self._stopping = True
        if self._wait is not None:
            self._wait.cancel()

    async def run(self) -> None:
        opts = self.opts
        async with Consumer(self.topic, opts["channel"], config=self.config,
                            nsqd_tcp_addresses=opts["nsqd_tcp_address"],
                            lookupd_http_addresses=opts["lookupd_http_address"]) as consumer:
            try:
                await self._route(consumer)
            finally:
                await self._sync()
                self.files.close()

    async def _route(self, consumer: Consumer) -> None:
        files = self.files
        interval = self.opts["sync_interval"]
        limit = max(1, self.opts["max_in_flight"])
        tick = trio.current_time() + interval
        stopped = False
        while True:
            message = None
            got = False
            if self._stopping and not stopped:
                # FIN what was written, give back the rest, and drain what is left.
                await self._sync()
                consumer.stop()
                stopped = True
            with trio.CancelScope(deadline=tick) as scope:
                self._wait = scope
                message = await consumer.next_message()
                got = True
            self._wait = None
            sync = close = False
            if got and message is None:
                return  # the consumer stopped and gave everything back
            if message is not None:
                if files.needs_rotation():
                    files.update_file()
                    sync = True
                message.disable_auto_response()
                files.write(message.body + b"\n")
                self.pending.append(message)
                self.progress.add("messages")
                if len(self.pending) >= limit:
                    sync = True
            elif self._hup:
                self._hup = False
                sync = close = True
            elif trio.current_time() >= tick:
                tick += interval
                if files.needs_rotation():
                    if self.opts["skip_empty_files"]:
                        close = True
                    else:
                        files.update_file()
                sync = True
            if sync or consumer.is_starved:
                await self._sync()
            if close:
                files.close()

    async def _sync(self) -> None:
        if not self.pending:
            return
        log.info("[%s/%s] syncing %d records to disk", self.topic, self.opts["channel"],
                 len(self.pending))
        self.files.flush()
        await trio.to_thread.run_sync(self.files.fsync)
        pending, self.pending = self.pending, []
        for message in pending:
            message.finish()


class Discoverer:
    """The topics to archive: given ones, and lookupd's that match the pattern."""

    def __init__(self, opts: dict[str, Any], config: Config, progress: Progress) -> None:
        self.opts = opts
        self.config = config
        self.progress = progress
        self.archivers: dict[str, TopicArchiver] = {}
        self.pattern = re.compile(opts["topic_pattern"]) if opts["topic_pattern"] else None
        self.stopping = False
        self._sleep: trio.CancelScope | None = None

    def allowed(self, topic: str) -> bool:
        return self.pattern is None or self.pattern.search(topic) is not None

    def update(self, nursery: trio.Nursery, topics: Sequence[str]) -> None:
        for topic in topics:
            if topic in self.archivers or self.stopping:
                continue
            if not self.allowed(topic):
                log.warning("skipping topic %s (doesn't match pattern %s)", topic,
                            self.opts["topic_pattern"])
                continue
            archiver = TopicArchiver(topic, self.opts, self.config, self.progress)
            self.archivers[topic] = archiver
            nursery.start_soon(archiver.run)

    def stop(self) -> None:
        self.stopping = True
        for archiver in self.archivers.values():
            archiver.stop()

    def hup(self) -> None:
        for archiver in self.archivers.values():
            archiver.hup()

    async def lookupd_topics(self, client: httpx.AsyncClient) -> list[str] | None:
        topics: set[str] = set()
        errors = 0
        for address in self.opts["lookupd_http_address"]:
            try:
                payload = await get_v1(client, lookupd_url(address, "/topics"))
            except (httpx.HTTPError, ValueError) as exc:
                log.error("could not retrieve topic list from %s: %s", address, exc)
                errors += 1
                continue
            topics.update(payload.get("topics") or [])
        if errors == len(self.opts["lookupd_http_address"]):
            return None
        return sorted(topics)

    async def run(self) -> None:
        opts = self.opts
        timeout = httpx.Timeout(opts["http_client_request_timeout"],
                                connect=opts["http_client_connect_timeout"])
        async with trio.open_nursery() as outer:
            await outer.start(self._signals)
            # Ends once every archiver has finished (after a stop) and lookupd is left alone.
            async with trio.open_nursery() as nursery:
                self.update(nursery, opts["topic"])
                if not opts["topic"]:
                    # Only a pattern: follow lookupd's topic list (the first look right away).
                    async with httpx.AsyncClient(timeout=timeout) as client:
                        while not self.stopping:
                            topics = await self.lookupd_topics(client)
                            if topics is not None:
                                self.update(nursery, topics)
                            with trio.move_on_after(opts["topic_refresh"]) as self._sleep:
                                await trio.sleep_forever()
            outer.cancel_scope.cancel()

    async def _signals(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGHUP, signal.SIGINT, signal.SIGTERM) as received:
            task_status.started()
            async for signum in received:
                if signum == signal.SIGHUP:
                    self.hup()
                    continue
                if self.stopping:
                    raise SystemExit(1)
                log.info("%s received, stopping", signal.Signals(signum).name)
                self.stop()
                if self._sleep is not None:
                    self._sleep.cancel()


async def run(opts: dict[str, Any]) -> None:
    config = tool_config(opts, PROGRAM, max_in_flight=opts["max_in_flight"])
    progress = Progress(PROGRAM)
    discoverer = Discoverer(opts, config, progress)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(progress.run)
        try:
            await discoverer.run()
        except OSError as exc:
            raise Fatal(f"failed writing output - {exc}") from exc
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    opts = parse_flags(flag_set(), argv)
    levels = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
              "error": logging.ERROR, "fatal": logging.CRITICAL}
    setup_logging(opts["log_prefix"], levels.get(opts["log_level"].lower(), logging.INFO))
    if opts["log_level"].lower() not in levels:
        fatal("--log-level is invalid")
    if opts["_args"]:
        fatal(f"unknown arguments: {opts['_args']}")
    if not opts["channel"]:
        fatal("--channel is required")
    if opts["http_client_connect_timeout"] <= 0:
        fatal("--http-client-connect-timeout should be positive")
    if opts["http_client_request_timeout"] <= 0:
        fatal("--http-client-request-timeout should be positive")
    require_one_source(opts["nsqd_tcp_address"], opts["lookupd_http_address"])
    if not 1 <= opts["gzip_level"] <= 9:
        fatal(f"invalid --gzip-level value ({opts['gzip_level']}), should be 1-9")
    if not opts["topic"] and not opts["topic_pattern"]:
        fatal("--topic or --topic-pattern required")
    if not opts["topic"] and not opts["lookupd_http_address"]:
        fatal("--lookupd-http-address must be specified when no --topic specified")
    if opts["topic_pattern"]:
        try:
            re.compile(opts["topic_pattern"])
        except re.error as exc:
            fatal(f"invalid --topic-pattern - {exc}")
    try:
        filename_format(file_options(opts), "topic", "host", 0)
    except ValueError as exc:
        fatal(str(exc))
    validate_consumer_args(opts["topic"], opts["channel"], opts["lookupd_http_address"])
    run_tool(run, opts)


if __name__ == "__main__":
    main()
