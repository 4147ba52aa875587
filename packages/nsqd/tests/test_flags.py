"""nsqd's flags module: the default node id (NSQ's, computed without hashlib); the
command's names for what the early start reads."""

from __future__ import annotations

import hashlib
import socket
import sys
import zlib

import pytest
from nsqd.flags import build_flagset, default_node_id, node_id_of


@pytest.mark.parametrize("hostname", ["", "vm", "nsqd-1.example.com", "ünïcödé-host", "x" * 300])
def test_node_id_is_nsqs_crc32_of_md5(hostname: str) -> None:
    # Go's nsqd: crc32.ChecksumIEEE(md5.Sum(hostname)) % 1024
    expected = zlib.crc32(hashlib.md5(hostname.encode()).digest()) % 1024
    assert node_id_of(hostname) == expected


def test_default_node_id_is_this_hosts() -> None:
    assert default_node_id() == node_id_of(socket.gethostname())
    assert build_flagset().defaults()["id"] == default_node_id()


def test_node_id_without_cpythons_md5_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_md5", None)  # as a build without it
    assert node_id_of("vm") == zlib.crc32(hashlib.md5(b"vm").digest()) % 1024


def test_the_command_names_nsqd_dat_as_metadata_does() -> None:
    from nsqd import metadata
    from nsqd.__main__ import METADATA_FILE

    assert METADATA_FILE == metadata.FILE_NAME
