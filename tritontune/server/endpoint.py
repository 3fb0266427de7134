"""How tritontune talks to a server: protocol, TLS and headers, and the URL that names it.

The CLI turns ``--protocol/--ssl/--ssl-ca/--ssl-cert/--ssl-key/--header`` into one
:class:`ClientSettings`; for a remote server :func:`resolve_url` reads ``--url`` (or
``$TRITONTUNE_URL``) against it, so a scheme is either honoured or refused, never dropped. The
control client and the load generator both take the resulting :class:`Endpoint`, so every request
tritontune sends (control and load) carries the same TLS and headers.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path

from tritontune.enums import TextEnum
from tritontune.errors import InputError


class ClientProtocol(TextEnum):
    """The wire protocol of control and load requests: Triton's gRPC or its HTTP/REST API."""

    GRPC = "grpc"
    HTTP = "http"

    @classmethod
    def parse(cls, text: str) -> ClientProtocol:
        try:
            return cls(text.strip().lower())
        except ValueError:
            known = ", ".join(k.value for k in cls)
            raise InputError(f"--protocol: {text!r} is not one of {known}") from None


#: Triton's own ports, used when a URL names none (``https://`` and ``grpcs://`` use 443).
DEFAULT_PORTS = {ClientProtocol.GRPC: 8001, ClientProtocol.HTTP: 8000}
TLS_PORT = 443
#: scheme -> (protocol, TLS). ``http://`` and ``grpc://`` say "no TLS" as plainly as the others say TLS.
SCHEMES = {
    "grpc": (ClientProtocol.GRPC, False),
    "grpcs": (ClientProtocol.GRPC, True),
    "http": (ClientProtocol.HTTP, False),
    "https": (ClientProtocol.HTTP, True),
}

# RFC 9110 token characters: what an HTTP header name (and a gRPC metadata key) may contain.
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


@dataclass(frozen=True)
class TlsSettings:
    """TLS to a remote server. No CA file: the system's trusted CAs verify the server."""

    ca: Path | None = None
    cert: Path | None = None
    """Client certificate (mutual TLS); needs ``key``."""
    key: Path | None = None


@dataclass(frozen=True)
class ClientSettings:
    """The client options of a command, as given (the URL is resolved against them later)."""

    protocol: ClientProtocol | None = None
    """None: the URL's scheme decides, else gRPC."""
    tls: TlsSettings | None = None
    """None: no TLS (unless an ``https://`` or ``grpcs://`` URL asks for it)."""
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def wire(self) -> ClientProtocol:
        return self.protocol or ClientProtocol.GRPC

    def endpoint(self, address: str) -> Endpoint:
        """The endpoint at ``address`` (``host:port``) with these settings."""
        return Endpoint(self.wire, address, self.tls, self.headers)


@dataclass(frozen=True)
class Endpoint:
    """One server API to talk to: protocol, ``host:port``, TLS and the headers every request carries."""

    protocol: ClientProtocol
    address: str
    tls: TlsSettings | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def grpc(cls, address: str) -> Endpoint:
        return cls(ClientProtocol.GRPC, address)

    def url(self) -> str:
        """``grpc://host:port``, ``https://host:port``, ...: what the user sees."""
        scheme = f"{self.protocol.value}s" if self.tls else self.protocol.value
        return f"{scheme}://{self.address}"

    def header_dict(self) -> dict[str, str] | None:
        """The headers for tritonclient's ``headers=`` (None when there are none)."""
        return dict(self.headers) if self.headers else None

    def grpc_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The headers as gRPC metadata: gRPC refuses upper-case keys, and HTTP/2 header names
        are lower case anyway (HTTP header names are case-insensitive), so keys are lowered."""
        return tuple((key.lower(), value) for key, value in self.headers) or None


def parse_header(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (the value may hold ``=``) as a header; anything else is a one-line error."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not _HEADER_NAME.match(key):
        raise InputError(
            f"--header: {text!r} is not KEY=VALUE with KEY a header name "
            "(e.g. --header 'Authorization=Bearer TOKEN')"
        )
    if any(ch in value for ch in "\r\n\0"):
        raise InputError(f"--header: the value of {key!r} holds a line break or NUL")
    return key, value.strip()


def parse_headers(texts: list[str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(parse_header(text) for text in texts or [])


def client_settings(
    protocol: str | None,
    *,
    ssl: bool = False,
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    headers: list[str] | None = None,
) -> ClientSettings:
    """The client options parsed: any of the TLS files turns TLS on; a certificate needs its key."""
    if (cert is None) != (key is None):
        given, missing = ("--ssl-cert", "--ssl-key") if cert else ("--ssl-key", "--ssl-cert")
        raise InputError(f"{given} needs {missing} too (a client certificate and its private key)")
    tls = TlsSettings(ca=ca, cert=cert, key=key) if ssl or ca or cert or key else None
    return ClientSettings(
        protocol=ClientProtocol.parse(protocol) if protocol else None,
        tls=tls,
        headers=parse_headers(headers),
    )


def resolve_url(url: str, settings: ClientSettings) -> tuple[ClientSettings, str]:
    """Read a remote server's URL against the client options: ``(settings, "host:port")``.

    ``grpc://`` and ``http://`` choose the protocol without TLS; ``grpcs://`` and ``https://`` with
    TLS. A scheme that contradicts ``--protocol`` or ``--ssl``, or one tritontune can't honour
    (another scheme, a path, a query, credentials in the URL) is an error. Without a scheme the
    protocol is ``--protocol`` (default gRPC). Without a port: 443 for ``https://``/``grpcs://``,
    else Triton's (8001 gRPC, 8000 HTTP).
    """
    text = url.strip()
    if not text:
        raise InputError("--url is required with --launch remote (e.g. 10.0.0.5:8001)")
    scheme, has_scheme, rest = text.partition("://")
    if not has_scheme:
        scheme, rest = "", text
    scheme = scheme.lower()
    if has_scheme and scheme not in SCHEMES:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise InputError(f"--url: the scheme {scheme}:// is not supported (use {known} or none)")
    parts = urllib.parse.urlsplit(f"//{rest}")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise InputError(f"--url: {url!r} has a path or query; give only [SCHEME://]HOST[:PORT]")
    if parts.username is not None:
        raise InputError(f"--url: {url!r} holds credentials; send them with --header instead")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise InputError(f"--url: {url!r} has a port that is not a number from 0 to 65535") from None
    if not host:
        raise InputError(f"--url: {url!r} names no host")
    protocol, tls = settings.protocol, settings.tls
    if scheme:
        wanted, scheme_tls = SCHEMES[scheme]
        if protocol is not None and protocol != wanted:
            raise InputError(f"--url: {scheme}:// contradicts --protocol {protocol} (drop one of them)")
        if tls is not None and not scheme_tls:
            raise InputError(
                f"--url: {scheme}:// is without TLS but TLS was asked for (--ssl, --ssl-ca, "
                f"--ssl-cert or --ssl-key); use {wanted}s:// or no scheme"
            )
        protocol = wanted
        if scheme_tls and tls is None:
            tls = TlsSettings()
    protocol = protocol or ClientProtocol.GRPC
    if port is None:
        port = TLS_PORT if scheme in ("https", "grpcs") else DEFAULT_PORTS[protocol]
    shown_host = f"[{host}]" if ":" in host else host
    return replace(settings, protocol=protocol, tls=tls), f"{shown_host}:{port}"
