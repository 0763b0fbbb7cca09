import json

from django.core.management.base import BaseCommand, CommandError

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
        parser.add_argument(
            "--json",
            action="store_true",
            help="print one JSON object: agent, push_url, push_token, push_bearer, "
            "signing_secret, api_token",
        )

    def handle(self, *args, **options):
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
        result = registration.as_json()
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
