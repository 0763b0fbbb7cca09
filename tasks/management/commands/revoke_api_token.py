from django.core.management.base import BaseCommand, CommandError

from tasks.models import ApiToken


class Command(BaseCommand):
    help = "Revoke API tokens: by id (create_api_token prints it), or all of a person's."

    def add_arguments(self, parser):
        parser.add_argument("ids", nargs="*", type=int, metavar="ID", help="token ids")
        parser.add_argument("--user", metavar="USERNAME", help="every token of this person")

    def handle(self, *args, **options):
        ids, username = options["ids"], options["user"]
        if not ids and not username:
            raise CommandError("name token ids, or --user USERNAME")
        tokens = ApiToken.objects.all()
        if ids:
            missing = set(ids) - set(tokens.filter(pk__in=ids).values_list("pk", flat=True))
            if missing:
                raise CommandError(f"no token {', '.join(map(str, sorted(missing)))}: none revoked")
            tokens = tokens.filter(pk__in=ids)
        if username:
            tokens = tokens.filter(user__username=username)
        count, _ = tokens.delete()
        self.stdout.write(f"Revoked {count} token{'' if count == 1 else 's'}.")
