"""One meaning per word: a session's progress card is a ProgressCard ("card" alone was the
agent card too), and its stored fragments are SessionFragments (they were a "view"). Renamed,
not made anew: every row stays."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tasks", "0021_channel_private_targets")]

    operations = [
        migrations.RenameModel("Card", "ProgressCard"),
        migrations.RenameModel("SessionView", "SessionFragments"),
        migrations.AlterField(
            model_name="sessionfragments",
            name="session",
            field=models.OneToOneField(
                on_delete=models.deletion.CASCADE,
                related_name="fragments",
                to="tasks.session",
            ),
        ),
    ]
