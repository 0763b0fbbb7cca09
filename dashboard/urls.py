from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, include, path

from tasks.web.password_reset import LimitedResetView


def account_urls() -> list[URLPattern]:
    """Logging in and out, changing one's password, and, only when email is configured,
    resetting a forgotten one: without a mail server a reset request could only fail."""
    urls = [
        path("login/", auth_views.LoginView.as_view(), name="login"),
        path("logout/", auth_views.LogoutView.as_view(), name="logout"),
        path(
            "password_change/",
            auth_views.PasswordChangeView.as_view(),
            name="password_change",
        ),
        path(
            "password_change/done/",
            auth_views.PasswordChangeDoneView.as_view(),
            name="password_change_done",
        ),
    ]
    if settings.EMAIL_HOST:
        urls += [
            path(
                "password_reset/",
                # The mail is sent after the answer: every address is answered as fast;
                # mails per address and requests per client are capped.
                LimitedResetView.as_view(),
                name="password_reset",
            ),
            path(
                "password_reset/done/",
                auth_views.PasswordResetDoneView.as_view(),
                name="password_reset_done",
            ),
            path(
                "reset/<uidb64>/<token>/",
                auth_views.PasswordResetConfirmView.as_view(),
                name="password_reset_confirm",
            ),
            path(
                "reset/done/",
                auth_views.PasswordResetCompleteView.as_view(),
                name="password_reset_complete",
            ),
        ]
    return urls


urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include(account_urls())),
    path("", include("tasks.urls")),
]

# A request that meets a database gone away is a 503, not a 500 (tasks/web/unavailable.py).
handler500 = "tasks.web.unavailable.server_error"
