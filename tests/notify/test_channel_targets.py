"""A channel posts only to public internet addresses unless it allows a private one: checked
when it is made (the real add_channel command, the real admin form) and again on the
address each send connects to (the real sender posting to real loopback receivers), which
is the address that was checked, with the name's Host header, SNI and certificate.

No test here connects anywhere but loopback: IP literals are refused before any connection,
and where a name must resolve to something, it is `localhost` (/etc/hosts) or a `.test`
name answered by a stand-in resolver with loopback addresses. Where a test needs a
"public" address to connect to, the rule is told to count 127.0.0.1 as one, and the
refused address is another loopback address (127.0.0.2) with a receiver of its own that
must hear nothing.
"""

from __future__ import annotations

import datetime as dt
import html
import socket
import ssl
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client

from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import sender, sending, targets
from tasks.notify.channels import add
from tests.builders import approval, status
from tests.conftest import make_agent, push


@pytest.fixture
def fresh_clients():
    """The sender's HTTP clients are made anew for the test, and after it (they read
    SSL_CERT_FILE when made)."""
    sending.close_http_clients()
    yield
    sending.close_http_clients()


def resolver(monkeypatch, answers: dict[str, list[list[str]]]) -> list[str]:
    """Names resolve to these answers, one answer per lookup in turn (the last repeated);
    every other name for real. The names looked up, in order, are returned."""
    real = targets.resolve
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            return real(host, port)
        asked.append(host)
        queue = answers[host]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    monkeypatch.setattr(targets, "resolve", resolve)
    return asked


def count_as_public(monkeypatch, address: str) -> None:
    """The rule counts this one loopback address as public, so a send can go through to a
    receiver there; every other address is judged as ever."""
    real = targets.refusal
    monkeypatch.setattr(targets, "refusal", lambda a: None if str(a) == address else real(a))


def ask(registered, n: int = 1) -> None:
    body = status("AUTH_REQUIRED", task=f"task-{n}", at=n, metadata=approval(f"i-{n}", "Ship?"))
    assert push(Client(), registered, body, msg_id=f"push-{uuid.uuid4().hex}").status_code == 200


def opening() -> Notification:
    return Notification.objects.get(kind=Notification.Kind.OPENED)


# -- when a channel is made ------------------------------------------------------------------

REFUSED = [
    ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
    ("http://127.0.0.1:8400/admin/", "a loopback address"),
    ("http://[::1]:6379/", "a loopback address"),
    ("http://10.1.2.3/hook", "a private address"),
    ("http://172.16.0.1/hook", "a private address"),
    ("https://192.168.1.10/hook", "a private address"),
    ("http://100.64.0.1/hook", "a carrier-grade NAT address"),
    ("http://[fd12:3456::1]/hook", "a private address"),
    ("http://[fe80::1]/hook", "a link-local address"),
    ("http://0.0.0.0:8000/", "an unspecified address"),
    ("http://[::]/", "an unspecified address"),
    ("http://224.0.0.1/", "a multicast address"),
    ("http://[ff0e::1]/", "a multicast address"),
    ("http://[fec0::1]/", "a site-local address"),
    ("http://240.0.0.1/", "a reserved address"),
    ("http://255.255.255.255/", "a reserved address"),
    ("http://192.0.2.10/", "a non-public address"),
    # IPv6 forms of an IPv4 address reach that address: mapped, 6to4, NAT64.
    ("http://[::ffff:127.0.0.1]:8400/", "a loopback address"),
    ("http://[::ffff:169.254.169.254]/", "a link-local address"),
    ("http://[2002:a9fe:a9fe::]/", "a link-local address"),
    ("http://[64:ff9b::a9fe:a9fe]/", "a link-local address"),
    # Other spellings of 127.0.0.1 that resolvers read as numbers, without a DNS query.
    ("http://2130706433:8400/", "a loopback address"),
    ("http://0x7f.1:8400/", "a loopback address"),
    # A name: localhost resolves to loopback (/etc/hosts).
    ("http://localhost:8400/admin/", "a loopback address"),
]


@pytest.mark.parametrize(("url", "reason"), REFUSED, ids=[url for url, _ in REFUSED])
@pytest.mark.parametrize("kind", ["--webhook", "--slack"])
def test_a_channel_to_a_non_public_address_is_refused_and_nothing_is_made(db, kind, url, reason):
    with pytest.raises(CommandError) as refused:
        call_command("add_channel", "--team", "ops", kind, url)

    message = str(refused.value)
    assert reason in message and "--allow-private" in message
    assert "public internet addresses" in message
    assert not NotificationChannel.objects.exists() and not Group.objects.exists()


def test_a_channel_to_a_link_local_address_is_refused_and_nothing_is_made(db):
    with pytest.raises(CommandError) as refused:
        call_command(
            "add_channel", "--team", "ops", "--webhook", "http://169.254.169.254/latest/meta-data/"
        )

    assert str(refused.value).startswith(
        "http://169.254.169.254/… goes to 169.254.169.254, a link-local address: a channel "
        "posts only to public internet addresses unless it allows a private one"
    )
    assert "meta-data" not in str(refused.value)  # a URL's path is shown nowhere
    assert not NotificationChannel.objects.exists()


