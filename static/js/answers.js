// Answer forms and the other actions (composer, cancel): post with fetch (CSRF token from the
// form), show the server's verdict in words, and keep the buttons until the server says it is
// done. Whether someone may act is decided by the server on every post; this only makes the
// forms pleasant. Text from the server is inserted as text.
//
// The a/d keys (keys.js) submit these forms through the same submit event as a click; with
// rows selected (x), they answer them all through `answerMany`. After an answer a toast says
// what was sent, with Undo while the server holds it (toast.js, answering/held.py).

import { toast } from "./toast.js";

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

function token(form) {
  return form?.querySelector("[name=csrfmiddlewaretoken]")?.value ?? "";
}

// Undo took: the list and the page show the question open again.
function undone() {
  answered();
  document.dispatchEvent(new CustomEvent("onlooker:undone"));
}

function told(form, answer) {
  const held = answer.undo ? [{ undo: answer.undo, seconds: answer.seconds }] : [];
  toast(answer.toast || answer.detail, { held, token: token(form), undone });
}

// Several rows answered as one (keys.js, after its confirmation): each through the server's one
// answer function; the toast says what went and which were not answered, and why.
export async function answerMany(rows, decision, url) {
  const form = rows[0]?.querySelector("[data-answer-form]") ?? document.querySelector("[data-answer-form]");
  const data = new FormData();
  data.append("csrfmiddlewaretoken", token(form));
  data.append("decision", decision);
  for (const row of rows) data.append("interaction", row.dataset.interaction);
  let reply;
  try {
    const response = await fetch(url, {
      method: "POST",
      body: data,
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRFToken": token(form) },
    });
    reply = await verdict(response);
  } catch {
    toast("Onlooker's reply did not arrive; some answers may have gone out. Reload to see.");
    return;
  }
  const results = reply.results ?? [];
  const done = results.filter((one) => one.ok);
  const failed = results.filter((one) => !one.ok);
  for (const one of done) {
    const row = rows.find((candidate) => candidate.dataset.interaction === String(one.id));
    if (row?.isConnected) leaveList(row, one.detail);
  }
  const verb = decision === "approve" ? "Approved" : "Denied";
  let text = done.length === 1 ? done[0].toast : `${verb} ${done.length}: ${done.map((one) => one.toast.replace(/^[^:]*: /, "")).join("; ")}`;
  if (!results.length) text = reply.detail || "Nothing was answered.";
  else if (failed.length) {
    const names = failed.map((one) => `${prompt(rows, one.id)} (${one.detail})`).join("; ");
    text = `${done.length ? `${text}. ` : ""}Not answered: ${names}`;
  }
  const held = done.filter((one) => one.undo).map((one) => ({ undo: one.undo, seconds: one.seconds }));
  toast(text, { held, token: token(form), undone });
  answered();
}

function prompt(rows, id) {
  const row = rows.find((candidate) => candidate.dataset.interaction === String(id));
  const words = row?.querySelector("[id$='-prompt']")?.textContent.trim();
  return words || `#${id}`;
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
      told(form, answer);
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

// A held answer listed on the page: "Sending in 4 s…", counted down from the server's time.
function countDown() {
  for (const line of document.querySelectorAll("[data-held-until]")) {
    const left = Math.ceil((Date.parse(line.dataset.heldUntil) - Date.now()) / 1000);
    const words = line.querySelector("[data-held-left]");
    if (words) words.textContent = left > 0 ? `Sending in ${left} s…` : "Sending…";
  }
}
countDown();
setInterval(countDown, 1000);
