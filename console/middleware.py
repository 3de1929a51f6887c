"""The console's Content-Security-Policy: its pages load only their own script and styles.

Sent on every answer under the console's paths (`/console/`, and the sign-in and password pages under
`/accounts/`), unless the view set one itself. The pages have no inline script, style or event
handler; their images are `data:` URLs (the playground's results) and their script fetches only the
console's own URLs, so the policy allows nothing else (`GATEWAY_CONSOLE_CSP` in the settings).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

CONSOLE_PATH_PREFIXES = ("/console/", "/accounts/")


class ConsoleContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.path_info.startswith(CONSOLE_PATH_PREFIXES) and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = settings.GATEWAY_CONSOLE_CSP
        return response
