"""One rule for secrets: a storage URL's password, and a ``--header`` value, are never printed or
written.

A storage URL names where a study lives (``postgresql://alice:PASSWORD@db/tritontune``); every
place that shows or keeps it (the terminal, error messages, the results JSON, the tuning record,
the report) shows :func:`redact_url`'s form instead: the same URL with the password as ``***``
(``postgresql://alice:***@db/tritontune``), so a reader still knows which database it was. The
URL itself is used only to open the storage.

What a database driver says when it can't connect may quote the URL, or the password alone
(SQLAlchemy's and psycopg's errors do); :func:`redact_text` takes every form of a known URL's
secret out of such a text before it goes anywhere.

The URL is parsed with SQLAlchemy's own URL parser (what Optuna's RDB storage opens it with), so
the part hidden is the part the driver would send as the password; a password in the query string
(libpq's ``?password=``) is hidden too.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote, quote_plus, unquote

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

MASK = "***"

#: Query-string keys whose values are secrets (libpq's ``password``, ``sslpassword``; tokens).
_SECRET_KEY = re.compile(r"pass|secret|token|key", re.IGNORECASE)
#: ``scheme://user:password@`` where SQLAlchemy can't parse the rest.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<password>[^@\s]*)(?=@)")


def _parse(url: str) -> URL | None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except (ArgumentError, ValueError):
        return None


def _secrets_of(url: str) -> list[str]:
    """The secret strings a URL holds (its password, secret query values), as written."""
    parsed = _parse(url)
    if parsed is None:
        match = _USERINFO.search(url)
        return [match.group("password")] if match and match.group("password") else []
    found = [str(parsed.password)] if parsed.password else []
    for key, value in parsed.query.items():
        if _SECRET_KEY.search(key):
            found.extend(v for v in (value if isinstance(value, tuple) else (value,)) if v)
    return found


def _forms(secret: str) -> set[str]:
    """A secret as it may stand in a text: raw, percent-decoded, and percent-encoded."""
    return {f for f in (secret, unquote(secret), quote(secret, safe=""), quote_plus(secret)) if f}


def redact_url(url: str) -> str:
    """``url`` with its password (and secret query values) shown as ``***``; unchanged when it
    holds none."""
    secrets = _secrets_of(url)
    if not secrets:
        return url
    parsed = _parse(url)
    if parsed is None:
        return _hide(_USERINFO.sub(lambda m: m.group("head") + MASK, url, count=1), secrets)
    query = {k: (MASK if _SECRET_KEY.search(k) else v) for k, v in parsed.query.items()}
    return parsed.set(query=query).render_as_string(hide_password=True).replace("%2A%2A%2A", MASK)


@dataclass(frozen=True)
class _Secret:
    """A secret made ready to hide once, for the many texts it is hidden from: every form it may
    stand in (longest first, so that a secret containing another is hidden whole) and, for a URL,
    the URL and its redacted form, which stands in its place."""

    forms: tuple[str, ...]
    url: str | None = None
    shown: str | None = None

    @classmethod
    def of_url(cls, url: str) -> _Secret | None:
        secrets = _secrets_of(url) if url else []
        return cls(_all_forms(secrets), url, redact_url(url)) if secrets else None

    @classmethod
    def of_value(cls, value: str) -> _Secret:
        return cls(_all_forms([value]))

    def hide(self, text: str) -> str:
        if self.url is None or self.shown is None:
            return _hide(text, self.forms)
        placeholder = "\0tritontune-url\0"
        return _hide(text.replace(self.url, placeholder), self.forms).replace(placeholder, self.shown)


def _all_forms(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({f for s in secrets for f in _forms(s)}, key=len, reverse=True))


def _hide(text: str, forms: Iterable[str]) -> str:
    for form in forms:
        text = text.replace(form, MASK)
    return text


def redact_text(text: str, urls: Iterable[str] = ()) -> str:
    """``text`` with every form of the secrets of ``urls`` replaced by ``***``; each whole URL
    stands as its redacted form, so that the message still names the place."""
    for url in urls:
        secret = _Secret.of_url(url)
        if secret is not None:
            text = secret.hide(text)
    return text


# -- the process's secrets -------------------------------------------------------------------------
# The CLI registers each storage URL and header value it is given (the option's callback), so that
# whatever reaches the terminal (a message, an error a library raised, a traceback) goes through
# redact() on the way out: a message nobody thought of still can't carry the password. Each is
# parsed once, when registered: redact() runs on every line printed.

_known: list[_Secret] = []


def _register(secret: _Secret) -> None:
    if secret not in _known:
        _known.append(secret)
        # Longer URLs first (one may contain another), then the bare values.
        _known.sort(key=lambda s: -len(s.url) if s.url else 0)


def register_url(url: str | None) -> None:
    """Hide ``url``'s secrets from everything this process prints from now on."""
    secret = _Secret.of_url(url) if url else None
    if secret is not None:
        _register(secret)


def register_secret(value: str | None) -> None:
    """Hide ``value`` (a header's value: a token) from everything this process prints."""
    if value:
        _register(_Secret.of_value(value))


def redact(text: str) -> str:
    """``text`` with every registered secret hidden."""
    for secret in _known:
        text = secret.hide(text)
    return text


class RedactingStream:
    """A text stream that hides registered secrets in what is written to the stream ``target()``
    returns at the time (looked up on each write, so that a swapped ``sys.stdout`` is followed)."""

    def __init__(self, target: Callable[[], TextIO]) -> None:
        self._target = target

    def write(self, text: str) -> int:
        target = self._target()
        # A console writing to sys.stdout that is itself redacting (the CLI's entry point) is
        # redacted there, once.
        target.write(text if isinstance(target, RedactingStream) else redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self._target(), name)


def guard_process_output() -> None:
    """Route this process's standard output and error, and the logging handlers writing to them,
    through :func:`redact`: a library's log line or a traceback can't carry a secret either.
    For the command-line entry point (tests that capture output swap the streams themselves)."""
    import logging

    out, err = sys.stdout, sys.stderr
    guarded = {id(out): RedactingStream(lambda: out), id(err): RedactingStream(lambda: err)}
    sys.stdout, sys.stderr = guarded[id(out)], guarded[id(err)]
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and id(handler.stream) in guarded:
                handler.setStream(guarded[id(handler.stream)])
