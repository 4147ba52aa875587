"""``Tree``: httprouter's radix tree for one method, kept only to say when a path that no route
answers gets a trailing-slash redirect.

Go's julienschmidt/httprouter v1.3.0 (NSQ's daemons) and gin's copy of it (lmstfy 1.0.10's
gin of 2017, the same ``getValue``) do not toggle the slash and look again: they walk the tree
and recommend a redirect ("TSR") only where the walk ends next to a handle. So
``/api/:namespace/:queue/`` is no redirect when ``/api/:namespace/:queue/peek`` shares the
node after the slash, while ``/api/ns/`` is one (to ``/api/ns``, which is then a 404). This is
their ``addRoute``/``insertChild`` (without priorities, which only order children) and the
TSR half of ``getValue``, line for line.
"""

from __future__ import annotations

import attrs

STATIC, ROOT, PARAM, CATCH_ALL = range(4)


class Conflict(ValueError):
    """A route httprouter refuses (it panics): a wildcard beside other children."""


@attrs.define(eq=False)
class _Node:
    path: str = ""
    wild_child: bool = False
    kind: int = STATIC
    indices: str = ""
    children: list[_Node] = attrs.Factory(list)
    handle: bool = False


class Tree:
    """The routes of one method."""

    def __init__(self) -> None:
        self.root = _Node()

    def add(self, path: str) -> None:
        """httprouter's ``addRoute``.

        Raises:
            Conflict: where httprouter panics.
        """
        n = self.root
        if not n.path and not n.children:
            _insert_child(n, path)
            n.kind = ROOT
            return
        while True:
            i = 0
            most = min(len(path), len(n.path))
            while i < most and path[i] == n.path[i]:
                i += 1
            if i < len(n.path):  # split the edge
                child = _Node(n.path[i:], n.wild_child, STATIC, n.indices, n.children, n.handle)
                n.children = [child]
                n.indices = n.path[i]
                n.path = path[:i]
                n.handle = False
                n.wild_child = False
            if i < len(path):
                path = path[i:]
                if n.wild_child:
                    n = n.children[0]
                    if (len(path) >= len(n.path) and n.path == path[:len(n.path)]
                            and (len(n.path) >= len(path) or path[len(n.path)] == "/")):
                        continue
                    raise Conflict(f"path segment {path!r} conflicts with wildcard {n.path!r}")
                c = path[0]
                if n.kind == PARAM and c == "/" and len(n.children) == 1:
                    n = n.children[0]
                    continue
                index = n.indices.find(c)
                if index >= 0:
                    n = n.children[index]
                    continue
                if c not in ":*":
                    n.indices += c
                    child = _Node()
                    n.children.append(child)
                    n = child
                _insert_child(n, path)
                return
            if n.handle:
                raise Conflict(f"a handle is already registered for {path!r}")
            n.handle = True
            return

    def redirects(self, path: str) -> bool:
        """Whether httprouter's ``getValue`` recommends a trailing-slash redirect for ``path``
        (False when a route answers it)."""
        n = self.root
        while True:
            if len(path) > len(n.path):
                if path[:len(n.path)] != n.path:
                    break
                path = path[len(n.path):]
                if not n.wild_child:
                    index = n.indices.find(path[0])
                    if index >= 0:
                        n = n.children[index]
                        continue
                    return path == "/" and n.handle
                n = n.children[0]
                if n.kind == CATCH_ALL:
                    return False  # a catch-all answers it
                end = path.find("/")
                end = len(path) if end < 0 else end
                if end < len(path):
                    if n.children:
                        path = path[end:]
                        n = n.children[0]
                        continue
                    return len(path) == end + 1
                if n.handle:
                    return False
                if len(n.children) == 1:
                    n = n.children[0]
                    return n.path == "/" and n.handle
                return False
            if path == n.path:
                if n.handle:
                    return False
                if path == "/" and n.wild_child and n.kind != ROOT:
                    return True
                index = n.indices.find("/")
                if index >= 0:
                    n = n.children[index]
                    return ((len(n.path) == 1 and n.handle)
                            or (n.kind == CATCH_ALL and n.children[0].handle))
                return False
            break
        return path == "/" or (len(n.path) == len(path) + 1 and n.path[len(path)] == "/"
                               and path == n.path[:-1] and n.handle)


def _insert_child(n: _Node, path: str) -> None:
    """httprouter's ``insertChild``: ``path``'s wildcards as nodes below ``n``."""
    offset = 0
    i = 0
    while i < len(path):
        c = path[i]
        if c not in ":*":
            i += 1
            continue
        end = i + 1
        while end < len(path) and path[end] != "/":
            if path[end] in ":*":
                raise Conflict(f"only one wildcard per path segment: {path!r}")
            end += 1
        if n.children:
            raise Conflict(f"wildcard {path[i:end]!r} conflicts with existing children")
        if end - i < 2:
            raise Conflict(f"a wildcard without a name in {path!r}")
        if c == ":":
            if i > 0:
                n.path = path[offset:i]
                offset = i
            child = _Node(kind=PARAM)
            n.children = [child]
            n.wild_child = True
            n = child
            if end < len(path):
                n.path = path[offset:end]
                offset = end
                child = _Node()
                n.children = [child]
                n = child
            i = end
            continue
        if end != len(path) or path[i - 1] != "/" or (n.path and n.path[-1] == "/"):
            raise Conflict(f"a catch-all only at the end, after a '/': {path!r}")
        n.path = path[offset:i - 1]
        child = _Node(wild_child=True, kind=CATCH_ALL)
        n.children = [child]
        n.indices = "/"
        child.children = [_Node(path[i - 1:], kind=CATCH_ALL, handle=True)]
        return
    n.path = path[offset:]
    n.handle = True
