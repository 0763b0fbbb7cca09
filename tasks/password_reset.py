"""Password reset mail is sent off the request path.

Sending mail inside the request made a reset for an address that has an account slower
than one for an address that has none (a mail server answers in tens of milliseconds to
seconds): anyone could time the answer to learn which addresses have accounts. Here the
request only queues the mail; one background thread renders and sends it, so both answers
take the same time. The queue is bounded: when a mail server stalls, more requests drop
mail (and say so in the log) instead of piling it up in memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from django.contrib.auth.forms import PasswordResetForm
from django.core.mail import EmailMultiAlternatives
from django.template import loader
from django.utils import translation

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
    """Django's reset form; its mail is composed as Django's is, and rendered and sent by
    the background sender."""

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
