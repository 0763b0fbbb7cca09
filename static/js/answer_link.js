// The answer link's confirm page (templates/tasks/answer_link.html): its form posts once.
// A second press while the first post is on its way would be refused ("being answered by
// you right now") and that refusal would replace the page that says the decision was made,
// so later presses are ignored and the form says "Sending…". The buttons are marked, not
// disabled, in the submit event: a disabled button would be left out of what the form sends.

function reset(form) {
  delete form.dataset.sending;
  form.removeAttribute("aria-busy");
  for (const button of form.querySelectorAll("button")) button.removeAttribute("aria-disabled");
  const line = form.querySelector("[data-answer-link-sending]");
  if (line) line.hidden = true;
}

for (const form of document.querySelectorAll("[data-answer-link-form]")) {
  form.addEventListener("submit", (event) => {
    if (form.dataset.sending !== undefined) {
      event.preventDefault();
      return;
    }
    form.dataset.sending = "";
    form.setAttribute("aria-busy", "true");
    for (const button of form.querySelectorAll("button")) button.setAttribute("aria-disabled", "true");
    const line = form.querySelector("[data-answer-link-sending]");
    if (line) line.hidden = false;
  });
  // Back to a page the browser kept: it may be used again.
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) reset(form);
  });
}
