"""What agents' work cost, summed per agent and day."""

from __future__ import annotations

from django.db import models

from tasks.models.agents import Agent


class UsageDay(models.Model):
    """One agent's telemetry/v1 usage on one UTC day, summed over its tasks. Written only by
    tasks/sessions/usage.py, which says how (a task adds what its telemetry grew by)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="usage_days")
    date = models.DateField()
    # Whole nano-dollars: sums are exact integers on every database (SQLite would keep a
    # DecimalField as a float), and 0.1 + 0.2 is 0.3.
    cost_nanos = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    steps = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "date"], name="unique_usage_day")]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.date}"
