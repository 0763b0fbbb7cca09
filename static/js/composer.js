// The composer answers the task that waits for input, when there is one (the A2A lifecycle:
// same task, same context). The session's activity, refetched live, names that task in
// data-composer-reply-to; this keeps the form's reply_to and the button's words in step with
// it. The server checks reply_to against the session on every post: this only keeps the page
// honest about what a click will do.

function follow() {
  const form = document.querySelector("form.composer");
  const marker = document.querySelector("[data-composer-reply-to]");
  if (!form || !marker) return;
  const taskId = marker.dataset.composerReplyTo || "";
  const field = form.querySelector("[data-reply-to]");
  const button = form.querySelector("[data-composer-send]");
  if (field) field.value = taskId;
  if (button) button.textContent = taskId ? button.dataset.replyLabel : button.dataset.sendLabel;
}

document.addEventListener("onlooker:activity", follow); // activity.js put a refetch in
follow();

// The monitoring screen's "New session" (a <details>, which works without this): opening it
// puts the cursor in its first message; Escape closes it and gives the focus back to its
// button, as a menu would.
const newSession = document.querySelector("[data-new-session]");
newSession?.addEventListener("toggle", () => {
  if (newSession.open) newSession.querySelector("textarea")?.focus();
});
newSession?.addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || !newSession.open) return;
  event.stopPropagation(); // keys.js would only take the cursor out of the field
  newSession.open = false;
  newSession.querySelector("summary")?.focus();
});
