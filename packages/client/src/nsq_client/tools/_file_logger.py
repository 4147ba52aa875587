"""nsq_to_file's output files: names, rotation, gzip, and the move out of the work dir.

File names come from ``--filename-format`` (default ``<TOPIC>.<HOST><REV>.<DATETIME>.log``):
``<TOPIC>``, ``<HOST>`` (short hostname or ``--host-identifier``), ``<PID>`` are fixed at
start, ``<DATETIME>`` is ``--datetime-format`` (a strftime subset) at the time of each check,
``<REV>`` is ``-000000``, ``-000001``, ... and only kept when gzip, rotation or a work dir is on
(then it is required), and ``.gz`` is appended with ``--gzip``.

A file is rotated when the ``<DATETIME>`` part changes, after ``--rotate-interval``, or once
more than ``--rotate-size`` bytes were written (uncompressed bytes, as NSQ counts them). A new
file never overwrites: an existing name takes the next ``<REV>``. Without gzip or rotation an
existing file is appended to.

``sync()`` makes what was written durable before the messages are FINished: with gzip it ends
the current gzip member (its trailer carries a checksum) and starts another, so a file is a
concatenation of complete members, readable by any gzip reader. Finished files are moved from
``--work-dir`` to ``--output-dir`` with a hard link, never replacing a file already there.

This module is plain blocking file I/O with an injected clock; nsq_to_file drives it.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any, BinaryIO

import attrs

log = logging.getLogger("nsq_client.tools")

# The strftime subset NSQ's nsq_to_file understands (go-strftime); anything else is literal.
_STRFTIME = set("BbmAadHIMSYypZz%")
_REV_FORMAT = "-%06d"


def strftime(fmt: str, when: float) -> str:
    """NSQ's strftime: ``%Y %y %m %d %H %I %M %S %B %b %A %a %p %Z %z %%``, local time."""
    tm = time.localtime(when)
    return re.sub(r"%(.)", lambda m: time.strftime("%" + m.group(1), tm)
                  if m.group(1) in _STRFTIME else m.group(0), fmt)


@attrs.frozen(kw_only=True)
class FileOptions:
    output_dir: str = "/tmp"
    work_dir: str = ""
    datetime_format: str = "%Y-%m-%d_%H"
    filename_format: str = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
    host_identifier: str = ""
    gzip_level: int = 6
    gzip: bool = False
    skip_empty_files: bool = False
    rotate_size: int = 0
    rotate_interval: float = 0.0

    @property
    def effective_work_dir(self) -> str:
        return self.work_dir or self.output_dir


def filename_format(opts: FileOptions, topic: str, hostname: str, pid: int) -> str:
    """The per-topic name template (``<DATETIME>`` and ``<REV>`` left in).

    Raises:
        ValueError: ``<REV>`` missing while gzip, rotation or a work dir needs it.
    """
    short = hostname.split(".")[0]
    identifier = short
    if opts.host_identifier:
        identifier = opts.host_identifier.replace("<SHORT_HOST>", short).replace("<HOSTNAME>", hostname)
    fmt = opts.filename_format
    if opts.gzip or opts.rotate_size > 0 or opts.rotate_interval > 0 or (
            opts.effective_work_dir != opts.output_dir):
        if "<REV>" not in fmt:
            raise ValueError("missing <REV> in --filename-format when gzip, rotation, or work dir "
                             "enabled")
    else:
        fmt = fmt.replace("<REV>", "")
    fmt = fmt.replace("<TOPIC>", topic).replace("<HOST>", identifier).replace("<PID>", str(pid))
    if opts.gzip and not fmt.endswith(".gz"):
        fmt += ".gz"
    return fmt


