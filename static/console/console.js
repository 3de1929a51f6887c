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
