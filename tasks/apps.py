from django.apps import AppConfig


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Agents and sessions"

    def ready(self) -> None:
        from tasks import a2a_client, agents

        # Every call to an agent records the extensions it echoed (its tier) on the agent.
        a2a_client.on_echo = agents.record_echo