def test_a_name_resolving_to_a_public_and_a_private_address_is_refused(db, monkeypatch):
    # One private address among public ones is enough: a resolver may pick any of them.
    resolver(monkeypatch, {"mixed.test": [["127.0.0.1", "::1"]]})
    count_as_public(monkeypatch, "127.0.0.1")

    with pytest.raises(CommandError, match=r"goes to ::1, a loopback address"):
        call_command("add_channel", "--team", "ops", "--slack", "https://mixed.test/x")
    assert not NotificationChannel.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://8.8.8.8/hook",
        "https://[2606:4700::1111]/hook",
        "https://[::ffff:8.8.8.8]/hook",
        "https://[64:ff9b::808:808]/hook",
    ],
)
def test_a_channel_to_a_public_address_is_made(db, url, capsys):
    # Made only: nothing is sent, so nothing leaves this machine.
    call_command("add_channel", "--team", "ops", "--webhook", url)

    channel = NotificationChannel.objects.get()
    assert channel.target == url and channel.allow_private is False
    assert "private address" not in capsys.readouterr().out


def test_a_name_that_does_not_resolve_yet_is_made_and_checked_again_when_sent(
    clock, ops, monkeypatch
):
    asked = []

    def nothing(host: str, port: int) -> list[str]:
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(targets, "resolve", nothing)

    call_command("add_channel", "--team", "ops", "--slack", "https://hooks.nowhere.test/x")

    channel = NotificationChannel.objects.get()
    assert asked == ["hooks.nowhere.test"] and channel.allow_private is False
    ask(make_agent(team=ops, signing=True))
    assert sender.send_due() == 0
    assert asked == ["hooks.nowhere.test"] * 2
    channel.refresh_from_db()
    assert channel.last_error == "could not connect"
    assert channel.last_error_detail.startswith("could not connect: could not resolve hooks.")


def test_allow_private_lets_the_command_make_a_channel_to_loopback(db, capsys):
    call_command(
        "add_channel", "--team", "ops", "--webhook", "http://127.0.0.1:8400/hook", "--allow-private"
    )

    channel = NotificationChannel.objects.get()
    assert channel.allow_private is True
    assert "It may post to a private address." in capsys.readouterr().out


def test_the_admin_refuses_a_private_address_unless_the_box_is_ticked(admin_client):
    form = admin_client.get("/admin/tasks/notificationchannel/add/").content.decode()
    assert "Allow a private address" in form and "Dangerous" in form
    url = "http://169.254.169.254/latest/api/token"
    fields = {"team": "ops", "kind": "webhook", "target": url, "remind_after": ""}

    refused = admin_client.post("/admin/tasks/notificationchannel/add/", fields)

    assert refused.status_code == 200
    page = html.unescape(refused.content.decode())
    assert "goes to 169.254.169.254, a link-local address" in page
    assert "Allow a private address" in page
    assert not NotificationChannel.objects.exists() and not Group.objects.exists()

    made = admin_client.post(
        "/admin/tasks/notificationchannel/add/", {**fields, "allow_private": "on"}
    )

    assert made.status_code == 200  # the signing secret's page
    channel = NotificationChannel.objects.get()
    assert channel.allow_private is True and channel.target == url
    change = admin_client.get(f"/admin/tasks/notificationchannel/{channel.pk}/change/")
    page = change.content.decode()
    assert "Allow a private address" in page and 'name="allow_private"' in page


def test_the_admin_can_let_a_channel_made_before_the_check_post_to_its_private_receiver(
    admin_client, clock, ops
):
    with Listener("127.0.0.1") as listener:
        channel = NotificationChannel.objects.create(  # made by an earlier version
            team=ops, kind="slack", target=f"http://127.0.0.1:{listener.port}/services/T/B/x"
        )
        changed = admin_client.post(
            f"/admin/tasks/notificationchannel/{channel.pk}/change/",
            {"enabled": "on", "allow_private": "on", "remind_after": ""},
        )
        assert changed.status_code == 302, changed.content.decode()[:2000]
        ask(make_agent(team=ops, signing=True))

        assert sender.send_due() == 1

        assert len(listener.requests) == 1
    channel.refresh_from_db()
    assert channel.allow_private is True and channel.last_error == ""


# -- when a channel is sent to ---------------------------------------------------------------


