import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from tasks.api import auth


class Command(BaseCommand):
    help = (
        "Make an API token for a person: scripts send it as 'Authorization: Bearer onl_…' and "
        "read /api/decisions as that person. The token is printed only this once."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", help="the person the token acts as")
        parser.add_argument("--name", default="", help="what it is for, e.g. 'audit export'")
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object: id, user, name, token"
        )

    def handle(self, *args, **options):
        users = get_user_model()
        try:
            user = users.objects.get_by_natural_key(options["username"])
        except users.DoesNotExist:
            raise CommandError(f"no person is called {options['username']!r}") from None
        if not user.is_active:
            raise CommandError(f"{user.get_username()} is deactivated: a token would not work")
        name = options["name"].strip()
        if len(name) > 100:
            raise CommandError("--name is at most 100 characters")
        token, text = auth.make(user, name)
        if options["json"]:
            data = {"id": token.pk, "user": user.get_username(), "name": name, "token": text}
            self.stdout.write(json.dumps(data))
            return
        self.stdout.write(f"Token {token.pk} for {user.get_username()} (shown only now):")
        self.stdout.write(text)
        self.stdout.write(f"Revoke it with: manage.py revoke_api_token {token.pk}")
