"""Password reset through Django's views, offered only where email is configured."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.urls import reverse


def test_a_reset_link_by_email_sets_a_new_password(client, alice):
    assert b"Forgot your password?" in client.get(reverse("login")).content

    response = client.post(reverse("password_reset"), {"email": "alice@example.com"})

    assert response.status_code == 302
    assert response["Location"] == reverse("password_reset_done")
    [message] = mail.outbox
    assert message.to == ["alice@example.com"]
    link = re.search(r"http://testserver(/accounts/reset/\S+/)", message.body).group(1)
    form = client.get(link, follow=True)
    assert form.status_code == 200 and b"Choose a new password" in form.content
    done = client.post(
        form.redirect_chain[-1][0],
        {"new_password1": "a-brand-new-passphrase", "new_password2": "a-brand-new-passphrase"},
    )
    assert done["Location"] == reverse("password_reset_complete")
    alice.user.refresh_from_db()
    assert alice.user.check_password("a-brand-new-passphrase")


def test_an_unknown_address_gets_the_same_answer_and_no_mail(client, alice):
    response = client.post(reverse("password_reset"), {"email": "nobody@example.com"})

    assert response["Location"] == reverse("password_reset_done")
    assert mail.outbox == []


@pytest.mark.django_db
def test_reset_is_not_offered_without_email(client, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = ""

    assert b"Forgot your password?" not in client.get(reverse("login")).content
    assert client.get(reverse("password_reset")).status_code == 404
    assert client.post(reverse("password_reset"), {"email": "alice@example.com"}).status_code == 404
