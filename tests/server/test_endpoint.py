"""Client options: URL schemes read against --protocol and TLS, headers, TLS files."""

from pathlib import Path

import pytest

from tritontune.errors import InputError
from tritontune.server.client import snapshot_from_json
from tritontune.server.endpoint import (
    ClientProtocol,
    ClientSettings,
    Endpoint,
    TlsSettings,
    client_settings,
    parse_header,
    resolve_url,
)
from tritontune.server.factory import LaunchKind, LaunchSettings, make_launcher
from tritontune.server.remote import RemoteTriton

GRPC, HTTP = ClientProtocol.GRPC, ClientProtocol.HTTP


@pytest.mark.parametrize(
    ("url", "protocol", "tls", "address"),
    [
        ("10.0.0.5", GRPC, False, "10.0.0.5:8001"),
        ("10.0.0.5:9001", GRPC, False, "10.0.0.5:9001"),
        ("grpc://host:1234/", GRPC, False, "host:1234"),
        ("grpcs://host", GRPC, True, "host:443"),
        ("http://host", HTTP, False, "host:8000"),
        ("HTTP://host:8080", HTTP, False, "host:8080"),
        ("https://triton.example.com", HTTP, True, "triton.example.com:443"),
        ("https://host:8443", HTTP, True, "host:8443"),
        ("[::1]:8001", GRPC, False, "[::1]:8001"),
    ],
)
def test_url_scheme_picks_protocol_tls_and_port(url, protocol, tls, address):
    settings, resolved = resolve_url(url, ClientSettings())
    assert (settings.protocol, settings.tls is not None, resolved) == (protocol, tls, address)


def test_protocol_option_without_a_scheme_and_tls_files_kept():
    settings, address = resolve_url("host", ClientSettings(protocol=HTTP))
    assert (settings.protocol, address) == (HTTP, "host:8000")
    tls = TlsSettings(ca=Path("/ca.pem"))
    settings, address = resolve_url("https://host", ClientSettings(tls=tls))
    assert settings.tls == tls and settings.endpoint(address).url() == "https://host:443"
    settings, _ = resolve_url("host:8001", ClientSettings(tls=TlsSettings()))
    assert settings.endpoint("host:8001").url() == "grpcs://host:8001"


@pytest.mark.parametrize(
    ("url", "settings", "message"),
    [
        ("", ClientSettings(), "--url is required with --launch remote"),
        ("ftp://host", ClientSettings(), "--url: the scheme ftp:// is not supported"),
        ("unix:///tmp/sock", ClientSettings(), "--url: the scheme unix:// is not supported"),
        ("grpc://host", ClientSettings(protocol=HTTP), "grpc:// contradicts --protocol http"),
        ("https://host", ClientSettings(protocol=GRPC), "https:// contradicts --protocol grpc"),
        ("http://host", ClientSettings(tls=TlsSettings()), "http:// is without TLS"),
        ("grpc://host", ClientSettings(tls=TlsSettings()), "use grpcs://"),
        ("http://host:8000/v2", ClientSettings(), "has a path or query"),
        ("host:8000?x=1", ClientSettings(), "has a path or query"),
        ("http://user:pw@host", ClientSettings(), "holds credentials"),
        ("host:http", ClientSettings(), "port that is not a number"),
        ("http://:8000", ClientSettings(), "names no host"),
    ],
)
def test_urls_that_cannot_be_honoured_are_errors(url, settings, message):
    with pytest.raises(InputError, match=message.replace("?", r"\?")):
        resolve_url(url, settings)


def test_headers():
    assert parse_header("Authorization=Bearer a=b") == ("Authorization", "Bearer a=b")
    assert parse_header(" x-api-key = 12 ") == ("x-api-key", "12")
    for bad in ("novalue", "=v", "bad key=v", "k:v"):
        with pytest.raises(InputError, match=r"--header: .* is not KEY=VALUE"):
            parse_header(bad)
    with pytest.raises(InputError, match="line break"):
        parse_header("k=a\r\nInjected: yes")
    endpoint = Endpoint(GRPC, "h:1", headers=(("Authorization", "t"), ("X-A", "b")))
    assert endpoint.grpc_metadata() == (("authorization", "t"), ("x-a", "b"))
    assert endpoint.header_dict() == {"Authorization": "t", "X-A": "b"}
    assert Endpoint.grpc("h:1").grpc_metadata() is None and Endpoint.grpc("h:1").header_dict() is None


def test_client_settings_parsing(tmp_path: Path):
    assert client_settings(None) == ClientSettings()
    assert client_settings("HTTP").protocol == HTTP
    with pytest.raises(InputError, match="--protocol: 'udp' is not one of grpc, http"):
        client_settings("udp")
    assert client_settings(None, ssl=True).tls == TlsSettings()
    assert client_settings(None, ca=tmp_path / "ca").tls == TlsSettings(ca=tmp_path / "ca")
    with pytest.raises(InputError, match="--ssl-cert needs --ssl-key"):
        client_settings(None, cert=tmp_path / "c")
    with pytest.raises(InputError, match="--ssl-key needs --ssl-cert"):
        client_settings(None, key=tmp_path / "k")
    headers = client_settings(None, headers=["A=1", "B=2"]).headers
    assert headers == (("A", "1"), ("B", "2"))


def test_tls_is_for_remote_servers_and_settings_reach_the_launcher(tmp_path: Path):
    def launcher(settings: LaunchSettings):
        return make_launcher(settings, tmp_path, log_path=tmp_path / "l", mounts=lambda: ())

    with pytest.raises(InputError, match="are for --launch remote"):
        launcher(LaunchSettings(client=ClientSettings(tls=TlsSettings())))
    http = ClientSettings(protocol=HTTP, headers=(("A", "1"),))
    assert launcher(LaunchSettings(client=http)).client_settings == http
    remote = launcher(LaunchSettings(LaunchKind.REMOTE, url="https://h", client=http))
    assert isinstance(remote, RemoteTriton)
    assert remote.endpoint_url == "https://h:443" and remote.client_settings.headers == http.headers


def test_http_statistics_json_sums_versions():
    stats = {
        "model_stats": [
            {
                "inference_count": 8,
                "execution_count": 2,
                "inference_stats": {
                    "success": {"count": 4, "ns": 10},
                    "queue": {"count": 4, "ns": 400},
                    "compute_infer": {"count": 4, "ns": 900},
                },
            },
            {"inference_count": 1, "execution_count": 1, "inference_stats": {"fail": {"count": 1}}},
        ]
    }
    snapshot = snapshot_from_json(stats)
    assert (snapshot.success_count, snapshot.fail_count, snapshot.inference_count) == (4, 1, 9)
    assert (snapshot.execution_count, snapshot.queue_ns, snapshot.compute_infer_ns) == (3, 400, 900)
