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
});
