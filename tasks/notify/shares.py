"""Each team's share of the sender's workers: which of the channels with something due get a
worker now.

A worker sending to a receiver that hangs is held for the whole timeout. Were workers
handed out first come, first served, one team's ten dead receivers would hold every worker,
and another team's healthy channel would wait for one to come free (9.6 s, issue 29). So:

- one team's channels hold at most `per_team` workers at once: its dead receivers cost it
  its own share, not the others';
- free workers go to the teams in turn, one channel each per round, starting after the team
  served last (and a team holding fewer workers before one holding more), so no team's
  channels wait behind all of another's;
- nothing is queued behind a busy worker: a channel that gets no worker now is picked at a
  later look, when one is free (the caller looks again when any worker finishes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Due:
    """A channel with something to send, and its team."""

    channel: int
    team: int


def pick(
    due: Sequence[Due],
    holding: Counter,
    *,
    free: int,
    per_team: int,
    after: int | None = None,
) -> list[Due]:
    """Which of `due` to start now, in order: at most `free` in all, and no team past
    `per_team` counting the workers it is `holding` already (team → how many). Teams take
    turns, fewest held first, then from the one after `after` (the last served)."""
    queues: dict[int, list[Due]] = {}
    for item in due:
        queues.setdefault(item.team, []).append(item)
    held = Counter(holding)
    teams = sorted(queues)
    if after is not None:
        later = [team for team in teams if team > after]
        teams = later + [team for team in teams if team <= after]
    teams.sort(key=lambda team: held[team])  # stable: the turn order stays among equals
    chosen: list[Due] = []
    while len(chosen) < free:
        progressed = False
        for team in teams:
            if len(chosen) >= free:
                break
            if queues[team] and held[team] < per_team:
                chosen.append(queues[team].pop(0))
                held[team] += 1
                progressed = True
        if not progressed:
            break
    return chosen
