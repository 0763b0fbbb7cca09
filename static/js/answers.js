// Answer forms and the other actions (composer, cancel): post with fetch (CSRF token from the
// form), show the server's verdict in words, and keep the buttons until the server says it is
// done. Whether someone may act is decided by the server on every post; this only makes the
// forms pleasant. Text from the server is inserted as text.
//
// The a/d keys (keys.js) submit these forms through the same submit event as a click.

function post(form, data) {
  return fetch(form.action, {
    method: "POST",
    body: data,
    credentials: "same-origin",
    headers: { Accept: "application/json", "X-CSRFToken": data.get("csrfmiddlewaretoken") },
  });
}

async function verdict(response) {
  return response.json().catch(() => ({ detail: `Onlooker answered HTTP ${response.status}.` }));
}

// Where a refusal is said: the form's error line (made if a form lacks one), so a 409 ("Approve
// was sent at 10:02 by alice; … Retry sending Approve") is always read, never swallowed.
function errorLine(form) {
  let line = form.querySelector("[data-answer-error]");
  if (!line) {
    line = document.createElement("p");
    line.className = "answer-error";
    line.setAttribute("role", "alert");
    line.dataset.answerError = "";
    form.append(line);
  }
  return line;
}

// "Sending…" while the answer is on its way: the buttons are off and the line says so.
function sending(form, on) {
  const line = form.querySelector("[data-answer-sending]");
  if (line) line.hidden = !on;
  const row = form.closest("[data-inbox-row]");
  if (!row) return;
  if (on) row.dataset.sending = "";
  else delete row.dataset.sending;
}

// The monitoring screen's list: a confirmed answer takes its row away (wherever a refresh
// put it), says so politely, and lets the counts and the list follow (live.js).
function leaveList(row, detail) {
  const title = row.querySelector("[data-inbox-session]")?.textContent.trim();
  const selector = `[data-inbox-row][data-interaction="${CSS.escape(row.dataset.interaction)}"]`;
  const rows = [...document.querySelectorAll(selector)];
  const hadFocus = rows.some((one) => one.contains(document.activeElement));
  const next = rows.at(-1)?.nextElementSibling || rows[0]?.previousElementSibling;
  for (const one of rows) one.remove();
  // A keyboard user answering down the list goes on with the next question.
  if (hadFocus) next?.focus({ preventScroll: true });
  const announcer = document.querySelector("[data-live-announce]");
  if (announcer) announcer.textContent = title ? `${title}: ${detail}` : detail;
}

function answered() {
  document.dispatchEvent(new CustomEvent("onlooker:answered"));
}

async function submit(form, submitter) {
  const data = new FormData(form, submitter);
  const error = errorLine(form);
  const row = form.closest("[data-inbox-row]");
  const buttons = form.querySelectorAll("button");
  for (const button of buttons) button.disabled = true;
  error.hidden = true;
  sending(form, true);
  try {
    const response = await post(form, data);
    const answer = await verdict(response);
    sending(form, false);
    if (response.ok) {
      if (row) {
        leaveList(row, answer.detail);
        answered();
        return;
      }
      const done = document.createElement("p");
      done.className = "interaction-state";
      done.setAttribute("role", "status");
      done.textContent = answer.detail;
      // A confirmed retry: the "not confirmed yet" line above it no longer holds.
      form.closest("[data-interaction]")?.querySelector("[data-unconfirmed]")?.remove();
      form.replaceWith(done);
      return;
    }
    error.hidden = false;
    error.textContent = answer.detail || `Onlooker answered HTTP ${response.status}.`;
    // Someone else answered, or the agent did not confirm: the list shows what holds now
    // (for an unconfirmed answer, its retry).
    if (row && (response.status === 409 || response.status === 502)) answered();
    if (response.status === 409 || response.status === 403) return; // buttons stay off
  } catch {
    sending(form, false);
    // The post may have arrived and gone on to the agent: say so, never "nothing was sent".
    // Pressing the same button again is safe (the same message); the page shows what happened.
    error.hidden = false;
    error.textContent = "Onlooker's reply did not arrive; the answer may have gone out. Try again.";
  }
  for (const button of buttons) button.disabled = false;
}

// Composer and cancel: the form stays; its status line says what happened.
async function act(form, submitter) {
  const status = form.querySelector("[data-action-status]");
  const buttons = form.querySelectorAll("button");
  for (const button of buttons) button.disabled = true;
  if (status) status.textContent = "Sending…";
  try {
    const response = await post(form, new FormData(form, submitter));
    const answer = await verdict(response);
    if (status) status.textContent = answer.detail || "";
    if (response.ok) {
      for (const text of form.querySelectorAll("textarea")) text.value = ""; // text and links
      const id = form.querySelector("[data-message-id]");
      if (id) id.value = crypto.randomUUID().replaceAll("-", ""); // the next message is another
    }
  } catch {
    if (status) status.textContent = "Onlooker could not be reached; nothing was sent. Try again.";
  }
  for (const button of buttons) button.disabled = false;
}

document.addEventListener("submit", (event) => {
  const answerForm = event.target.closest?.("[data-answer-form]");
  const actionForm = event.target.closest?.("[data-action-form]");
  if (!answerForm && !actionForm) return;
  event.preventDefault();
  if (answerForm) submit(answerForm, event.submitter);
  else act(actionForm, event.submitter);
});
