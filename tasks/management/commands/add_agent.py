import json
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from tasks.answering import agent_policy
from tasks.answering.agents import AlreadyRegistered, OtherRpcOrigin, RegistrationError, register


class Command(BaseCommand):
    help = (
        "Register an A2A 1.0 agent from its card and print its push URL and secrets "
        "(shown only this once)."
    )

    def add_arguments(self, parser):
        parser.add_argument("card_url", help="the agent's base URL or agent-card.json URL")
        parser.add_argument("--name", default="", help="display name (default: the card's)")
        parser.add_argument(
            "--team",
            default="",
            help="group (made if missing) whose members alone see its sessions; without it, "
            "every user does",
        )
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument("--signing-secret", default="", help="Standard Webhooks whsec_…")
        secret.add_argument("--generate-signing-secret", action="store_true")
        parser.add_argument(
            "--credential", default="", help='Authorization for calls to it, e.g. "Bearer …"'
        )
        parser.add_argument(
            "--allow-other-rpc-origin",
            action="store_true",
            help="accept a card whose JSON-RPC URL (where the credential is sent) is at another "
            "scheme, host or port than the card",
        )
        parser.add_argument(
            "--again",
            action="store_true",
            help="register a card URL that is registered already, as a second agent with its "
            "own push URL, secrets and sessions",
        )
        add_policy_arguments(parser)
        parser.add_argument(
            "--oauth-client-id",
            default="",
            help="the OAuth client registered at the agent's authorization server, for a "
            "card that declares an OAuth 2.0 authorization code flow (people then Connect)",
        )
        parser.add_argument("--oauth-client-secret", default="", help="that client's secret")
        parser.add_argument(
            "--json",
            action="store_true",
            help="print one JSON object: agent, push_url, push_token, push_bearer, "
            "signing_secret, api_token, and the policy: expire_after, on_expiry, "
            "no_self_approval, per_person",
        )

    def handle(self, *args, **options):
        try:
            expire_after = (
                agent_policy.parse_expiry(options["expire_after"])
                if options["expire_after"]
                else None
            )
        except agent_policy.PolicyError as error:
            raise CommandError(f"--expire-after: {error}") from None
        try:
            registration = register(
                options["card_url"],
                name=options["name"],
                team=options["team"],
                signing_secret=options["signing_secret"],
                generate_signing_secret=options["generate_signing_secret"],
                credential=options["credential"],
                allow_other_rpc_origin=options["allow_other_rpc_origin"],
                again=options["again"],
                expire_after=expire_after,
                on_expiry=options["on_expiry"],
                no_self_approval=options["no_self_approval"],
                per_person=options["per_person"],
                oauth_client_id=options["oauth_client_id"],
                oauth_client_secret=options["oauth_client_secret"],
            )
        except AlreadyRegistered as error:
            raise CommandError(
                f"{error}. Its push URL and secrets were printed when it was registered (the "
                "admin rotates its signing secret and replaces its card API token). To "
                "register it a second time on purpose, add --again"
            ) from None
        except OtherRpcOrigin as error:
            raise CommandError(f"{error} (--allow-other-rpc-origin)") from None
        except RegistrationError as error:
            raise CommandError(str(error)) from None
        result = {**registration.as_json(), **agent_policy.as_json(registration.agent)}
        if options["json"]:
            self.stdout.write(json.dumps(result))
            return
        agent = registration.agent
        self.stdout.write(self.style.SUCCESS(f"Registered {agent.name} (agent {agent.pk})."))
        self.stdout.write(f"Push URL:        {result['push_url']}")
        self.stdout.write(f"Push token:      {result['push_token']}")
        self.stdout.write(f"Push bearer:     {result['push_bearer']}")
        self.stdout.write(f"Card API token:  {result['api_token']}")
        if result["signing_secret"]:
            self.stdout.write(f"Signing secret:  {result['signing_secret']}")
            self.stdout.write(
                "Pushes must be signed (Standard Webhooks); tokens alone are refused."
            )
        self.stdout.write("These secrets are shown only now: store them with the agent.")
        for line in agent_policy.describe(agent):
            self.stdout.write(line)
        # Some runtimes push only to hosts on an allowlist, or only with a secret registered
        # beforehand (docs/push-configurations.md): a task's own config would fail silently.
        host = urlsplit(settings.ONLOOKER_PUBLIC_URL).hostname
        self.stdout.write(
            f"If the agent's runtime only pushes to allowlisted hosts, allow {host}; if it "
            "needs a push secret registered, use the push bearer/token above (or the signing "
            "secret)."
        )


def add_policy_arguments(parser) -> None:
    """The team's policy for what the agent asks (answering/agent_policy.py)."""
    parser.add_argument(
        "--expire-after",
        metavar="DURATION",
        default="",
        help="a question still open this long expires, e.g. 4h, 30m, 1d2h (1 minute to 30 "
        "days; without it questions wait until someone answers)",
    )
    parser.add_argument(
        "--on-expiry",
        choices=agent_policy.ON_EXPIRY,
        default="deny",
        help="deny: an expired approval or connection is denied on the team's behalf (never "
        "approved; a question is only marked); leave: only marked expired, the agent keeps "
        "waiting (default: deny)",
    )
    parser.add_argument(
        "--no-self-approval",
        action="store_true",
        help="whoever started a task from the composer cannot approve its approvals: "
        "someone else must",
    )
    parser.add_argument(
        "--per-person",
        action="store_true",
        help="answers, messages and cancels need the person's own credential (saved on "
        "their settings page, or connected with OAuth): no shared credential stands in",
    )
