from django.core.management.base import BaseCommand, CommandError

from tasks.answering import credential_keys


class Command(BaseCommand):
    help = (
        "Encrypt every stored credential again under the newest key in "
        "ONLOOKER_CREDENTIAL_KEYS (the first), so older keys can be dropped. Values no "
        "configured key opens are named and left as they are (exit status 1)."
    )

    def handle(self, *args, **options):
        tallies = credential_keys.rotate()
        unopened = [each for tally in tallies for each in tally.unopened]
        for tally in tallies:
            self.stdout.write(tally.line())
        for each in unopened:
            self.stderr.write(
                f"{each.model} {each.pk}: its {each.field} opens with no configured key; "
                "left as it is"
            )
        if unopened:
            raise CommandError(
                f"{len(unopened)} stored value(s) open with no key in ONLOOKER_CREDENTIAL_KEYS "
                "and were left as they are: add the key they were sealed with and run "
                "rotate_credentials again, or enter those credentials again"
            )
        resealed = sum(tally.resealed for tally in tallies)
        self.stdout.write(
            self.style.SUCCESS(
                f"Every stored credential is under the newest key ({resealed} resealed)."
            )
        )
