// The console's progressive enhancement: a copy button for a new key, and a progress state while a
// playground call runs. Every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("button[data-copy-target]")) {
    const field = document.getElementById(button.dataset.copyTarget);
    const status = button.closest("section")?.querySelector(".copy-status");
    button.hidden = false;
    button.addEventListener("click", async () => {
      field.select();
      try {
        await navigator.clipboard.writeText(field.value);
        if (status) status.textContent = "Copied to the clipboard.";
      } catch {
        if (status) status.textContent = "Press Ctrl+C (⌘C) to copy the selected key.";
      }
    });
  }
  document.querySelector("[data-autofocus]")?.focus();
  for (const form of document.querySelectorAll("form[data-progress]")) {
    form.addEventListener("submit", () => {
      const progress = document.getElementById(form.dataset.progress);
      if (progress) progress.hidden = false;
      for (const button of form.querySelectorAll("button[type=submit]")) button.disabled = true;
      document.getElementById("playground-result")?.setAttribute("aria-busy", "true");
    });
  }
  playgroundModelChoices();
  chatStreaming();
});

// The playground's choices follow the selected model: its sizes, qualities, formats and largest n,
// from the JSON the page embeds. Without the script, "Choose model" asks the server for them.
function playgroundModelChoices() {
  const data = document.getElementById("playground-models");
  const select = document.getElementById("id_model");
  if (!data || !select) return;
  const models = JSON.parse(data.textContent);
  document.querySelector("[data-choose-model]")?.setAttribute("hidden", "");
  const apply = () => {
    const model = models[select.value];
    if (!model) return;
    for (const wrapper of document.querySelectorAll("[data-choice]")) {
      const field = wrapper.querySelector("select");
      const values = model[wrapper.dataset.choice] || [];
      const current = field.value;
      for (const option of [...field.options]) if (option.value !== "") option.remove();
      for (const value of values) field.add(new Option(value, value, false, value === current));
      if (!values.includes(current)) field.value = "";
      wrapper.hidden = values.length === 0;
    }
    const n = document.getElementById("id_n");
    if (n) {
      n.max = String(model.max_n);
      if (Number(n.value) > model.max_n) n.value = String(model.max_n);
    }
  };
  select.addEventListener("change", apply);
}

// The chat playground streams its answer: the form is sent to the console's stream endpoint and the
// answer's text is shown as its events arrive, then its tokens and cost. Without the script the
// form posts and the answer comes on a page of its own.
function chatStreaming() {
  const form = document.getElementById("chat-form");
  if (!form || !window.fetch || !window.TextDecoder) return;
  const answer = document.getElementById("chat-answer");
  const charge = document.getElementById("chat-charge");
  const error = document.getElementById("chat-error");
  const progress = document.getElementById("chat-progress");
  const button = form.querySelector("button[type=submit]");
  const showError = (headline, message) => {
    error.replaceChildren();
    for (const [text, strong] of [[headline, true], [message, false]]) {
      if (!text) continue;
      const p = document.createElement("p");
      if (strong) p.append(Object.assign(document.createElement("strong"), { textContent: text }));
      else p.textContent = text;
      error.append(p);
    }
    error.hidden = false;
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    answer.textContent = "";
    charge.textContent = "";
    error.hidden = true;
    document.getElementById("chat-placeholder")?.remove();
    progress.hidden = false;
    button.disabled = true;
    document.getElementById("chat-result").setAttribute("aria-busy", "true");
    try {
      const response = await fetch(form.dataset.streamUrl, {
        method: "POST", body: new FormData(form), credentials: "same-origin",
      });
      const requestId = response.headers.get("X-Request-Id");
      if (!response.ok || !(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
        const body = await response.json().catch(() => ({}));
        showError(body.error?.headline || "The gateway could not accept this request.", body.error?.message || "");
        return;
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          for (const line of block.split("\n")) {
            if (!line.startsWith("data:")) continue;
            const data = line.slice(5).trim();
            if (data === "[DONE]") continue;
            try {
              const chunk = JSON.parse(data);
              if (chunk.error) showError("The answer stopped early.", chunk.error.message || "");
              for (const choice of chunk.choices || []) answer.textContent += choice.delta?.content || "";
            } catch { /* not JSON: ignore */ }
          }
        }
      }
      if (requestId) {
        const usage = await (await fetch(form.dataset.usageUrl.replace("REQUEST_ID", requestId))).json();
        const cost = usage.billing === "subscription" ? "counted against your subscription" : `charged ${usage.amount}`;
        charge.textContent = `${usage.input_tokens ?? 0} tokens in · ${usage.output_tokens ?? 0} out; ${cost}. Request id ${requestId}.`;
      }
    } catch (failure) {
      showError("The answer could not be received.", String(failure));
    } finally {
      progress.hidden = true;
      button.disabled = false;
      document.getElementById("chat-result").removeAttribute("aria-busy");
      // A new token: the next send is a new call.
    }
  });
}
