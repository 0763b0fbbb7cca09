// "New session"'s examples (templates/tasks/_session_examples.html): the chosen agent's
// example messages, and a click puts one in the message field, ready to edit or send.

function show(form) {
  const agent = form.querySelector("select[name=agent]")?.value;
  for (const group of form.querySelectorAll("[data-session-examples]")) {
    group.hidden = group.dataset.sessionExamples !== agent;
  }
}

for (const form of document.querySelectorAll("form:has([data-session-examples])")) {
  show(form);
  form.querySelector("select[name=agent]")?.addEventListener("change", () => show(form));
  form.addEventListener("click", (event) => {
    const button = event.target.closest("[data-session-example]");
    const field = form.querySelector("textarea[name=text]");
    if (!button || !field) return;
    field.value = button.dataset.sessionExample;
    field.focus();
    field.dispatchEvent(new Event("input", { bubbles: true }));
  });
}
