"""Command lines parsed the way Go's ``flag`` package parses them, so the Python daemons are
drop-ins for NSQ's Go binaries.

Accepted forms: ``-flag value``, ``-flag=value``, ``--flag value``, ``--flag=value``; booleans as
``-flag`` or ``-flag=true`` (never ``-flag true``: Go reads that ``true`` as a positional argument).
Parsing stops at the first non-flag argument or at ``--``. Repeatable flags (``kind="strings"``)
collect every occurrence. Values may also come from a TOML config file keyed by each flag's
config name; flags given on the command line win over the file, as in NSQ.

A daemon parses its flags first thing, and its early start (``nsq_serving``'s) waits for them:
this module imports nothing beyond ``sys`` and ``_gostr`` (no ``typing``, no attrs; ``tomllib``
only to read a ``--config`` file), see docs/performance.md.
"""

from __future__ import annotations

import sys

from ._gostr import format_go_duration, go_quote, parse_go_duration

TYPE_CHECKING = False
if TYPE_CHECKING:  # no run-time import: a daemon parses its flags before anything else loads
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

#: NSQ's ``--log-level`` values and their numbers (``/config/log_level``): the daemons check the
#: flag against them before their early start says OK, so they live here, not with logging.
NSQ_LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_TYPE_NAMES = {"string": "string", "int": "int", "duration": "duration", "float": "float",
               "strings": "value", "floats": "value", "bool": ""}


class FlagError(Exception):
    """A command line or config file that cannot be used; the text is Go's."""


def parse_bool(text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f'strconv.ParseBool: parsing {go_quote(text)}: invalid syntax')


def _parse_int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f'strconv.ParseInt: parsing {go_quote(text)}: invalid syntax') from None


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f'strconv.ParseFloat: parsing {go_quote(text)}: invalid syntax') from None


def _parse_floats(text: str) -> list[float]:
    return [_parse_float(part) for part in text.split(",") if part]


_PARSERS: dict[str, Callable[[str], Any]] = {
    "string": str, "int": _parse_int, "bool": parse_bool, "duration": parse_go_duration,
    "float": _parse_float, "strings": str, "floats": _parse_floats,
}


class Flag:
    """One flag: its Go name and kind, default, help text and config-file key.

    A plain class rather than attrs (this module must load without it); never changed once
    made."""

    __slots__ = ("config_key", "default", "deprecated", "help", "kind", "name")

    def __init__(self, name: str, kind: str, default: Any, help: str, config_key: str,
                 deprecated: bool = False) -> None:
        self.name = name
        self.kind = kind
        self.default = default
        self.help = help
        self.config_key = config_key
        self.deprecated = deprecated

    def __repr__(self) -> str:
        return f"Flag({self.name!r}, {self.kind!r}, {self.default!r})"

    def parse(self, text: str) -> Any:
        return _PARSERS[self.kind](text)

    def usage_default(self) -> str:
        """Go's ``(default ...)`` suffix, empty for zero values."""
        value = self.default
        if self.kind in ("strings", "floats"):
            return ""
        if self.kind == "bool":
            return " (default true)" if value else ""
        if self.kind == "string":
            return f" (default {go_quote(value)})" if value else ""
        if self.kind == "duration":
            return f" (default {format_go_duration(value)})" if value else ""
        if not value:
            return ""
        return f" (default {value})"