class FileLogger:
    """The current output file of one topic."""

    def __init__(self, opts: FileOptions, topic: str, *, hostname: str, pid: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.opts = opts
        self.topic = topic
        self.template = filename_format(opts, topic, hostname, pid)
        self.clock = clock
        self.out: BinaryIO | None = None
        self.path = ""
        self._gzip: gzip.GzipFile | None = None
        self.filename = ""  # the template with <DATETIME> filled in
        self.open_time = 0.0
        self.filesize = 0
        self.rev = 0
        self.files_closed: list[str] = []

    def current_filename(self) -> str:
        return self.template.replace("<DATETIME>", strftime(self.opts.datetime_format, self.clock()))

    def needs_rotation(self) -> bool:
        if self.out is None:
            return True
        name = self.current_filename()
        if name != self.filename:
            log.info("[%s] new filename %s, rotating...", self.topic, name)
            return True
        since = self.clock() - self.open_time
        if self.opts.rotate_interval > 0 and since > self.opts.rotate_interval:
            log.info("[%s] %.1fs since last open, rotating...", self.topic, since)
            return True
        if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
            log.info("[%s] %s currently %d bytes (> %d), rotating...", self.topic, self.path,
                     self.filesize, self.opts.rotate_size)
            return True
        return False

    def update_file(self) -> None:
        """Close the current file and open the next one."""
        self.close()
        name = self.current_filename()
        self.rev = 0 if name != self.filename else self.rev + 1
        self.filename = name
        self.open_time = self.clock()
        opts = self.opts
        work, output = opts.effective_work_dir, opts.output_dir
        full = os.path.join(work, name)
        _make_dirs(full)
        flags = os.O_WRONLY | os.O_CREAT
        flags |= os.O_EXCL if (opts.gzip or opts.rotate_interval > 0) else os.O_APPEND
        while True:
            path = full.replace("<REV>", _REV_FORMAT % self.rev)
            if work != output:
                target = _output_path(path, work, output)
                _make_dirs(target)
                if os.path.exists(target):
                    log.warning("[%s] output file already exists: %s", self.topic, target)
                    self.rev += 1
                    continue
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                log.warning("[%s] working file already exists: %s", self.topic, path)
                self.rev += 1
                continue
            size = os.fstat(fd).st_size
            if opts.rotate_size > 0 and size > opts.rotate_size:
                os.close(fd)
                log.info("[%s] %s currently %d bytes (> %d), rotating...", self.topic, path,
                         size, opts.rotate_size)
                self.rev += 1
                continue
            break
        log.info("[%s] opening %s", self.topic, path)
        self.out = os.fdopen(fd, "ab")
        self.path = path
        self.filesize = size

    def _new_member(self) -> gzip.GzipFile:
        assert self.out is not None
        return gzip.GzipFile(filename="", mode="wb", compresslevel=self.opts.gzip_level,
                             fileobj=self.out)

    def write(self, data: bytes) -> None:
        if self.out is None:
            self.update_file()
        target: Any = self.out
        if self.opts.gzip:
            if self._gzip is None:  # a member begins with its first write, as in Go
                self._gzip = self._new_member()
            target = self._gzip
        target.write(data)
        self.filesize += len(data)

    def flush(self) -> None:
        """Hand what was written to the OS (gzip: end the member); ``fsync`` is separate."""
        if self.out is None:
            return
        if self._gzip is not None:
            self._gzip.close()  # the member's trailer; the file stays open
            self._gzip = None
        self.out.flush()

    def fsync(self) -> None:
        if self.out is not None:
            os.fsync(self.out.fileno())

    def sync(self) -> None:
        self.flush()
        self.fsync()

    def close(self) -> None:
        """Finish, fsync and close the file; move it out of the work dir."""
        if self.out is None:
            return
        if self._gzip is not None:
            self._gzip.close()
            self._gzip = None
        self.out.flush()
        os.fsync(self.out.fileno())
        self.out.close()
        self.out = None
        path = self.path
        opts = self.opts
        work, output = opts.effective_work_dir, opts.output_dir
        if work != output:
            target = _output_path(path, work, output)
            log.info("[%s] moving finished file %s to %s", self.topic, path, target)
            if not _exclusive_rename(path, target):
                template = os.path.join(os.path.dirname(target), os.path.basename(self.filename))
                rev = self.rev + 1
                while True:
                    log.warning("[%s] destination file already exists: %s", self.topic, target)
                    target = template.replace("<REV>", _REV_FORMAT % rev)
                    if _exclusive_rename(path, target):
                        log.info("[%s] renamed finished file %s to %s to avoid overwrite",
                                 self.topic, path, target)
                        break
                    rev += 1
            path = target
        self.files_closed.append(path)


def _output_path(path: str, work: str, output: str) -> str:
    rest = path[len(work):] if path.startswith(work) else path
    return os.path.join(output, rest.lstrip(os.sep))


def _make_dirs(path: str) -> None:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o770, exist_ok=True)


def _exclusive_rename(src: str, dst: str) -> bool:
    """Move ``src`` to ``dst`` unless ``dst`` exists (link, then unlink): False if it does."""
    try:
        os.link(src, dst)
    except FileExistsError:
        return False
    os.unlink(src)
    return True
