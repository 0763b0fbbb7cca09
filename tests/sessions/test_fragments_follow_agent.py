"""A session's stored fragments show its agent's name: renaming the agent in the admin must
not leave the old name on the monitoring screen, the board refetch or live sockets."""

from __future__ import annotations

import re

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from tasks.models import Agent, SessionFragments
from tests.builders import status
from tests.conftest import make_agent, push
from tests.live.test_live import ORIGIN, cookie_for, socket
from tests.test_admin import save_change_page


def rename(admin_client: Client, agent: Agent, name: str) -> None:
    save_change_page(admin_client, agent, name=name)


def tile_meta(html: str) -> list[str]:
    """The "who and when" line of every tile."""
    return re.findall(r'<p class="tile-meta">(.*?)</p>', html, re.S)


@pytest.mark.django_db
def test_renaming_an_agent_in_the_admin_renames_it_on_every_tile(
    admin_client, django_capture_on_commit_callbacks
):
    registered = make_agent(name="Builder")
    other = make_agent(name="Reviewer")
    for context in ("c-1", "c-2"):
        assert (
            push(
                Client(), registered, status("WORKING", task=context, at=1, context=context)
            ).status_code
            == 200
        )
    assert (
        push(Client(), other, status("WORKING", task="c-3", at=1, context="c-3")).status_code == 200
    )
    assert sum("Builder" in meta for meta in tile_meta(admin_client.get("/").content.decode())) == 2

    with django_capture_on_commit_callbacks(execute=True):
        rename(admin_client, registered.agent, "Night builds")

    for html in (
        admin_client.get("/").content.decode(),
        admin_client.get("/live/board/?tiles=1").json()["tiles"],
    ):
        metas = tile_meta(html)
        assert len(metas) == 3
        assert sum("Night builds" in meta for meta in metas) == 2
        assert sum("Reviewer" in meta for meta in metas) == 1
        assert not any("Builder" in meta for meta in metas)
    # Stored again, not only dropped: the screens read them instead of rendering each time.
    renamed = SessionFragments.objects.filter(session__agent=registered.agent)
    assert [("Night builds" in view.tile) for view in renamed] == [True, True]
    assert "Reviewer" in SessionFragments.objects.get(session__agent=other.agent).tile


@pytest.mark.django_db
def test_pages_show_the_new_name_even_before_the_fragments_are_stored_again(admin_client):
    """Until the fragments are stored again after the rename commits, pages render them."""
    registered = make_agent(name="Builder")
    assert push(Client(), registered, status("WORKING", at=1)).status_code == 200

    rename(admin_client, registered.agent, "Night builds")  # its after-commit work never runs

    [meta] = tile_meta(admin_client.get("/").content.decode())
    assert "Night builds" in meta and "Builder" not in meta


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_channel_layers")
def test_an_open_monitoring_screen_hears_the_new_name(ops):
    registered = make_agent(name="Builder", team=ops)
    assert push(Client(), registered, status("WORKING", at=1)).status_code == 200
    watcher = User.objects.create_user("watcher")
    watcher.groups.add(ops)
    admin = Client()
    admin.force_login(User.objects.create_superuser("root"))

    async def scenario() -> dict:
        communicator = socket(ORIGIN, await sync_to_async(cookie_for)(watcher))
        assert (await communicator.connect())[0]
        await sync_to_async(rename)(admin, registered.agent, "Night builds")
        message = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return message

    message = async_to_sync(scenario)()
    [meta] = tile_meta(message["html"]["tile"])
    assert "Night builds" in meta and "Builder" not in meta
