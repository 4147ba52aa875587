"""The NSQ wire protocol, sans-IO: frames, commands, messages, names, IDENTIFY, errors.

Nothing here touches a socket; servers and clients feed bytes in and send the bytes out.
Every reader speaks one vocabulary (``ReceiveBuffer``): ``receive_data(bytes)``, then
``next_event()`` until it says more data is needed.

Each name is imported from its module the first time it is used (``_lazy``), so that a command
that only parses its flags (``nsqd --version``) does not load the rest.
"""

from __future__ import annotations

from ._lazy import lazy_exports

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at start-up

if TYPE_CHECKING:  # the names as type checkers see them; at run time see _MODULES below
    from . import _commands as commands
    from . import _nsqd_stats as nsqd_stats
    from ._buffer import ReceiveBuffer
    from ._errors import NON_FATAL_CODES, ConnectionAbort, ErrorCode, ProtocolError
    from ._files import write_atomically
    from ._frames import (
        CLOSE_WAIT_FRAME,
        FRAME_HEADER,
        HEARTBEAT,
        HEARTBEAT_FRAME,
        MAGIC_V2,
        OK_FRAME,
        Answer,
        FrameDecoder,
        FrameTooBig,
        FrameType,
        MessageFactory,
        count_oks,
        encode_error,
        encode_frame,
        encode_response,
    )
    from ._goflags import (
        NSQ_LOG_LEVELS,
        Flag,
        FlagError,
        FlagSet,
        exit_with_flag_error,
        parse_bool,
    )
    from ._gojson import go_json
    from ._gostr import format_go_duration, go_quote, parse_go_duration
    from ._hostport import join_host_port, split_address
    from ._httpv1 import (
        ACCEPT_V1,
        JSON_CONTENT_TYPE,
        NSQ_CONTENT_TYPE,
        NSQ_CONTENT_TYPE_V1,
        TEXT_CONTENT_TYPE,
        decode_v1,
        error_json,
        parse_query,
        put_config,
        query_first,
        v1_headers,
    )
    from ._identify import (
        IdentifyRequest,
        Negotiated,
        ServerFeatures,
        decode_identify,
        negotiate,
        response_json,
    )
    from ._lmstfy import LMSTFY_CHANNEL, LMSTFY_PREFIX, lmstfy_topic_name
    from ._logs import PYTHON_LOG_LEVELS, NsqLogFormatter, setup_logging
    from ._lookup import (
        LOOKUP_MAX_IDENTIFY_SIZE,
        LOOKUP_MAX_LINE,
        LookupBadMagic,
        LookupCommand,
        LookupdInfo,
        LookupIdentify,
        LookupPing,
        LookupReader,
        LookupRegister,
        LookupResponseReader,
        LookupSignal,
        LookupUnregister,
        decode_lookup_identify,
        decode_lookupd_info,
        encode_lookup_command,
        encode_lookup_response,
    )
    from ._lookup_wire import (
        MAGIC_V1,
        identify_bytes,
        lookup_answer_size,
        lookup_response_error,
        registration_bytes,
    )
    from ._message import (
        MESSAGE_FRAME_HEAD,
        MESSAGE_FRAME_PREFIX,
        MESSAGE_HEADER,
        MESSAGE_HEADER_SIZE,
        MESSAGE_ID_LENGTH,
        MessageFields,
        WireMessage,
        append_message_frames,
        decode_message,
        encode_message,
        encode_message_frame,
    )
    from ._mpub import MpubPrefixCheck, decode_mpub_body
    from ._names import (
        EPHEMERAL_SUFFIX,
        is_ephemeral,
        is_valid_channel_name,
        is_valid_name,
        is_valid_topic_name,
    )
    from ._reader import MAX_LINE_LENGTH, BodySpec, Command, CommandReader
    from ._stats import (
        ChannelStats,
        ClientStats,
        Latency,
        TopicStats,
        aggregate_channel,
        aggregate_topic,
    )

# The version our daemons report on the wire (IDENTIFY, /info, lookupd): NSQ's, since tools
# compare it (nsqadmin flags nodes older than the newest it sees).
NSQ_VERSION = "1.3.0"

__all__ = [
    "CLOSE_WAIT_FRAME",
    "EPHEMERAL_SUFFIX",

    "FRAME_HEADER",
    "HEARTBEAT",
    "HEARTBEAT_FRAME",
    "MAGIC_V2",
    "MAX_LINE_LENGTH",
    "MESSAGE_FRAME_HEAD",
    "MESSAGE_FRAME_PREFIX",
    "MESSAGE_HEADER",
    "MESSAGE_HEADER_SIZE",
    "MESSAGE_ID_LENGTH",
    "NON_FATAL_CODES",
    "NSQ_LOG_LEVELS",
    "NSQ_VERSION",
    "OK_FRAME",
    "PYTHON_LOG_LEVELS",
    "Answer",
    "BodySpec",
    "Command",
    "CommandReader",
    "ConnectionAbort",
    "ErrorCode",
    "Flag",
    "FlagError",
    "FlagSet",
    "FrameDecoder",
    "FrameTooBig",
    "FrameType",
    "IdentifyRequest",
    "MessageFactory",
    "MessageFields",
    "MpubPrefixCheck",
    "Negotiated",
    "NsqLogFormatter",
    "ProtocolError",
    "ReceiveBuffer",
    "ServerFeatures",
    "WireMessage",
    "append_message_frames",
    "commands",
    "count_oks",
    "decode_identify",
    "decode_message",
    "decode_mpub_body",
    "encode_error",
    "encode_frame",
    "encode_message",
    "encode_message_frame",
    "encode_response",
    "exit_with_flag_error",
    "format_go_duration",
    "go_errno_text",
    "go_json",
    "go_quote",
    "is_ephemeral",
    "is_valid_channel_name",
    "is_valid_name",
    "is_valid_topic_name",
    "join_host_port",
    "lazy_exports",
    "negotiate",
    "parse_bool",
    "parse_go_duration",
    "response_json",
    "setup_logging",
    "split_address",
    "write_atomically",
]

