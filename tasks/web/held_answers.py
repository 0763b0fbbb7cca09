"""Undo, and answering several waiting items at once (issue 33): the page's side of
answering/held.py. Each answer of several goes through the one function a single answer
goes through (permission, one decision, separation of duties), so answering many is only
answering each; a partial failure names which failed and why."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_POST

from tasks.answering import answers, held, rules
from tasks.api.sessions import api_login_required
from tasks.models import Interaction
from tasks.wire.numbers import whole_number

MAX_MANY = 100  # items one bulk answer may name: more than any screen lists
# "a" and "d" on selected rows, for each kind that a button answers.
BULK = {
    Interaction.Kind.APPROVAL: {"approve": "approve", "deny": "deny"},
    Interaction.Kind.CONNECTION: {"approve": "connected", "deny": "cancel"},
}


def _refusal(error: rules.AnswerError) -> JsonResponse:
    return JsonResponse({"error": type(error).__name__, "detail": str(error)}, status=error.status)


@require_POST
@api_login_required
def undo(request: HttpRequest, interaction_id: int) -> HttpResponse:
    """Withdraw one's own held answer before it is sent; 409 once it has been."""
    try:
        interaction = answers.visible(request.user, interaction_id)
        done = held.withdraw(request.user, interaction)
    except rules.AnswerError as error:
        return _refusal(error)
    # `interaction` was read while held: it still names the decision withdrawn.
    words = f"Undone, nothing was sent: {held.said(interaction)}"
    return JsonResponse({"state": done.state, "detail": words})


def _ids(request: HttpRequest) -> list[int]:
    raw = request.POST.getlist("interaction")
    if not raw:
        raise rules.AnswerError("name at least one interaction to answer")
    if len(raw) > MAX_MANY:
        raise rules.AnswerError(f"at most {MAX_MANY} interactions at once")
    ids = [whole_number(value) for value in raw]
    if any(pk is None for pk in ids):
        raise rules.AnswerError("interaction must be the id of an interaction")
    return list(dict.fromkeys(pk for pk in ids if pk is not None))  # each once, in order


def _one(request: HttpRequest, pk: int, bulk: str, reason: str) -> dict:
    """One item of several: as its own answer, its outcome or why it failed."""
    try:
        interaction = answers.visible(request.user, pk)
        names = BULK.get(interaction.kind)
        if names is None:
            raise rules.AnswerError(
                f"a {interaction.get_kind_display()} needs its own answer: open it to answer"
            )
        decision = answers.parse_decision(
            interaction.kind, {"decision": names[bulk], "reason": reason}
        )
        done = held.answer_from_page(request.user, interaction, decision)
    except rules.AnswerError as error:
        return {"id": pk, "ok": False, "status": error.status, "detail": str(error)}
    return {"id": pk, "ok": True, **held.as_json(done)}


@require_POST
@api_login_required
def answer_many(request: HttpRequest) -> HttpResponse:
    """Approve (or deny) every named item: `interaction` (repeated), `decision` approve or
    deny, an optional `reason` sent with each. 200 with each item's outcome when any was
    answered, else the first refusal's status, with every item's."""
    try:
        ids = _ids(request)
        bulk = request.POST.get("decision", "")
        if bulk not in ("approve", "deny"):
            raise rules.AnswerError("decision must be 'approve' or 'deny'")
        reason = answers.parse_decision(
            Interaction.Kind.APPROVAL, {"decision": bulk, "reason": request.POST.get("reason", "")}
        ).reason
    except rules.AnswerError as error:
        return _refusal(error)
    results = [_one(request, pk, bulk, reason) for pk in ids]
    failed = [result for result in results if not result["ok"]]
    status = 200 if len(failed) < len(results) else failed[0]["status"]
    detail = f"{len(results) - len(failed)} of {len(results)} answered"
    if failed:
        detail += "; not answered: " + "; ".join(f"#{one['id']}: {one['detail']}" for one in failed)
    return JsonResponse(
        {"results": results, "failed": len(failed), "detail": detail}, status=status
    )
