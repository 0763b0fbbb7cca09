"""The "Mark checked" button of an uncertain effect's check (inbox row and session page)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_POST

from tasks.answering import answers, checks, rules
from tasks.api.sessions import api_login_required
from tasks.web.views import _acted, _refused


@require_POST
@api_login_required
def mark_checked(request: HttpRequest, interaction_id: int) -> HttpResponse:
    """A person looked at an effect the agent could not confirm. CSRF-checked like every
    POST; the permission (the one that answers) is checked in checks.mark_checked, on every
    post. JSON for the page's script, a redirect with a message for a plain form."""
    try:
        interaction = answers.visible(request.user, interaction_id)
    except rules.NotFound as error:
        return _refused(request, error, 0)

    def act():
        done = checks.mark_checked(request.user, interaction)
        return done.state, done.detail

    return _acted(request, interaction.task.session_id, act)