def test_a_name_that_resolves_to_loopback_when_sent_is_refused_and_nothing_reaches_it(
    clock, ops, receiver, monkeypatch
):
    # Made while the name answered a public address; it answers loopback now, where a
    # receiver listens (a DNS rebinding, or a record that changed).
    port = receiver.base_url.rsplit(":", 1)[1]
    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.215.14"])
    channel = add("ops", "webhook", f"http://localhost:{port}/hook").channel
    monkeypatch.undo()
    ask(make_agent(team=ops, signing=True))

    assert sender.send_due() == 0

    assert receiver.requests == []
    row = opening()
    assert (row.state, row.attempts) == ("pending", 1)  # a failure like others: retried
    assert row.last_error == "refused: a loopback address"
    channel.refresh_from_db()
    assert channel.last_error == "refused: a loopback address"
    assert channel.last_error_detail == "refused: localhost is a loopback address (127.0.0.1)"


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_a_channel_made_before_the_check_is_refused_when_sent(clock, ops, address):
    with Listener(address) as listener:
        host = f"[{address}]" if ":" in address else address
        # Made by an earlier version, which let any address through.
        channel = NotificationChannel.objects.create(
            team=ops, kind="slack", target=f"http://{host}:{listener.port}/services/T/B/secret"
        )
        ask(make_agent(team=ops, signing=True))

        assert sender.send_due() == 0

        assert listener.requests == [] and listener.connections == 0
    channel.refresh_from_db()
    assert channel.last_error == "refused: a loopback address"
    assert channel.last_error_detail == "refused: a loopback address"
    assert opening().attempts == 1


def test_the_connection_goes_to_the_address_that_was_checked(clock, ops, monkeypatch):
    """A name that answers one address to the check and another to any later lookup is
    connected to at the first: there is no later lookup."""
    with Listener("127.0.0.1") as checked, Listener("127.0.0.2", checked.port) as rebound:
        count_as_public(monkeypatch, "127.0.0.1")
        asked = resolver(
            monkeypatch, {"rebind.test": [["127.0.0.1"], ["127.0.0.1"], ["127.0.0.2"]]}
        )
        add("ops", "webhook", f"http://rebind.test:{checked.port}/hook")
        assert asked == ["rebind.test"]  # the check when it was made
        ask(make_agent(team=ops, signing=True))

        assert sender.send_due() == 1

        assert asked == ["rebind.test", "rebind.test"]  # one lookup for the send
        assert rebound.requests == []
        [request] = checked.requests
        assert request["host"] == f"rebind.test:{checked.port}"
    assert opening().state == "sent"


def test_https_to_the_checked_address_keeps_the_names_sni_and_certificate(
    clock, ops, monkeypatch, tmp_path, fresh_clients
):
    authority, certificate, key = certificates(tmp_path, "rebind.test")
    monkeypatch.setenv("SSL_CERT_FILE", str(authority))
    sending.close_http_clients()  # the next client trusts the test's authority
    count_as_public(monkeypatch, "127.0.0.1")
    resolver(monkeypatch, {"rebind.test": [["127.0.0.1"]]})
    with Listener("127.0.0.1", tls=(certificate, key)) as receiver:
        add("ops", "slack", f"https://rebind.test:{receiver.port}/services/T/B/x")
        ask(make_agent(team=ops, signing=True))

        assert sender.send_due() == 1

        # Connected to 127.0.0.1, yet TLS named rebind.test and its certificate (which names
        # no IP address) was accepted for it.
        assert receiver.server_names == ["rebind.test"]
        [request] = receiver.requests
        assert request["host"] == f"rebind.test:{receiver.port}"
    assert opening().state == "sent"


# -- loopback receivers of the tests' own ----------------------------------------------------


class Listener:
    """An HTTP(S) receiver on a loopback address and port of the test's choosing: it answers
    every POST 204 and notes its headers, and (with TLS) the name each client asked for."""

    def __init__(self, address: str, port: int = 0, *, tls: tuple | None = None) -> None:
        self.requests: list[dict[str, str]] = []
        self.server_names: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
            daemon_threads = True

            def verify_request(self, request, client_address) -> bool:
                owner.connections += 1
                return True

        self.connections = 0
        self.server = Server((address, port), Handler)
        self.port = self.server.server_address[1]
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            context.sni_callback = lambda _socket, name, _context: self.server_names.append(name)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()


def certificates(directory, name: str):
    """A certificate authority, and a certificate for `name` (and no IP address) it signed,
    with its key: files in `directory`."""
    now = dt.datetime.now(dt.UTC)

    def made(subject: str, key, issuer: str, issuer_key, *, authority: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            # Wide: `now` is the test's travelled clock, OpenSSL checks against the real one.
            .not_valid_before(now - dt.timedelta(days=365))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=authority, path_length=None), critical=True)
        )
        if authority:
            builder = builder.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            )
        return builder.sign(issuer_key, hashes.SHA256())

    authority_key = ec.generate_private_key(ec.SECP256R1())
    authority = made(
        "Onlooker test authority",
        authority_key,
        "Onlooker test authority",
        authority_key,
        authority=True,
    )
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = made(name, key, "Onlooker test authority", authority_key, authority=False)
    files = directory / "authority.pem", directory / "certificate.pem", directory / "key.pem"
    files[0].write_bytes(authority.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    files[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files
