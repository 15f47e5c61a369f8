"""A TLS-terminating reverse proxy on loopback, as a deployment puts in front of the
server: it answers HTTPS with a self-signed certificate made here, and forwards each
request as plain HTTP from a source address of its own, with ``X-Forwarded-Proto: https``
and ``X-Forwarded-For`` set (whatever the client sent of them dropped). One request per
connection (it asks for ``Connection: close``), its body by ``Content-Length`` (no chunked
uploads: a browser's forms have a length)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from contextlib import suppress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024
_DROPPED = (
    b"x-forwarded-proto",
    b"x-forwarded-for",
    b"x-forwarded-host",
    b"forwarded",
    b"connection",
)


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1, and its key (PEM files in ``folder``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "proxy-cert.pem", folder / "proxy-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class TlsProxy:
    def __init__(self, folder: Path, target: tuple[str, int], source_address: str) -> None:
        self.certificate, key = self_signed_certificate(folder)
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(self.certificate, key)
        self._target = target
        self._source = source_address
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name="tls-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def client_context(self) -> ssl.SSLContext:
        """What a client that trusts this proxy's certificate verifies it with."""
        return ssl.create_default_context(cafile=str(self.certificate))

    def close(self) -> None:
        self._closed = True
        with suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                raw, peer = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw, peer[0]), daemon=True).start()

    def _serve(self, raw: socket.socket, client_ip: str) -> None:
        try:
            client = self._tls.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        try:
            head, rest = self._read_head(client)
            if head is None:
                return
            upstream = socket.create_connection(self._target, source_address=(self._source, 0))
        except OSError:
            client.close()
            return
        with upstream, client:
            # The whole request first, then the whole answer: the TLS socket is never read
            # and written at once from two threads.
            upstream.sendall(_forwarded(head, client_ip) + rest)
            _copy(upstream, client)

    @staticmethod
    def _read_head(client: ssl.SSLSocket) -> tuple[bytes | None, bytes]:
        data = b""
        while _HEAD_END not in data:
            chunk = client.recv(65536)
            if not chunk or len(data) > _MAX_HEAD:
                return None, b""
            data += chunk
        head, _, rest = data.partition(_HEAD_END)
        length = _content_length(head)
        while len(rest) < length:
            chunk = client.recv(65536)
            if not chunk:
                return None, b""
            rest += chunk
        return head, rest


def _content_length(head: bytes) -> int:
    for field in head.split(b"\r\n")[1:]:
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def _forwarded(head: bytes, client_ip: str) -> bytes:
    request_line, *fields = head.split(b"\r\n")
    kept = [f for f in fields if f.split(b":", 1)[0].strip().lower() not in _DROPPED]
    added = [
        b"X-Forwarded-Proto: https",
        b"X-Forwarded-For: " + client_ip.encode(),
        b"Connection: close",
    ]
    return b"\r\n".join([request_line, *kept, *added]) + _HEAD_END


def _copy(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    with suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
