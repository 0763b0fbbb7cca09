from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Agents and sessions"

    def ready(self) -> None:
        from tasks.answering import a2a_client, agents, answered_versions
        from tasks.sessions import search

        # Every call to an agent records the extensions it echoed (its tier) on the agent.
        a2a_client.on_echo = agents.record_echo
        # ... and the A2A version it answered as, when it is not the one Onlooker speaks.
        a2a_client.on_version = answered_versions.record
        # A migration that rebuilds an indexed table on SQLite drops its search triggers.
        post_migrate.connect(search.ensure_triggers, sender=self)
