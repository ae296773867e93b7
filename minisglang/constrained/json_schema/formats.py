"""String formats, strict enough that jsonschema's FormatChecker accepts every match."""

from __future__ import annotations

import functools

from minisglang.constrained.json_schema.errors import UnsupportedSchemaError
from minisglang.constrained.json_schema.regex_parts import Regex, rx

try:  # Python's own regex parser, used to read (and check) `pattern` keywords
    import re._parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse


_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001..9999
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = (
    rf"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    rf"|{_LEAP_YEAR}-02-29)"
)
# Fractions of a second: at most 9 digits (nanoseconds), or a model can write digits until
# max_new_tokens (the bundled one did, 4 runs out of 4, for a greedy `format: "time"`).
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"  # RFC 5322 atom characters
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"  # a DNS label
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|{_PCT})"  # RFC 3986 path character
_AUTHORITY = (
    rf"(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|{_PCT})*@)?"  # userinfo@
    rf"(?:[A-Za-z0-9._~!$&'()*+,;=-]|{_PCT})*(?::[0-9]*)?"
)  # host:port
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?"  # at most 62 characters
_SEGMENT_NC = rf"(?:[A-Za-z0-9._~!$&'()*+,;=@-]|{_PCT})"  # a path character but ':' (RFC 3986 segment-nz-nc)
_QUERY_FRAGMENT = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_HEX4 = r"[0-9a-fA-F]{1,4}"
_DUR_DATE = r"(?:[0-9]{1,4}Y(?:[0-9]{1,4}M)?(?:[0-9]{1,4}D)?|[0-9]{1,4}M(?:[0-9]{1,4}D)?|[0-9]{1,4}D)"
_DUR_TIME = r"(?:[0-9]{1,4}H(?:[0-9]{1,4}M)?(?:[0-9]{1,4}S)?|[0-9]{1,4}M(?:[0-9]{1,4}S)?|[0-9]{1,4}S)"


def _ipv6_compressed(before: int) -> str:
    """IPv6 text with `before` groups, "::", then at most 7 - before groups (hex groups only: no
    dotted IPv4 tail). The "::" stands for at least one zero group, so 7 groups at most are written."""
    after = 7 - before
    head = rf"{_HEX4}(?::{_HEX4}){{{before - 1}}}" if before else ""
    tail = rf"(?:{_HEX4}(?::{_HEX4}){{0,{after - 1}}})?" if after else ""
    return f"{head}::{tail}"


FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "email": rf"{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})+",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])",
    "uri": (
        rf"[A-Za-z][A-Za-z0-9+.-]*:(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/?(?:{_PCHAR}+(?:/{_PCHAR}*)*)?)"
        rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
    ),
    # at most 4 labels of at most 62 characters: within the 253 that a host name may have
    "hostname": rf"{_HOST_LABEL}(?:\.{_HOST_LABEL}){{0,3}}",
    # the full form, or one "::" for one or more zero groups anywhere (2001:db8::1)
    "ipv6": f"(?:{_HEX4}(?::{_HEX4}){{7}}|{'|'.join(_ipv6_compressed(i) for i in range(8))})",
    # ISO 8601 durations, components in order, at most 4 digits each
    "duration": rf"P(?:{_DUR_DATE}(?:T{_DUR_TIME})?|T{_DUR_TIME}|[0-9]{{1,4}}W)",
    "json-pointer": r"(?:/(?:[A-Za-z0-9._ -]|~[01])*)*",
}
# A relative reference: a network path, an absolute path, or a path whose first segment has no ':'.
FORMATS["uri-reference"] = (
    rf"(?:{FORMATS['uri']}|(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
    rf"|{_SEGMENT_NC}+(?:/{_PCHAR}*)*)?{_QUERY_FRAGMENT})"
)
# Shorter forms of the formats whose strings have no length limit, for a format with
# maxLength: a sound subset (every match is valid) of at most a known length.
_SHORT_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,14}[a-z0-9])?"  # at most 16 characters
_SHORT_PATH = r"(?:/[A-Za-z0-9._~-]{0,16}){0,4}"
SHORT_FORMATS = {
    "time": r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    "email": rf"[A-Za-z0-9._+-]{{1,32}}@{_SHORT_LABEL}(?:\.{_SHORT_LABEL}){{1,3}}",
    "uri": rf"https?://{_SHORT_LABEL}(?:\.{_SHORT_LABEL}){{0,3}}{_SHORT_PATH}",
    "hostname": rf"{_SHORT_LABEL}(?:\.{_SHORT_LABEL}){{0,3}}",
}
SHORT_FORMATS["date-time"] = f"{_DATE}T{SHORT_FORMATS['time']}"
SHORT_FORMATS["uri-reference"] = SHORT_FORMATS["uri"]


@functools.cache
def _length_range(regex: str) -> tuple[int, int | None]:
    """The shortest and longest (None: unbounded) match of a regex, as Python's parser
    measures it (our regexes mean the same in `re`)."""
    lo, hi = sre_parse.parse(regex).getwidth()
    return lo, None if hi >= sre_parse.MAXREPEAT else hi


def format_node(fmt: str) -> Regex:
    """The tree of a known format's strings (FORMATS: the text is the reference)."""
    return rx(FORMATS[fmt])


def _format_with_length(fmt: str, min_length: int, max_length: int | None, path: str) -> Regex:
    """A format's strings within minLength..maxLength: the format itself when all its
    strings fit, else its short form (SHORT_FORMATS) when all of those fit; else an error."""
    for regex in (FORMATS[fmt], SHORT_FORMATS.get(fmt)):
        if regex is None:
            continue
        lo, hi = _length_range(regex)
        if lo >= min_length and (max_length is None or (hi is not None and hi <= max_length)):
            return rx(regex)
    raise UnsupportedSchemaError(
        f"'format': {fmt!r} together with 'minLength'/'maxLength' at {path} is supported "
        "only when every string of the format (or of its short form) has a length within "
        "the bounds"
    )
