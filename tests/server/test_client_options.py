"""Client options against the real bundled tritonserver: HTTP control and load, headers the server
checks, and gRPC TLS with a certificate authority made by the test.

The servers play "somebody else's server" (``--launch remote``): they are started with the local
launcher's ``extra_args`` (restricted APIs, TLS), which tritontune's own launch does not expose.
"""

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritontune.config.repository import ServedModel, WorkingRepository, load_model_source
from tritontune.config.variant import Variant
from tritontune.errors import ModelLoadError, ServerError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import MeasureSettings
from tritontune.server.client import TritonClient
from tritontune.server.endpoint import ClientProtocol, ClientSettings, Endpoint, TlsSettings
from tritontune.server.factory import LaunchKind, LaunchSettings
from tritontune.server.local import LocalTritonLauncher
from tritontune.server.remote import RemoteTriton
from tritontune.serving.session import TuningSession

pytestmark = [pytest.mark.integration, pytest.mark.functional]

# Each window waits for 20 replies, not the default 100: at 40 req/s open loop that is half a
# second (100 stretched every window to its 4x cap); what is under test is the connection.
FAST = MeasureSettings(
    warmup_s=0.3, window_s=0.3, min_window_requests=20, max_windows=3, detect_interference=False
)
KEY, SECRET = "Tritontune-Test-Key", "s3cret"


def _owner(example_repository: Path, tmp_path: Path, extra_args: tuple[str, ...]):
    work = WorkingRepository(tmp_path / "repo")
    launcher = LocalTritonLauncher(work.root, extra_args=extra_args)
    return work, launcher


def _remote_session(
    launcher: LocalTritonLauncher, source, served: ServedModel, url: str, client: ClientSettings
) -> TuningSession:
    # An unload by the session before leaves the server unready for a moment. Asked over the
    # owner's plain HTTP (health is not restricted): a client without the TLS or header that
    # ``url`` needs would wait out the deadline.
    _wait_ready(launcher.info.http_url)
    session = TuningSession(
        source, launch=LaunchSettings(LaunchKind.REMOTE, url=url, client=client), settings=FAST
    )
    session.__enter__()
    session.served_models = {
        source.name: served
    }  # the remote server reads its own repository; its config as it is
    return session


def _wait_ready(http_url: str) -> None:
    client = TritonClient(Endpoint(ClientProtocol.HTTP, http_url.split("://", 1)[-1]))
    deadline = time.monotonic() + 30
    while not client.is_ready():
        assert time.monotonic() < deadline, f"{http_url} did not become ready in 30 s"
        time.sleep(0.2)
    client.close()


@pytest.fixture
def restricted_server(example_repository: Path, tmp_path: Path) -> Iterator[tuple]:
    """A server whose model-repository and inference APIs need the header ``KEY: SECRET``."""
    restricted = f"model-repository,inference:{KEY.lower()}={SECRET}"
    work, launcher = _owner(
        example_repository,
        tmp_path,
        (f"--http-restricted-api={restricted}", f"--grpc-restricted-protocol={restricted}"),
    )
    with launcher:
        source = load_model_source(example_repository, "mlp")
        served = work.add(source, launcher.info.capabilities.backends)
        yield launcher, source, served


def test_http_control_and_load_with_a_header_the_server_requires(restricted_server):
    launcher, source, served = restricted_server
    http_url = launcher.info.http_url
    header = ((KEY, SECRET),)
    session = _remote_session(launcher, source, served, http_url, ClientSettings(headers=header))
    try:
        assert session.server.launcher.endpoint().url() == http_url
        session.load(Variant(max_batch_size=8, dynamic_batching=True))
        closed = session.measure(LoadSpec.concurrency(2))
        assert closed.error_count == 0 and closed.latency.count > 0
        assert closed.server is not None and closed.server.requests > 0  # HTTP statistics
        opened = session.measure(LoadSpec.rate(40))
        assert opened.error_count == 0 and opened.send_lag_p99_s is not None
    finally:
        session.__exit__(None, None, None)
    # gRPC: the same header as metadata (its key lowered), control and load
    # (Triton's gRPC expects the key with its own prefix)
    grpc_header = ((f"Triton-Grpc-Protocol-{KEY}", SECRET),)
    grpc = ClientSettings(protocol=ClientProtocol.GRPC, headers=grpc_header)
    session = _remote_session(launcher, source, served, launcher.info.grpc_url, grpc)
    try:
        session.load(Variant(max_batch_size=8))
        assert session.measure(LoadSpec.concurrency(2)).error_count == 0
    finally:
        session.__exit__(None, None, None)
    # without the header the server refuses to load: the header is what it checked
    for url, protocol in ((http_url, ClientProtocol.HTTP), (launcher.info.grpc_url, None)):
        session = _remote_session(launcher, source, served, url, ClientSettings(protocol=protocol))
        try:
            with pytest.raises((ModelLoadError, ServerError), match="(?i)restricted|unavailable"):
                session.load(Variant(max_batch_size=8))
        finally:
            session.__exit__(None, None, None)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    p = {name: directory / name for name in ("ca.key", "ca.pem", "server.key", "server.pem",
                                            "client.key", "client.pem", "san.cnf")}  # fmt: skip
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test CA",
             "-keyout", str(p["ca.key"]), "-out", str(p["ca.pem"]))  # fmt: skip
    p["san.cnf"].write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        csr = directory / f"{who}.csr"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
                 "-keyout", str(p[f"{who}.key"]), "-out", str(csr))  # fmt: skip
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(p["ca.pem"]), "-CAkey",
                 str(p["ca.key"]), "-CAcreateserial", "-days", "1", "-out", str(p[f"{who}.pem"]),
                 "-extfile", str(p["san.cnf"]))  # fmt: skip
    return p


def test_grpc_tls_with_a_client_certificate(example_repository: Path, tmp_path: Path):
    certs = _certificates(tmp_path)
    work, launcher = _owner(
        example_repository,
        tmp_path,
        (
            "--grpc-use-ssl=true",
            "--grpc-use-ssl-mutual=true",
            f"--grpc-server-cert={certs['server.pem']}",
            f"--grpc-server-key={certs['server.key']}",
            f"--grpc-root-cert={certs['ca.pem']}",
        ),
    )
    with launcher:
        source = load_model_source(example_repository, "mlp")
        served = work.add(source, launcher.info.capabilities.backends)
        port = launcher.info.grpc_url.rsplit(":", 1)[1]
        mutual = TlsSettings(ca=certs["ca.pem"], cert=certs["client.pem"], key=certs["client.key"])
        session = _remote_session(
            launcher, source, served, f"grpcs://127.0.0.1:{port}", ClientSettings(tls=mutual)
        )
        try:
            assert session.info.version == "2.51.0"
            session.load(Variant(max_batch_size=8))
            measured = session.measure(LoadSpec.concurrency(2))
            assert measured.error_count == 0 and measured.latency.count > 0
        finally:
            session.__exit__(None, None, None)
        refused = {
            "no client certificate": ClientSettings(tls=TlsSettings(ca=certs["ca.pem"])),
            "system CAs only": ClientSettings(tls=TlsSettings()),
            "no TLS": ClientSettings(),
        }
        for why, client in refused.items():
            with pytest.raises(ServerError, match="no ready Triton server answers"):
                RemoteTriton(f"127.0.0.1:{port}", client=client).start()
            assert why
