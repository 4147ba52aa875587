"""nsq_common imports its names lazily: every name of ``__all__`` is still there, and is the
object its module defines."""

import importlib
import subprocess
import sys

import nsq_common


def test_every_public_name_resolves_to_its_module() -> None:
    eager = {"NSQ_VERSION", "lazy_exports"}
    assert set(nsq_common._MODULES) == set(nsq_common.__all__) - eager
    for name in nsq_common.__all__:
        value = getattr(nsq_common, name)
        if name in eager:
            continue
        module = importlib.import_module(f"nsq_common.{nsq_common._MODULES[name]}")
        is_module = nsq_common._MODULES[name] == f"_{name}"  # commands, nsqd_stats
        assert value is (module if is_module else getattr(module, name)), name
    assert set(nsq_common.__all__) <= set(dir(nsq_common))


def test_star_import_and_unknown_name() -> None:
    namespace: dict[str, object] = {}
    exec("from nsq_common import *", namespace)
    assert set(nsq_common.__all__) <= set(namespace)
    try:
        nsq_common.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_flag_parser_alone_loads_no_protocol_module() -> None:
    code = ("import sys, nsq_common; nsq_common.FlagSet; "
            "print(sorted(m for m in sys.modules if m.startswith('nsq_common.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['nsq_common._goflags',", "'nsq_common._gostr',",
                                   "'nsq_common._lazy']"]
