"""Which requests count as someone looking (the sampler asks for the node list while someone
does): pages, fragments and the API, under ``--base-path``; not probes, scrapes or static
files. A fake clock: no sleeping."""

import pytest
from nsqadmin.sampler import Viewers


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("base", "path", "looking"), [
    ("/", "/", True),
    ("/", "/topics/t/c", True),
    ("/", "/graphs/nodes/127.0.0.1:4151", True),
    ("/", "/api/topics", True),
    ("/", "/ping", False),
    ("/", "/metrics", False),
    ("/", "/favicon.ico", False),
    ("/", "/static/htmx.min.js", False),
    ("/admin", "/admin", True),
    ("/admin/", "/admin/nodes", True),
    ("/admin", "/admin/ping", False),
    ("/admin", "/admin/static/nsqadmin.css", False),
])
def test_what_counts_as_looking(base, path, looking):
    viewers = Viewers(base, Clock())
    viewers.saw(path)
    assert viewers.within(1.0) is looking


def test_a_view_counts_for_a_while():
    clock = Clock()
    viewers = Viewers("/", clock)
    assert not viewers.within(15.0)  # nobody yet
    viewers.saw("/nodes")
    clock.now += 15.0
    assert viewers.within(15.0)
    clock.now += 0.001
    assert not viewers.within(15.0)
    viewers.saw("/ping")  # a probe does not bring it back
    assert not viewers.within(15.0)
