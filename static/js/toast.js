// The toast after an answer made on the page (single or several): what was sent ("Approved:
// Delete 3 old builds?") and, while the server holds the decision (answering/held.py), an Undo
// button. The server decides: Undo after the send is refused with a 409 and its words, shown
// here. One toast at a time; a newer answer's replaces it. Text from the server goes in as text.
//
// The region (role=status, polite) exists from the page's load, so what is put in it later is
// announced; it takes no focus.

const SHOWN_AFTER_SECONDS = 6; // how long the last words stay once there is nothing to undo

function region() {
  let box = document.querySelector("[data-toasts]");
  if (!box) {
    box = document.createElement("div");
    box.className = "toasts";
    box.dataset.toasts = "";
    document.body.append(box);
  }
  return box;
}

const box = region();
const line = document.createElement("div");
line.className = "toast";
line.setAttribute("role", "status");
line.dataset.toast = "";
line.hidden = true;
box.append(line);

let timers = [];

function clear() {
  for (const timer of timers) clearTimeout(timer);
  timers = [];
}

function say(text, buttons = []) {
  const words = document.createElement("span");
  words.className = "toast-text";
  words.textContent = text;
  line.replaceChildren(words, ...buttons);
  line.hidden = false;
}

function later(seconds, then) {
  timers.push(setTimeout(then, seconds * 1000));
}

function fadeAfter(seconds) {
  later(seconds, () => {
    // Not while someone is on its button: it goes when they leave it.
    if (line.contains(document.activeElement)) return fadeAfter(1);
    line.hidden = true;
    line.replaceChildren();
  });
}

async function undoAll(urls, token) {
  const replies = await Promise.all(
    urls.map((url) =>
      fetch(url, {
        method: "POST",
        credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": token },
      })
        .then(async (response) => ({ ok: response.ok, ...(await response.json().catch(() => ({}))) }))
        .catch(() => ({ ok: false, detail: "Onlooker could not be reached: it may have been sent." })),
    ),
  );
  return replies;
}

// `held`: [{undo, seconds}] for each decision still held (none: nothing to undo). `token`: the
// CSRF token of the form that answered. `undone`: called after an Undo the server took.
export function toast(text, { held = [], token = "", undone = () => {} } = {}) {
  clear();
  const waiting = held.filter((one) => one.undo);
  if (!waiting.length) {
    say(text);
    fadeAfter(SHOWN_AFTER_SECONDS);
    return;
  }
  const button = document.createElement("button");
  button.type = "button";
  button.className = "toast-undo";
  button.dataset.toastUndo = "";
  button.textContent = "Undo";
  button.addEventListener("click", async () => {
    button.disabled = true;
    const replies = await undoAll(waiting.map((one) => one.undo), token);
    clear();
    const refused = replies.filter((reply) => !reply.ok);
    if (!refused.length) say(replies.length === 1 ? replies[0].detail : `Undone, nothing was sent: ${text}`);
    else say(refused.map((reply) => reply.detail).join(" "));
    if (refused.length < replies.length) undone();
    fadeAfter(SHOWN_AFTER_SECONDS);
  });
  say(text, [button]);
  // Undo goes when the server sends: the longest hold among them. What the agent made of it
  // the page shows (the list, the session); the toast only stops offering Undo.
  const seconds = Math.max(...waiting.map((one) => one.seconds || 0));
  later(seconds, () => {
    if (button.isConnected && !button.disabled) {
      say(text);
      fadeAfter(SHOWN_AFTER_SECONDS);
    }
  });
}
