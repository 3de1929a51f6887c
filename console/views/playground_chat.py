"""The chat playground: try one of the account's text models as a chat completion, billed like an
API call (chat.pipeline). The page's script streams the answer; without it the answer has a page of
its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect

from api.answers import event_stream_response
from api.errors import api_error_for
from billing.money import money_display
from chat.families import CHAT
from chat.pipeline import text_call_answer, text_call_run
from chat.streaming import StreamedTextCall
from console import queries
from console.forms import ChatPlaygroundForm
from console.views.base import ConsoleView
from console.views.playground import answer_error, console_credential, form_errors, plain_error
from core.errors import ApiError, DomainError

CHAT_RESULT_SESSION = "console.chat_result"
CHAT_KEY_PREFIX = "console-chat:"


class ChatPlaygroundView(ConsoleView):
    """Try a text model: the prompt goes through chat.pipeline.text_call_run as a chat completion with
    the console's credential, billed like an API call. The page's script streams the answer through
    ChatPlaygroundStreamView; without it the form posts here and the answer has a page of its own."""

    section = "chat"

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._page(form=self._form())

    def post(self, request: HttpRequest) -> HttpResponse:
        form = self._form(data=request.POST)
        if not form.is_valid():
            return self._page(form=form, status=400)
        text_model = form.text_model()
        request_id = request.request_id
        token = form.cleaned_data["form_token"]
        idempotency_key = f"{CHAT_KEY_PREFIX}{token}" if token else None
        try:
            answer = text_call_answer(
                credential=console_credential(account=self.account, group=text_model.group),
                family=CHAT,
                raw=form.request_body(stream=False),
                headers={},
                request_id=request_id,
                idempotency_key=idempotency_key,
            )
        except (ApiError, DomainError) as refused:
            error = api_error_for(refused)
            return self._page(
                form=form,
                error=plain_error(error, provider="text provider"),
                request_id=request_id,
                status=error.status,
            )
        if idempotency_key and answer.replayed:
            request_id = (
                queries.idempotency_reference_for_key(account=self.account, key=idempotency_key) or request_id
            )
        if not answer.ok:
            return self._page(
                form=form, error=answer_error(answer), request_id=request_id, status=answer.status
            )
        request.session[CHAT_RESULT_SESSION] = {
            "request_id": request_id,
            "model": text_model.key,
            "model_id": text_model.model_id,
            "prompt": form.cleaned_data["prompt"],
            "answer": chat_answer_text(answer.body),
        }
        return redirect("console:chat-result", request_id=request_id)

    def _form(self, data=None, initial=None) -> ChatPlaygroundForm:
        return ChatPlaygroundForm(
            data,
            initial=initial,
            text_models=queries.playground_text_models_for_account(account=self.account),
        )

    def _page(self, *, form: ChatPlaygroundForm, status: int = 200, **extra: Any) -> HttpResponse:
        return self.render("console/chat_playground.html", {"form": form, **extra}, status=status)


class ChatPlaygroundResultView(ChatPlaygroundView):
    """The session's latest chat answer (without the script), with its tokens and cost."""

    def get(self, request: HttpRequest, request_id: str) -> HttpResponse:
        result = request.session.get(CHAT_RESULT_SESSION)
        if not result or result.get("request_id") != request_id:
            return self._page(form=self._form(), gone=True, request_id=request_id, status=404)
        usage = queries.usage_record_for_request(account=self.account, request_id=request_id)
        return self._page(
            form=self._form(initial={"model": result["model"], "prompt": result["prompt"]}),
            answer=result["answer"],
            result_model_id=result["model_id"],
            usage=usage,
            usage_amount=money_display(usage.amount) if usage is not None else "",
            request_id=request_id,
        )

    def post(self, request: HttpRequest, request_id: str) -> HttpResponse:
        return redirect("console:chat")


class ChatPlaygroundStreamView(ChatPlaygroundView):
    """The chat answer as the gateway's own event stream (text/event-stream), for the page's script.
    A stream cannot be replayed, so it takes no idempotency key: the script sends it once."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return redirect("console:chat")

    def post(self, request: HttpRequest) -> HttpResponse:
        form = self._form(data=request.POST)
        if not form.is_valid():
            return JsonResponse({"error": {"message": form_errors(form)}}, status=400)
        text_model = form.text_model()
        try:
            answer = text_call_run(
                credential=console_credential(account=self.account, group=text_model.group),
                family=CHAT,
                raw=form.request_body(stream=True),
                headers={},
                request_id=request.request_id,
            )
        except (ApiError, DomainError) as refused:
            error = api_error_for(refused)
            plain = plain_error(error, provider="text provider")
            return JsonResponse(
                {"error": {"headline": plain.headline, "message": plain.detail}}, status=error.status
            )
        if isinstance(answer, StreamedTextCall):
            return event_stream_response(answer.events)
        return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)


class ChatPlaygroundUsageView(ConsoleView):
    """Tokens and cost of one of the account's calls, for the script to show after a streamed answer."""

    def get(self, request: HttpRequest, request_id: str) -> HttpResponse:
        usage = queries.usage_record_for_request(account=self.account, request_id=request_id)
        if usage is None:
            raise Http404("No such call.")
        return JsonResponse(
            {
                "request_id": request_id,
                "status": usage.status,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "billing": usage.billing,
                "amount": money_display(usage.amount),
            }
        )


def chat_answer_text(body: Mapping[str, Any]) -> str:
    """The text of a chat completion's first choice."""
    try:
        return body["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        return ""
