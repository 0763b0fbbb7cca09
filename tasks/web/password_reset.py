"""Password reset mail is sent off the request path.

Sending mail inside the request made a reset for an address that has an account slower
than one for an address that has none (a mail server answers in tens of milliseconds to
seconds): anyone could time the answer to learn which addresses have accounts. Here the
request only queues the mail; one background thread renders and sends it, so both answers
take the same time. The queue is bounded: when a mail server stalls, more requests drop
mail (and say so in the log) instead of piling it up in memory.

Reset is capped (tasks/web/reset_limits.py): mails to one address (beyond the cap none is sent,
and the answer is the one every address gets, so the cap tells nothing about accounts) and
requests from one client (beyond it a 429 page). The link in the mail is built from
ONLOOKER_PUBLIC_URL, never from the request's Host header, which the requester writes.
"""

from __future__ import annotations

import logging
import queue
import threading
import unicodedata
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.views import PasswordResetView
from django.core.mail import EmailMultiAlternatives
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template import loader
from django.utils import translation

from tasks.web import reset_limits

log = logging.getLogger(__name__)

QUEUED_MAILS = 100  # waiting to be sent; more are dropped until the server catches up


class _Sender:
    """One daemon thread sending queued mails in turn: a stalled mail server holds it, never
    a request, and never a process that is shutting down."""

    def __init__(self, size: int) -> None:
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue(maxsize=size)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> None:
        self._start()
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            log.warning("password reset mail dropped: %d mails are already waiting", QUEUED_MAILS)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="password-reset-mail", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception as error:  # noqa: BLE001 - one failed mail must not stop the rest
                # The type only: an SMTP error's text can hold the address, a traceback the token.
                log.warning("password reset mail not sent: %s", type(error).__name__)


_sender = _Sender(QUEUED_MAILS)


class BackgroundResetForm(PasswordResetForm):
    """Django's reset form; its mail is composed as Django's is (its link to
    ONLOOKER_PUBLIC_URL), at most so many times an hour per address, and rendered and sent
    by the background sender."""

    def save(self, **options: Any) -> None:
        public = urlsplit(settings.ONLOOKER_PUBLIC_URL)
        options["domain_override"] = public.netloc + public.path
        options["use_https"] = public.scheme == "https"
        # Taken for every address asked for, with an account or not: the same work, and the
        # same time, either way.
        address = _folded(self.cleaned_data["email"])
        cap = settings.ONLOOKER_RESET_MAILS_PER_ADDRESS_PER_HOUR
        if not reset_limits.take(reset_limits.Scope.ADDRESS, address, cap).allowed:
            # The key's first characters tell one address's refusals apart, never which.
            log.warning(
                "password reset mail not sent: %d already went to address %s… this hour",
                cap,
                reset_limits.key(reset_limits.Scope.ADDRESS, address)[:12],
            )
            return
        super().save(**options)

    def send_mail(
        self,
        subject_template_name: str,
        email_template_name: str,
        context: dict[str, Any],
        from_email: str | None,
        to_email: str,
        html_email_template_name: str | None = None,
    ) -> None:
        # Rendering takes time too, so it leaves the request as well; the worker renders in
        # the language this request was answered in.
        language = translation.get_language()

        def job() -> None:
            with translation.override(language):
                subject = loader.render_to_string(subject_template_name, context)
                body = loader.render_to_string(email_template_name, context)
                message = EmailMultiAlternatives(
                    "".join(subject.splitlines()), body, from_email, [to_email]
                )
                if html_email_template_name is not None:
                    html = loader.render_to_string(html_email_template_name, context)
                    message.attach_alternative(html, "text/html")
            # Not Django's send_mail: it logs a failure with its traceback, whose text (an
            # SMTP refusal) can hold the address.
            message.send()

        _sender.submit(job)


def _folded(address: str) -> str:
    # As Django's form matches an account's address: case and Unicode form do not make
    # another address, so they do not make another allowance.
    return unicodedata.normalize("NFKC", address).casefold()


class LimitedResetView(PasswordResetView):
    """Django's reset page, refusing a client that asked too often this hour."""

    form_class = BackgroundResetForm

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        client = reset_limits.client_address(request)
        cap = settings.ONLOOKER_RESET_REQUESTS_PER_CLIENT_PER_HOUR
        taken = reset_limits.take(reset_limits.Scope.CLIENT, client, cap)
        if not taken.allowed:
            log.warning("password reset refused: client %s asked %d times this hour", client, cap)
            response = render(request, "registration/password_reset_limited.html", status=429)
            response["Retry-After"] = str(taken.retry_after)
            return response
        return super().post(request, *args, **kwargs)