class FlagSet:
    """The flags of one program; ``parse`` returns a dict keyed by config name."""

    __slots__ = ("flags", "program")

    def __init__(self, program: str, flags: dict[str, Flag] | None = None) -> None:
        self.program = program
        self.flags: dict[str, Flag] = {} if flags is None else flags

    def add(self, name: str, kind: str, default: Any, help: str, *, config_key: str | None = None,
            deprecated: bool = False) -> None:
        key = config_key or name.replace("-", "_")
        self.flags[name] = Flag(name, kind, default, help, key, deprecated)

    def usage(self) -> str:
        lines = [f"Usage of {self.program}:"]
        for name in sorted(self.flags):
            flag = self.flags[name]
            type_name = _TYPE_NAMES[flag.kind]
            head = f"  -{name}" + (f" {type_name}" if type_name else "")
            lines.append(head)
            lines.append("    \t" + flag.help.replace("\n", "\n    \t") + flag.usage_default())
        return "\n".join(lines) + "\n"

    def defaults(self) -> dict[str, Any]:
        return {f.config_key: _copy(f.default) for f in self.flags.values()}

    def parse(self, argv: Sequence[str]) -> tuple[dict[str, Any], set[str], list[str]]:
        """Parse ``argv`` (without the program name).

        Returns:
            (values by config key, config keys given on the command line, positional arguments)

        Raises:
            FlagError: unknown flag, missing or unparsable value; ``-h``/``-help`` raise
                ``FlagError("help")``.
        """
        values = self.defaults()
        given: set[str] = set()
        args = list(argv)
        while args:
            arg = args[0]
            if len(arg) < 2 or arg[0] != "-":
                break
            if arg == "--":
                args.pop(0)
                break
            args.pop(0)
            name = arg[2:] if arg.startswith("--") else arg[1:]
            if not name or name[0] in "-=":
                raise FlagError(f"bad flag syntax: {arg}")
            has_value = "=" in name
            value = ""
            if has_value:
                name, value = name.split("=", 1)
            if name in ("h", "help") and name not in self.flags:
                raise FlagError("help")
            flag = self.flags.get(name)
            if flag is None:
                raise FlagError(f"flag provided but not defined: -{name}")
            if flag.kind == "bool":
                text = value if has_value else "true"
            elif has_value:
                text = value
            elif args:
                text = args.pop(0)
            else:
                raise FlagError(f"flag needs an argument: -{name}")
            try:
                parsed = flag.parse(text)
            except ValueError as exc:
                raise FlagError(f"invalid value {go_quote(text)} for flag -{name}: {exc}") from None
            key = flag.config_key
            if flag.kind in ("strings", "floats"):
                if key not in given:
                    values[key] = []
                values[key] = values[key] + (parsed if flag.kind == "floats" else [parsed])
            else:
                values[key] = parsed
            given.add(key)
        return values, given, args

    def parse_command_line(self, argv: Sequence[str], version: str) -> dict[str, Any]:
        """A daemon's command line, as the Go daemons treat it: flags, then the ``--config``
        file (flags win), ``-h`` and bad flags exit through ``exit_with_flag_error``, and
        ``--version`` prints ``version`` and exits 0.

        Returns:
            The values by config key.
        """
        try:
            values, given, _ = self.parse(argv)
            if values.get("config"):
                self.apply_config_file(values["config"], values, given)
        except FlagError as exc:
            exit_with_flag_error(self, exc)
        if values.get("version"):
            print(version)
            raise SystemExit(0)
        return values

    def apply_config_file(self, path: str, values: dict[str, Any], given: set[str]) -> None:
        """Fill ``values`` from a TOML file; keys given on the command line keep their value."""
        import tomllib  # only here: most starts have no config file

        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise FlagError(f"failed to load config file {path} - {exc}") from None
        by_key = {f.config_key: f for f in self.flags.values()}
        for key, raw in data.items():
            flag = by_key.get(key)
            if flag is None or key in given:
                continue
            try:
                values[key] = _coerce(flag, raw)
            except (ValueError, TypeError) as exc:
                raise FlagError(f"invalid value for {key} in {path}: {exc}") from None


def _coerce(flag: Flag, raw: Any) -> Any:
    if flag.kind in ("strings", "floats"):
        items = raw if isinstance(raw, list) else [raw]
        return [float(i) for i in items] if flag.kind == "floats" else [str(i) for i in items]
    if flag.kind == "duration":
        if isinstance(raw, str):
            return parse_go_duration(raw)
        return float(raw) / 1e9 if isinstance(raw, int) and raw > 1_000_000 else float(raw)
    if flag.kind == "bool":
        return raw if isinstance(raw, bool) else parse_bool(str(raw))
    if flag.kind == "int":
        return int(raw)
    if flag.kind == "float":
        return float(raw)
    return str(raw)


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def exit_with_flag_error(flags: FlagSet, error: FlagError) -> NoReturn:
    """Print as Go's flag package does and exit: 0 for ``-h``, else 2."""
    if str(error) == "help":
        sys.stderr.write(flags.usage())
        raise SystemExit(0)
    sys.stderr.write(f"{error}\n{flags.usage()}")
    raise SystemExit(2)
