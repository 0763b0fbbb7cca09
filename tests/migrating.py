"""Tests of what older versions left behind. Either an old migration's data function runs
on today's database (`as_written`: such a function asks the app registry for models by the
names they had when it was written; some have been renamed since (0022), and their tables
with them), or the database itself is migrated back to an older schema, filled with that
schema's models, and migrated forward again (`schema_at`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.apps import apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

# Name then → name now.
RENAMED = {"card": "ProgressCard", "sessionview": "SessionFragments"}


class AsWritten:
    """Today's app registry, answering to the model names an older migration uses."""

    def get_model(self, app_label: str, model_name: str):
        return apps.get_model(app_label, RENAMED.get(model_name.lower(), model_name))


as_written = AsWritten()


# -- the schema as an older migration left it -------------------------------------------------


def migrate_to(target: tuple[str, str]):
    """Migrate the test database to `target`; the models as they were there (today's models
    have columns an older schema lacks, and today's writes may need them)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


def migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@contextmanager
def schema_at(target: tuple[str, str]) -> Iterator:
    """The database at `target` while the block writes what that schema held (its models
    given), and migrated to the latest schema after, however the block ends."""
    try:
        yield migrate_to(target)
    finally:
        migrate_to_latest()


def old_agent(old_apps, name: str, **fields):
    """An agent made with an older schema's models (`old_apps`, from `schema_at`)."""
    return old_apps.get_model("tasks", "Agent").objects.create(
        name=name,
        card_url="http://agent.test/.well-known/agent-card.json",
        rpc_url="http://agent.test/a2a/jsonrpc",
        protocol_version="1.0",
        **fields,
    )
