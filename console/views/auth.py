"""Signing in and out, and resetting a forgotten password (only where email is configured)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpRequest, HttpResponse

from console.forms import ConsoleAuthenticationForm

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


def password_reset_enabled() -> bool:
    """Password reset mails need somewhere to go: an SMTP host, or a non-SMTP backend (console, tests)."""
    return settings.EMAIL_BACKEND != SMTP_BACKEND or bool(settings.EMAIL_HOST)


class ConsoleLoginView(auth_views.LoginView):
    template_name = "registration/console_login.html"
    authentication_form = ConsoleAuthenticationForm
    redirect_authenticated_user = True
    extra_context = {"password_reset_enabled": password_reset_enabled}

    def form_invalid(self, form: ConsoleAuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        if form.throttled():
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after)
        return response


class ConsoleLogoutView(auth_views.LogoutView):
    next_page = "login"


class EmailRequiredMixin:
    """Password reset pages exist only where email is configured (404 otherwise)."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not password_reset_enabled():
            raise Http404("Password reset is not available: no email is configured.")
        return super().dispatch(request, *args, **kwargs)


class PasswordResetView(EmailRequiredMixin, auth_views.PasswordResetView):
    template_name = "registration/password_reset_form.html"
    email_template_name = "registration/password_reset_email.txt"
    subject_template_name = "registration/password_reset_subject.txt"


class PasswordResetDoneView(EmailRequiredMixin, auth_views.PasswordResetDoneView):
    template_name = "registration/password_reset_done.html"


class PasswordResetConfirmView(EmailRequiredMixin, auth_views.PasswordResetConfirmView):
    template_name = "registration/password_reset_confirm.html"


class PasswordResetCompleteView(EmailRequiredMixin, auth_views.PasswordResetCompleteView):
    template_name = "registration/password_reset_complete.html"
