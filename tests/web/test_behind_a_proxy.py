"""Behind a TLS-terminating proxy (ONLOOKER_TRUSTED_PROXY=1, an https public URL): a request
the proxy marks as https carries HSTS and Secure cookies, a plain one is sent to https, and
/healthz and pushes still answer over plain HTTP. Without the setting a client's own
X-Forwarded-Proto is not believed."""

from __future__ import annotations

import httpx
import pytest

from tests.builders import status
from tests.conftest import encode, make_agent
from tests.live_server import LiveServer

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PUBLIC = "https://onlooker.test"
HTTPS = {"X-Forwarded-Proto": "https"}


def test_a_trusted_proxy_s_https_requests_get_hsts_and_secure_cookies_and_plain_ones_go_to_https():
    registered = make_agent()
    environment = {"ONLOOKER_TRUSTED_PROXY": "1", "ONLOOKER_PUBLIC_URL": PUBLIC}
    with LiveServer(environment=environment) as server:
        secure = httpx.get(server.url + "/accounts/login/", headers=HTTPS)
        plain = httpx.get(server.url + "/accounts/login/")
        health = httpx.get(server.url + "/healthz")
        pushed = httpx.post(
            server.url + registered.path,
            content=encode(status("WORKING", at=1)),
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {registered.bearer}",
            },
        )
    assert secure.status_code == 200
    assert secure.headers["Strict-Transport-Security"].startswith("max-age=31536000")
    assert "secure" in secure.headers["Set-Cookie"].lower()
    assert plain.status_code == 301
    assert plain.headers["Location"] == f"https://127.0.0.1:{server.port}/accounts/login/"
    assert "Strict-Transport-Security" not in plain.headers
    assert health.status_code == 200, "a load balancer's plain health check was redirected"
    assert pushed.status_code == 200, pushed.text


def test_without_a_trusted_proxy_a_client_s_x_forwarded_proto_is_not_believed():
    with LiveServer(environment={"ONLOOKER_PUBLIC_URL": PUBLIC}) as server:
        claimed = httpx.get(server.url + "/accounts/login/", headers=HTTPS)
    assert claimed.status_code == 200, "a plain request was redirected: it would loop"
    assert "Strict-Transport-Security" not in claimed.headers
