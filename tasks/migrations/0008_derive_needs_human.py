"""Sessions left saying "needs you" with no open interaction (answered, then the agent went
on) are set right: the flag is derived from open interactions from now on."""

from django.db import migrations
from django.db.models import Exists, OuterRef


def derive(apps, schema_editor):
    Session = apps.get_model("tasks", "Session")
    Interaction = apps.get_model("tasks", "Interaction")
    open_ = Interaction.objects.filter(task__session=OuterRef("pk"), state="open")
    Session.objects.filter(needs_human=True).exclude(Exists(open_)).update(needs_human=False)
    Session.objects.filter(needs_human=False).filter(Exists(open_)).update(needs_human=True)


class Migration(migrations.Migration):
    dependencies = [("tasks", "0007_agent_rpc_origin")]
    operations = [migrations.RunPython(derive, migrations.RunPython.noop)]
