"""Sessions stored showing a finished turn while a question in an older turn still waits take
that turn's state, as ingest now derives it (Session.derive_state): a session that needs a
person is never shown done. Their cards' state follows, and their stored fragments are
dropped so the pages render them afresh."""

from django.db import migrations


def derive(apps, schema_editor):
    Session = apps.get_model("tasks", "Session")
    Interaction = apps.get_model("tasks", "Interaction")
    Card = apps.get_model("tasks", "Card")
    SessionView = apps.get_model("tasks", "SessionView")
    waiting = (
        Interaction.objects.filter(state="open")
        .select_related("task")
        .order_by("task__session_id", "-opened_at", "-id")
    )
    newest: dict[int, str] = {}
    for interaction in waiting.iterator():
        newest.setdefault(interaction.task.session_id, interaction.task.state)
    for session in Session.objects.filter(pk__in=newest).iterator():
        state = newest[session.pk]
        if session.state == state:
            continue
        Session.objects.filter(pk=session.pk).update(state=state)
        card = Card.objects.filter(session_id=session.pk).first()
        if card is not None and card.facts:
            # A write like any other: the revision goes up, so open pages take it.
            card.facts = {**card.facts, "state": state}
            card.revision += 1
            card.save(update_fields=["facts", "revision"])
        SessionView.objects.filter(session_id=session.pk).delete()


class Migration(migrations.Migration):
    dependencies = [("tasks", "0012_dismiss_forgotten_questions")]
    operations = [migrations.RunPython(derive, migrations.RunPython.noop)]
