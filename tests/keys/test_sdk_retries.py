"""The official SDKs retry 409 and 5xx on their own; the gateway's `x-should-retry: false` stops them
where retrying cannot help, so a refused call reaches the gateway once."""

from __future__ import annotations

import openai
import pytest
from django.core.signals import request_started

from accounts.services import account_set_groups


@pytest.mark.django_db(transaction=True)
def test_the_openai_sdk_sends_a_group_override_conflict_once(
    live_server, carol, alpha_group, beta_group, gamma_group, gamma_model, token_for
):
    # From a subscription group no `<group_id>:<model>` override is possible: 409.
    account_set_groups(
        account=carol, allowed_groups=[alpha_group, beta_group, gamma_group], current_group=beta_group
    )
    received: list[str] = []

    def count(*, environ, **_) -> None:  # the live server runs in this process
        received.append(environ["PATH_INFO"])

    # The SDK's default retries (2), as callers leave them.
    sdk = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token_for(carol, ["models:invoke"]))
    assert sdk.max_retries == 2

    request_started.connect(count)
    try:
        with pytest.raises(openai.ConflictError) as caught:
            sdk.images.generate(model="3:gamma-image-1", prompt="a fox", size="1024x1024")
    finally:
        request_started.disconnect(count)

    assert caught.value.body["code"] == "GROUP_OVERRIDE_UNSUPPORTED"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert received == ["/v1/images/generations"]
