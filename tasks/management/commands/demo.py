"""`python manage.py demo`: Onlooker doing its real job within a minute, with nothing to
configure. It prepares the embedded database, a demo user who may answer, and the example
A2A agent (`python -m demo.agent`, a real a2a-sdk server on loopback, registered exactly as a
user would with add_agent), starts the dashboard and a few sessions, and stops everything on
Ctrl-C. Running it again reuses the user, the agent and the sessions the earlier runs started:
a first message that already titles one of the agent's sessions is not sent again, so a second
run shows the first run's sessions once, not twice.

With `ONLOOKER_DEMO_WEBHOOK=URL` set, the demo's team (`demo`, which the demo user joins) gets
a signed webhook channel posting to that URL, made the first time through the same call as
`add_channel --webhook` (its signing secret printed that once) and reused after.

The example agent is started as a program, not imported: nothing in `tasks` depends on it.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from tasks.answering import a2a_client, agent_card, agents
from tasks.models import Agent, Session
from tasks.models.notify import NotificationChannel
from tasks.notify import channels

ROOT = Path(settings.BASE_DIR)
AGENT_NAME = "Example agent"
TEAM = "demo"
WEBHOOK_VARIABLE = "ONLOOKER_DEMO_WEBHOOK"
FIRST_MESSAGES = (
    "Ship release 2.4 to production",
    "Research: compare three hosted vector databases for us",
    "Connect the GitHub account and open the release PR",
    "Ship the hotfix for the login timeout",
)


class Command(BaseCommand):
    help = (
        "Run Onlooker with an example agent, a demo user and a few live sessions. With "
        f"{WEBHOOK_VARIABLE}=URL set, the demo's team ({TEAM}) also gets a signed webhook "
        "channel that posts each question the agent asks to that URL (made once; its signing "
        "secret is printed then, and the channel is reused on later runs)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="the dashboard's port")
        parser.add_argument("--agent-port", type=int, default=8765, help="the agent's port")
        parser.add_argument("--sessions", type=int, default=3, help="sessions to start (0: none)")

    def handle(self, *args, port: int, agent_port: int, sessions: int, **options) -> None:
        url = f"http://127.0.0.1:{port}"
        if "ONLOOKER_PUBLIC_URL" not in os.environ:
            # Push configs name this address; the dashboard child gets it too.
            settings.ONLOOKER_PUBLIC_URL = os.environ["ONLOOKER_PUBLIC_URL"] = url
        elif settings.ONLOOKER_PUBLIC_URL.rstrip("/") != url:
            raise CommandError(
                f"ONLOOKER_PUBLIC_URL is {settings.ONLOOKER_PUBLIC_URL}; the demo serves "
                f"{url}. Unset it (or set it to that) for the demo."
            )
        for name, wanted in (("dashboard", port), ("example agent", agent_port)):
            if _listening(wanted):
                raise CommandError(
                    f"port {wanted} is taken, so the {name} cannot start there: stop what "
                    "runs there, or choose another with --port / --agent-port"
                )
        # Ctrl-C (SIGINT) and a stop request (SIGTERM) both stop the demo, installed by hand:
        # started in the background from a script, a process inherits SIGINT as ignored, and
        # Python then never turns it into KeyboardInterrupt.
        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
        logs = Path(settings.DATA_DIR)
        children: list[subprocess.Popen] = []
        try:
            call_command("migrate", interactive=False, verbosity=0)
            password = _demo_user()
            self._webhook_channel()
            agent = self._start_agent(agent_port, children, logs / "demo-agent.log")
            dashboard = _start([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p",
                                str(port), "dashboard.asgi:application"],
                               logs / "demo-dashboard.log")  # fmt: skip
            children.append(dashboard)
            _wait_until_listening(dashboard, port, "the dashboard")
            started, kept = self._start_sessions(agent, sessions)
            self._welcome(port, password, started, kept)
            while all(child.poll() is None for child in children):
                time.sleep(0.5)
            raise CommandError(f"a demo process stopped on its own; see the logs in {logs}")
        except KeyboardInterrupt:
            self.stdout.write("\nStopping the dashboard and the example agent…")
        finally:
            # A Ctrl-C (or stop request) from now on must not cut the shutdown short.
            _let_go_of_stop_signals()
            _stop(children)
            self.stdout.write("Onlooker has stopped.")
            self.stdout.flush()

    def _webhook_channel(self) -> None:
        url = os.environ.get(WEBHOOK_VARIABLE, "").strip()
        if not url:
            return
        try:
            channel, secret = webhook_channel(url)
        except channels.ChannelError as error:
            raise CommandError(f"{WEBHOOK_VARIABLE}: {error}") from None
        if secret is None:
            self.stdout.write(
                f"Team {TEAM}'s webhook channel #{channel.pk} posts to {channel.shown_target} "
                "(its signing secret was printed when it was made)."
            )
            return
        self.stdout.write(
            f"Made team {TEAM}'s webhook channel #{channel.pk}: it posts to "
            f"{channel.shown_target}, signed with (shown only now, keep it in the "
            f"receiver) {secret}"
        )

    def _start_agent(self, port: int, children: list[subprocess.Popen], log: Path) -> Agent:
        card_url = f"http://127.0.0.1:{port}{agent_card.CARD_PATH}"
        agent = Agent.objects.filter(card_url=card_url).first()
        secret = agent.signing_secret if agent else agents.new_signing_secret()
        process = _start([sys.executable, "-m", "demo.agent", "--port", str(port),
                          "--signing-secret", secret], log)  # fmt: skip
        children.append(process)
        _wait_until_listening(process, port, "the example agent")
        if agent is None:
            registration = agents.register(card_url, name=AGENT_NAME, signing_secret=secret)
            agent = registration.agent
            self.stdout.write(f"Registered the example agent (#{agent.pk}) from {card_url}.")
        else:
            agents.refresh_card(agent)
        return agent

    def _start_sessions(self, agent: Agent, count: int) -> tuple[int, int]:
        """Starts the first `count` demo sessions that no earlier run started; returns how
        many it started and how many it kept from earlier runs."""
        started = kept = 0
        for text in FIRST_MESSAGES[:count]:
            # The session is titled after its first message (sessions/changes.py).
            if Session.objects.filter(agent=agent, title=text).exists():
                kept += 1
                continue
            _, push = agents.new_push_config(agent)
            try:
                a2a_client.send_message(agent, text, push=push)
                started += 1
            except a2a_client.A2AError as error:
                self.stderr.write(f"Could not start '{text}': {error}")
        return started, kept

    def _welcome(self, port: int, password: str | None, started: int, kept: int = 0) -> None:
        url = f"http://127.0.0.1:{port}/"
        lines = [
            "",
            f"Onlooker is running: open {url}",
            "Log in as 'demo'"
            + (f" with the password {password}" if password else " (password as printed before)"),
            *(
                (
                    f"The example agent is working on {started} "
                    f"session{'s' if started != 1 else ''}; approve or deny what it asks,",
                    "or write to it from a session page. Ctrl-C stops everything.",
                )
                if started
                else (
                    "No sessions were started: start one with the example agent from the "
                    "monitoring screen.",
                    "Ctrl-C stops everything.",
                )
            ),
            f"Logs: {Path(settings.DATA_DIR) / 'demo-dashboard.log'} and demo-agent.log beside it.",
        ]
        if kept:
            # The agent keeps its tasks in memory: a question an earlier run left open can
            # only be dismissed (the session page offers it once the agent says so).
            lines.insert(
                3,
                f"Kept {kept} session{'s' if kept != 1 else ''} from an earlier run as "
                "they were (not started again); the restarted agent no longer knows their "
                "tasks.",
            )
        if password is None:
            lines.append("Forgot the password? .venv/bin/python manage.py changepassword demo")
        self.stdout.write("\n".join(lines) + "\n")


def _demo_user() -> str | None:
    """The demo user, who may answer; the password is made (and returned) only once."""
    approvers, _ = Group.objects.get_or_create(name="approvers")
    approvers.permissions.add(Permission.objects.get(codename="answer_interaction"))
    user = User.objects.filter(username="demo").first()
    password = None
    if user is None:
        password = secrets.token_urlsafe(9)
        user = User.objects.create_user("demo", password=password)
    user.groups.add(approvers)
    return password


def webhook_channel(url: str) -> tuple[NotificationChannel, str | None]:
    """The demo team's signed webhook channel posting to `url`, and its signing secret when
    it was made just now (None when it was made by an earlier run: a secret is never shown
    twice). Made through `channels.add`, as `add_channel --webhook` makes one; the demo user
    joins the team, so their settings page lists it. Raises channels.ChannelError for a URL
    that could never receive."""
    # Targets are sealed at rest (no two encryptions match): compared once read.
    team_webhooks = NotificationChannel.objects.filter(
        team__name=TEAM, kind=NotificationChannel.Kind.WEBHOOK
    )
    existing = next((c for c in team_webhooks if c.target == url.strip()), None)
    if existing is not None:
        channel, secret = existing, None
    else:
        # The demo runs on one machine, and its receiver is the operator's own, typically
        # beside it on loopback: the one place a private address is what is meant.
        added = channels.add(TEAM, NotificationChannel.Kind.WEBHOOK, url, allow_private=True)
        channel, secret = added.channel, added.signing_secret
    for user in User.objects.filter(username="demo"):
        user.groups.add(channel.team)
    return channel, secret


def _start(command: list[str], log: Path) -> subprocess.Popen:
    # Its own process group: Ctrl-C reaches the command, which then stops children in order.
    # Their chatter goes to a log file, so the terminal keeps what a person needs to read.
    with log.open("a") as out:
        return subprocess.Popen(  # noqa: S603 - our own argv
            command, cwd=ROOT, start_new_session=True, stdout=out, stderr=subprocess.STDOUT
        )


def _interrupt(signum, frame) -> None:
    # Only the first one stops the demo: a second Ctrl-C while the first is being handled
    # would cut the shutdown short and leave the children running.
    _let_go_of_stop_signals()
    raise KeyboardInterrupt


def _let_go_of_stop_signals() -> None:
    # A handler that does nothing rather than SIG_IGN: a signal already on its way when the
    # handler changes would otherwise be reported as "ignored due to race condition".
    signal.signal(signal.SIGINT, _let_go)
    signal.signal(signal.SIGTERM, _let_go)


def _let_go(signum, frame) -> None:
    pass


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _wait_until_listening(process: subprocess.Popen, port: int, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CommandError(f"{name} exited with {process.returncode}; see its log")
        if _listening(port):
            return
        time.sleep(0.1)
    raise CommandError(f"{name} did not start listening on port {port} within 30 s")


def _stop(children: list[subprocess.Popen]) -> None:
    for child in reversed(children):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    # One deadline for all: Ctrl-C must not take ten seconds per child that lingers.
    deadline = time.monotonic() + 10
    for child in reversed(children):
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
