"""Nodes as nsqadmin shows them (nsqd's /stats itself: nsq_common's tests, test_stats.py)."""

from nsqadmin.stats import Node, display_names, mark_out_of_date, version_key


def test_out_of_date_versions():
    nodes = [Node("a", "a", 1, 2, "1.3.0"), Node("b", "b", 1, 2, "1.2.1"),
             Node("c", "c", 1, 2, "garbage")]
    flags = [n.out_of_date for n in mark_out_of_date(nodes)]
    assert flags == [False, True, True]
    assert version_key("1.3.0-alpha+x") == (1, 3, 0)


def test_node_json_like_go_producer():
    node = Node("h", "10.0.0.1", 4150, 4151, "1.3.0", remote_address="10.0.0.1:5555",
                remote_addresses=("l:4161/10.0.0.1:5555",))
    assert node.http_address == "10.0.0.1:4151"
    assert node.to_json() == {
        "remote_addresses": ["l:4161/10.0.0.1:5555"], "remote_address": "10.0.0.1:5555",
        "hostname": "h", "broadcast_address": "10.0.0.1", "tcp_port": 4150, "http_port": 4151,
        "version": "1.3.0", "topics": None, "out_of_date": False}
    assert Node("h", "::1", 1, 4151, "").http_address == "[::1]:4151"


def test_display_names_add_the_port_where_two_share_a_hostname():
    nodes = [Node("vm", "127.0.0.1", 4150, 4151, "1.3.0"), Node("vm", "127.0.0.1", 4152, 4153, ""),
             Node("db1", "10.0.0.2", 4150, 4151, ""), Node("", "10.0.0.3", 4150, 4151, "")]
    assert display_names(nodes) == {"127.0.0.1:4151": "vm:4151", "127.0.0.1:4153": "vm:4153",
                                    "10.0.0.2:4151": "db1", "10.0.0.3:4151": "10.0.0.3:4151"}
