"""The `openai-compatible` kind: a server that speaks only OpenAI's Chat Completions API (DeepSeek,
vLLM, Ollama, OpenRouter, Groq and many more). It is OpenAI's adapter limited to chat completions;
a server that takes no key (a local vLLM or Ollama) is configured without `api_key_env`, and is then
sent no Authorization header. Callers of `/v1/responses` and `/v1/messages` reach it through the
gateway's translators (chat/translation.py)."""

from __future__ import annotations

from upstreams.providers.base import CHAT_COMPLETIONS, USER_AGENT
from upstreams.providers.openai import OpenAIAdapter


class OpenAICompatibleAdapter(OpenAIAdapter):
    kind = "openai-compatible"
    operations = frozenset({CHAT_COMPLETIONS})

    def _headers(self) -> dict[str, str]:
        if not self.upstream.api_key_env:
            return {"Accept": "application/json", "User-Agent": USER_AGENT}
        return super()._headers()
