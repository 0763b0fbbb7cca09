"""What a running server's log says about clients' mistakes: one WARNING line each, no
traceback, not twice (Daphne's own root handler printed every line a second time)."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.live_server import LiveServer

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TOKEN = "a" * 32  # any well-formed CSRF cookie: the check reads the form before comparing


def test_client_errors_are_one_warning_line_each_without_a_traceback():
    with LiveServer() as server:
        answers = [
            httpx.get(server.url + "/", headers={"Host": "evil.example"}),
            httpx.post(
                server.url + "/accounts/login/",
                content="&".join(f"f{n}=1" for n in range(1_500)),
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Cookie": f"csrftoken={TOKEN}",
                },
            ),
            httpx.post(
                server.url + "/accounts/login/",
                content="f=" + "x" * 3_000_000,
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Cookie": f"csrftoken={TOKEN}",
                },
            ),
        ]
        server.stop()
        log = server.log()
    assert [answer.status_code for answer in answers] == [400, 400, 400]
    assert "Traceback" not in log
    for said in ["Invalid HTTP_HOST header", "number of GET/POST parameters", "Request body"]:
        lines = [line for line in log.splitlines() if said in line]
        assert len(lines) == 1, (said, lines)
        assert re.search(r"\sWARNING\s", lines[0]), lines[0]