# nsqlookupd protocol V1
__all__ += [
    "LOOKUP_MAX_IDENTIFY_SIZE", "LOOKUP_MAX_LINE", "MAGIC_V1", "LookupBadMagic", "LookupCommand",
    "LookupIdentify", "LookupPing", "LookupReader", "LookupRegister", "LookupResponseReader",
    "LookupSignal", "LookupUnregister", "LookupdInfo", "decode_lookup_identify",
    "decode_lookupd_info", "encode_lookup_command", "encode_lookup_response",
    "identify_bytes", "lookup_answer_size", "lookup_response_error", "registration_bytes",
]

# NSQ's HTTP V1 conventions
__all__ += [
    "ACCEPT_V1", "JSON_CONTENT_TYPE", "NSQ_CONTENT_TYPE", "NSQ_CONTENT_TYPE_V1",
    "TEXT_CONTENT_TYPE", "decode_v1", "error_json", "parse_query", "put_config", "query_first",
    "v1_headers",
]

# lmstfy's queues as nsqd's topics (beyond NSQ)
__all__ += ["LMSTFY_CHANNEL", "LMSTFY_PREFIX", "lmstfy_topic_name"]

# nsqd's /stats: as nsqd writes it (the module nsqd_stats), as nsqadmin and nsq_stat read it
__all__ += [
    "ChannelStats", "ClientStats", "Latency", "TopicStats", "aggregate_channel", "aggregate_topic",
    "nsqd_stats",
]


# Where each name of __all__ lives (``commands`` and ``nsqd_stats`` are the modules _commands
# and _nsqd_stats themselves).
_EXPORTS = {
    "_commands": "commands",
    "_errors": "NON_FATAL_CODES ConnectionAbort ErrorCode ProtocolError",
    "_frames": (
        "CLOSE_WAIT_FRAME FRAME_HEADER HEARTBEAT HEARTBEAT_FRAME MAGIC_V2 OK_FRAME "
        "Answer FrameDecoder FrameTooBig FrameType MessageFactory count_oks encode_error "
        "encode_frame encode_response"
    ),
    "_buffer": "ReceiveBuffer",
    "_files": "write_atomically",
    "_hostport": "join_host_port split_address",
    "_httpv1": (
        "ACCEPT_V1 JSON_CONTENT_TYPE NSQ_CONTENT_TYPE NSQ_CONTENT_TYPE_V1 TEXT_CONTENT_TYPE "
        "decode_v1 error_json parse_query put_config query_first v1_headers"
    ),
    "_goflags": "NSQ_LOG_LEVELS Flag FlagError FlagSet exit_with_flag_error parse_bool",
    "_gojson": "go_json",
    "_gostr": "format_go_duration go_errno_text go_quote parse_go_duration",
    "_identify": "IdentifyRequest Negotiated ServerFeatures decode_identify negotiate response_json",
    "_lmstfy": "LMSTFY_CHANNEL LMSTFY_PREFIX lmstfy_topic_name",
    "_logs": "PYTHON_LOG_LEVELS NsqLogFormatter setup_logging",
    "_lookup": (
        "LOOKUP_MAX_IDENTIFY_SIZE LOOKUP_MAX_LINE LookupBadMagic LookupCommand "
        "LookupdInfo LookupIdentify LookupPing LookupReader LookupRegister "
        "LookupResponseReader LookupSignal LookupUnregister decode_lookup_identify "
        "decode_lookupd_info encode_lookup_command encode_lookup_response"
    ),
    "_lookup_wire": (
        "MAGIC_V1 identify_bytes lookup_answer_size lookup_response_error registration_bytes"
    ),
    "_message": (
        "MESSAGE_FRAME_HEAD MESSAGE_FRAME_PREFIX MESSAGE_HEADER MESSAGE_HEADER_SIZE "
        "MESSAGE_ID_LENGTH MessageFields WireMessage append_message_frames decode_message "
        "encode_message encode_message_frame"
    ),
    "_mpub": "MpubPrefixCheck decode_mpub_body",
    "_names": "EPHEMERAL_SUFFIX is_ephemeral is_valid_channel_name is_valid_name is_valid_topic_name",
    "_nsqd_stats": "nsqd_stats",
    "_reader": "MAX_LINE_LENGTH BodySpec Command CommandReader",
    "_stats": "ChannelStats ClientStats Latency TopicStats aggregate_channel aggregate_topic",
}
_MODULES = {name: module for module, names in _EXPORTS.items() for name in names.split()}


__getattr__ = lazy_exports(__name__, _MODULES)
