"""No object of nsqd writes another's fields: each owner has the method (docs/architecture.md).

Read from the source (nothing is imported), as tests/integration/test_import_graph.py reads
imports: every assignment (``=``, ``+=``, annotated, ``del``) whose target is an attribute must
be one of ``self``'s own (``self.name``, or an item of it: ``self.name[key]``); ``other.name =
...``, ``self.other.name = ...`` and ``other.name[key] = ...`` are writes into another object.
Writes through a local alias of another's container (``counts = client.pub_counts``) are not
seen: the review of a change is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "nsqd"

#: Whole modules still writing into others, each until the change that restructures it.
MODULES = {
    # the topic log's files, being given their own segment list
    "logfiles.py",
    # go-diskqueue's requests, for Go's files (import and export)
    "diskfiles.py",
}

#: (module, function, target) -> why it may write there.
SITES = {
    # a message's state fields (``message.QueuedMessage``, a record with slots, kept lean for
    # the delivery path): moved only by the one owner of the channel's message states
    **{("channel_state.py", f"MessageStates.{where}", f"msg.{name}"): "the states' owner"
       for where, names in (("decoded", ("attempts", "deadline")), ("set_aside", ("deadline",)),
                            ("published_deferred", ("deadline",)),
                            ("put_in_flight", ("attempts", "client_id", "delivered", "deadline")),
                            ("put_back", ("deadline",)), ("touch", ("deadline",)),
                            ("scan", ("due",)), ("restore_deferred", ("attempts", "deadline")))
       for name in names},
    # ... and messages being made: from a record in flight, a copy for a peek, a dead letter
    # respawned as a new message
    **{("inflight.py", "delivered_message", f"msg.{name}"): "a message made"
       for name in ("client_id", "delivered", "deadline")},
    ("channel_pull.py", "PullDoor._decoded_copy", "msg.attempts"): "a message made",
    **{("channel_dead.py", "DeadLetterDoor.respawn", f"msg.{name}"): "a message made"
       for name in ("attempts", "tries", "due", "offset", "expires")},
    # the topic's callbacks given to its log: the log's method comes with its rebuild
    ("topic.py", "Topic.__init__", "log.needed"): "log rebuild",
    ("topic.py", "Topic.__init__", "log.on_readable"): "log rebuild",
    ("privatelog.py", "PrivateLog.__init__", "self.log.needed"): "log rebuild",
    # PUT /config: Settings is the one mutable part of the configuration, a plain record
    ("http_api.py", "HttpApi._set_lookupd_addresses",
     "self.broker.settings.nsqlookupd_tcp_addresses"): "settings",
    ("http_api.py", "HttpApi._set_log_level", "self.broker.settings.log_level"): "settings",
    # a message being made, before its record is written from it
    ("topic.py", "Topic.put", "msg.expires"): "a message made",
    ("goimport.py", "_deferred_records", "msg.due"): "a message made",
    # the export's counts, a plain record its steps add to
    **{("goexport.py", where, f"tally.{name}"): "a tally"
       for where, name in (("SourceTopic._log_records", "deleted"), ("_go_records", "expired"),
                           ("_go_records", "written"))},
    # library objects configured through their attributes, as their API is
    ("tls.py", "server_context", "ctx.minimum_version"): "ssl.SSLContext",
    ("tls.py", "server_context", "ctx.verify_mode"): "ssl.SSLContext",
    ("tcp.py", "handle_stream", "scope.shield"): "trio.CancelScope",
    ("replication/coordinator.py", "Coordinator.run", "scope.shield"): "trio.CancelScope",
    # the cluster view's record of a topic (``replication.view.TopicView``), a plain record
    # only the view keeps
    **{("replication/view.py", f"ClusterView.{where}", f"view.{name}"): "a plain record"
       for where in ("_put", "_delete")
       for name in ("placement", "state", "state_revision", "leader")},
}


def _written(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return []
    out: list[ast.expr] = []
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        else:
            out.append(target)
    return out


def _foreign(target: ast.expr) -> str | None:
    """The target as text when it is a field of another object (None: a name, or one of
    ``self``'s own fields or their items)."""
    node = target
    while isinstance(node, ast.Subscript):  # an item: of whose container?
        node = node.value
    if not isinstance(node, ast.Attribute):
        return None  # a local name, or an item of a local container
    if isinstance(node.value, ast.Name) and node.value.id == "self":
        return None
    return ast.unparse(node)


def foreign_writes(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, enclosing function's qualified name or ``<module>``, target) of every write
    into another object's field in ``source``."""

    def visit(node: ast.AST, scope: list[str]) -> Iterator[tuple[int, str, str]]:
        for target in _written(node):
            text = _foreign(target)
            if text is not None:
                yield node.lineno, ".".join(scope) or "<module>", text
        inner = ([*scope, node.name]
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 else scope)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, inner)

    yield from visit(ast.parse(source), [])


def test_the_check_finds_writes_into_other_objects() -> None:
    source = """
class A:
    def f(self, other):
        self.x = 1
        self.items[2] = 3
        self.count += 1
        local = 4
        local_list[0] = 5
        other.x = 6
        other.items["k"] += 7
        self.other.x = 8
        a, other.y = 9, 10
        del other.z
"""
    assert sorted(foreign_writes(source)) == [
        (9, "A.f", "other.x"),
        (10, "A.f", "other.items"),
        (11, "A.f", "self.other.x"),
        (12, "A.f", "other.y"),
        (13, "A.f", "other.z"),
    ]


def test_no_object_writes_another_s_fields() -> None:
    found, used_modules, used_sites = [], set(), set()
    for path in sorted(SOURCE.rglob("*.py")):
        module = path.relative_to(SOURCE).as_posix()
        for line, where, target in foreign_writes(path.read_text()):
            if module in MODULES:
                used_modules.add(module)
            elif (module, where, target) in SITES:
                used_sites.add((module, where, target))
            else:
                found.append(f"{module}:{line} ({where}): {target}")
    assert found == [], "give the owner a method, and call it"
    assert MODULES - used_modules == set(), "no longer writing into others: remove from MODULES"
    assert set(SITES) - used_sites == set(), "no longer written: remove from SITES"
