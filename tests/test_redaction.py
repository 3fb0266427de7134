"""The one rule for secrets (tritontune/redaction.py): a storage URL keeps its place but loses its
password, wherever it is shown; a driver's message loses every form of the password; whatever the
process prints goes through the registered secrets."""

from __future__ import annotations

import io

import pytest

from tritontune import redaction
from tritontune.redaction import RedactingStream, redact_text, redact_url


@pytest.fixture(autouse=True)
def no_registered_secrets(monkeypatch):
    monkeypatch.setattr(redaction, "_known", [])


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("sqlite:///tritontune.db", "sqlite:///tritontune.db"),
        ("postgresql://alice@db/tritontune", "postgresql://alice@db/tritontune"),
        ("postgresql://alice:pw@db:5432/tritontune", "postgresql://alice:***@db:5432/tritontune"),
        ("postgresql+psycopg://alice:p%40ss%2Fw@db/t", "postgresql+psycopg://alice:***@db/t"),
        (
            "postgresql://alice@db/t?sslmode=require&password=hunter2",
            "postgresql://alice@db/t?password=***&sslmode=require",  # SQLAlchemy sorts the query
        ),
        ("not-a-url x://bob:hunter2@host", "not-a-url x://bob:***@host"),
    ],
)
def test_a_url_keeps_its_place_and_loses_its_password(url, shown):
    assert redact_url(url) == shown


def test_a_drivers_message_loses_every_form_of_the_password():
    url = "postgresql://alice:p%40ss%2Fw0rd@127.0.0.1:1/db"
    message = f"can't open {url}: password 'p@ss/w0rd' rejected (conninfo password=p%40ss%2Fw0rd)"
    shown = redact_text(message, [url])
    assert "p@ss/w0rd" not in shown and "p%40ss%2Fw0rd" not in shown
    assert "postgresql://alice:***@127.0.0.1:1/db" in shown


def test_text_without_a_known_url_is_left_alone():
    assert redact_text("nothing secret here", ["sqlite:///x.db", ""]) == "nothing secret here"


def test_what_the_process_prints_goes_through_the_registered_secrets():
    target = io.StringIO()
    stream = RedactingStream(lambda: target)
    redaction.register_url("postgresql://alice:Tops3cret@db/t")
    redaction.register_secret("Bearer abcdef123456")
    redaction.register_secret("abcdef123456")
    stream.write("error: postgresql://alice:Tops3cret@db/t failed; Tops3cret; token abcdef123456\n")
    assert target.getvalue() == "error: postgresql://alice:***@db/t failed; ***; token ***\n"
    assert stream.getvalue() == target.getvalue()  # everything else is the stream's own


def test_the_header_option_registers_each_value_and_its_credential():
    from tritontune.cli._option_groups import secret_headers

    assert secret_headers(["Authorization=Bearer tok3n-xyz", "X-Api-Key=k3y"]) is not None
    assert (
        redaction.redact("sent Bearer tok3n-xyz, then tok3n-xyz and k3y") == "sent ***, then *** and ***"
    )
