"""The deployment recipe, run: nginx serving deploy/nginx/onlooker.conf (its ports changed) in
front of `manage.py serve` with two server processes, on PostgreSQL + Redis. A real a2a-sdk
agent pushes through nginx, a person's page, live socket and answer go through it, and the
answer reaches the agent. A 10 MB push is refused by nginx before any server reads it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.asyncio.client import connect

from tasks.models import Interaction, Session
from tests.answering.test_a2a_peer import (
    add_agent,
    start_peer,  # noqa: F401 - a fixture
    wait_for_approval,
    wait_for_state,
)
from tests.conftest import member
from tests.live_server import LiveServer
from tests.processes import ROOT, free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RECIPE = ROOT / "deploy" / "nginx" / "onlooker.conf"
DEADLINE = 20.0
# Debian's nginx, also where /usr/sbin is not on the PATH (a user's shell).
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


@pytest.fixture
def production_stack() -> None:
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.skip("the recipe is PostgreSQL + Redis (DATABASE_URL and REDIS_URL)")
    if not Path(NGINX).is_file():
        why = "needs nginx (Debian's package: apt install nginx; .ci/run installs it)"
        if os.environ.get("ONLOOKER_REQUIRE_NGINX") == "1":
            pytest.fail(why)
        pytest.skip(why)


def nginx_config(directory: Path, listen: int, upstream: int) -> Path:
    """The recipe as written, with only its ports changed, inside a main file of our own
    (its own pid, logs and temporary files, in the foreground)."""
    site = RECIPE.read_text()
    site, listens = re.subn(r"listen 80;", f"listen 127.0.0.1:{listen};", site)
    site, upstreams = re.subn(r"server 127\.0\.0\.1:8000;", f"server 127.0.0.1:{upstream};", site)
    assert (listens, upstreams) == (1, 1), "the recipe's listen or upstream line changed"
    (directory / "onlooker.conf").write_text(site)
    temporary = "\n".join(
        f"    {kind}_temp_path {directory / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    main = directory / "nginx.conf"
    main.write_text(
        f"daemon off;\nworker_processes 1;\npid {directory / 'nginx.pid'};\n"
        f"error_log {directory / 'error.log'} warn;\n"
        "events { worker_connections 256; }\n"
        f"http {{\n    access_log off;\n{temporary}\n"
        f"    include {directory / 'onlooker.conf'};\n}}\n"
    )
    return main


@pytest.fixture
def nginx(tmp_path, production_stack):
    """nginx on a free loopback port in front of two server processes; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with LiveServer(processes=2, environment={"ONLOOKER_PUBLIC_URL": url}) as servers:
        main = nginx_config(tmp_path, port, servers.port)
        process = subprocess.Popen(
            [NGINX, "-p", str(tmp_path), "-c", str(main), "-e", str(tmp_path / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + DEADLINE
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (
                        (tmp_path / "error.log").read_text()
                        if (tmp_path / "error.log").exists()
                        else ""
                    )
                    pytest.fail(f"nginx did not serve Onlooker: {log}\n{servers.log()}")
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=10)


def test_an_agent_and_a_person_work_through_nginx_and_its_two_servers(
    nginx,
    start_peer,  # noqa: F811 - the fixture imported above
    settings,
    ops,
    approvers,  # noqa: F811
):
    settings.ONLOOKER_PUBLIC_URL = nginx  # the push URL add_agent gives the agent
    peer = start_peer()
    registration = add_agent(peer.card_url, "--team", "ops")
    assert registration["push_url"].startswith(nginx)
    task = wait_for_approval(peer, registration)  # its pushes came through nginx
    session = Session.objects.get(context_id=task["contextId"])
    interaction = Interaction.objects.get(task__task_id=task["id"])
    client = Client()
    client.force_login(member("alice", ops, approvers))
    cookies = {"sessionid": client.cookies["sessionid"].value}

    with httpx.Client(base_url=nginx, cookies=cookies, timeout=DEADLINE) as browser:
        page = browser.get(f"/sessions/{session.pk}/")
        assert page.status_code == 200
        assert f"/interactions/{interaction.pk}/answer/" in page.text
        token = browser.cookies["csrftoken"]

        async def answer_while_listening() -> tuple[httpx.Response, dict]:
            async with connect(
                f"{nginx.replace('http://', 'ws://', 1)}/ws/live/?session={session.pk}",
                origin=nginx,
                additional_headers={"Cookie": f"sessionid={cookies['sessionid']}"},
                open_timeout=DEADLINE,
            ) as socket:
                response = await asyncio.to_thread(
                    browser.post,
                    f"/interactions/{interaction.pk}/answer/",
                    data={"decision": "approve", "csrfmiddlewaretoken": token},
                    headers={"Accept": "application/json", "Referer": str(page.url)},
                )
                async with asyncio.timeout(DEADLINE):
                    while True:
                        message = json.loads(await socket.recv())
                        if (
                            message.get("session") == session.pk
                            and "answered" in json.dumps(message).lower()
                        ):
                            return response, message

        response, heard = asyncio.run(answer_while_listening())

    assert response.status_code == 200, response.text
    assert response.json()["detail"].startswith("Approved by alice")
    assert heard["session"] == session.pk
    wait_for_state(peer, registration, task, "TASK_STATE_COMPLETED")


def test_a_ten_megabyte_push_is_refused_by_nginx(nginx):
    response = httpx.post(
        f"{nginx}/a2a/push/any-endpoint/",
        content=b"{" + b" " * (10 * 1024 * 1024) + b"}",
        headers={"Content-Type": "application/json"},
        timeout=DEADLINE,
    )
    assert response.status_code == 413
    assert response.headers["server"].startswith("nginx")
