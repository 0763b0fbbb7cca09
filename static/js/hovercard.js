// Sidebar hovercard: hovering a row (a real hover pointer) or focusing its link for ~350 ms
// shows that session's card in a dialog beside the row. It loads the card first and shows
// nothing for a session without one; it follows live messages while open; Escape closes it
// and returns focus to the row. Never for the session the page itself shows: its card is
// already live on the page, and one view shows one live copy of a card.
import { fragment } from "./fragments.js";

const OPEN_DELAY_MS = 350;
const CLOSE_DELAY_MS = 120;
const GAP_PX = 10;
const MARGIN_PX = 12;

const list = document.querySelector("[data-sidebar-list]");
const pageSession = document.body.dataset.liveSession || null; // the session page's own
const canHover = window.matchMedia("(hover: hover)");

let openTimer = null;
let closeTimer = null;
let card = null; // the open dialog
let openFor = null; // the session id it shows
let revision = -1;
let request = 0; // ignores a slow fetch for a row the pointer already left
let dismissed = null; // the row Escape closed: focus returning to it must not reopen it

function rowOf(target) {
  return target instanceof Element ? target.closest("[data-sidebar-session]") : null;
}

function linkOf(id) {
  return list?.querySelector(`[data-sidebar-session="${id}"] a`) || null;
}

function schedule(row) {
  clearTimeout(closeTimer);
  clearTimeout(openTimer);
  const id = row.dataset.sidebarSession;
  if (id === openFor || id === dismissed || id === pageSession) return;
  openTimer = setTimeout(() => open(row.dataset.sidebarSession), OPEN_DELAY_MS);
}

function scheduleClose() {
  clearTimeout(openTimer);
  clearTimeout(closeTimer);
  closeTimer = setTimeout(close, CLOSE_DELAY_MS);
}

async function load(id) {
  try {
    const response = await fetch(`/sessions/${encodeURIComponent(id)}/card/`, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    return response.ok ? await response.json() : null;
  } catch {
    return null;
  }
}

async function open(id) {
  const row = list?.querySelector(`[data-sidebar-session="${id}"]`);
  if (!row || row.dataset.hasCard !== "true" || id === pageSession) return;
  const mine = ++request;
  const snapshot = await load(id);
  if (mine !== request || !snapshot?.hasCard) return;
  close();
  const dialog = document.createElement("div");
  dialog.className = "hovercard";
  dialog.id = "hovercard";
  dialog.setAttribute("role", "dialog");
  dialog.setAttribute("data-hovercard", "");
  dialog.setAttribute("aria-label", `Progress of ${snapshot.title}`); // an attribute: text only
  dialog.addEventListener("pointerenter", () => clearTimeout(closeTimer));
  dialog.addEventListener("pointerleave", scheduleClose);
  document.body.append(dialog);
  card = dialog;
  openFor = id;
  revision = -1;
  show(snapshot);
  const link = linkOf(id);
  link?.setAttribute("aria-expanded", "true");
  link?.setAttribute("aria-controls", dialog.id);
}

function show(snapshot) {
  if (!card || snapshot.revision < revision) return;
  const content = fragment(snapshot.html.card);
  if (!content) return;
  revision = snapshot.revision;
  card.replaceChildren(content);
  position();
}

function position() {
  const row = list?.querySelector(`[data-sidebar-session="${openFor}"]`);
  if (!card || !row) return;
  const anchor = row.getBoundingClientRect();
  const box = card.getBoundingClientRect();
  let left = anchor.right + GAP_PX;
  if (left + box.width > window.innerWidth - MARGIN_PX) left = anchor.left - GAP_PX - box.width;
  left = Math.max(MARGIN_PX, Math.min(left, window.innerWidth - MARGIN_PX - box.width));
  const top = Math.max(MARGIN_PX, Math.min(anchor.top, window.innerHeight - MARGIN_PX - box.height));
  card.style.left = `${left + window.scrollX}px`;
  card.style.top = `${top + window.scrollY}px`;
}

function close() {
  clearTimeout(closeTimer);
  if (!card) return;
  const link = linkOf(openFor);
  link?.setAttribute("aria-expanded", "false");
  link?.removeAttribute("aria-controls");
  card.remove();
  card = null;
  openFor = null;
}

if (list) {
  list.addEventListener("pointerover", (event) => {
    if (event.pointerType === "touch" || !canHover.matches) return;
    const row = rowOf(event.target);
    if (row) schedule(row);
  });
  list.addEventListener("pointerout", (event) => {
    const row = rowOf(event.target);
    if (row && !row.contains(event.relatedTarget)) {
      dismissed = null;
      scheduleClose();
    }
  });
  list.addEventListener("focusin", (event) => {
    const row = rowOf(event.target);
    if (row) schedule(row);
  });
  list.addEventListener("focusout", (event) => {
    if (rowOf(event.relatedTarget)?.dataset.sidebarSession !== dismissed) dismissed = null;
    if (!card?.contains(event.relatedTarget)) scheduleClose();
  });
}

document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || !card) return;
  const id = openFor;
  clearTimeout(openTimer);
  close();
  request++;
  dismissed = id; // back to the row, without reopening the card that was just dismissed
  linkOf(id)?.focus();
});

// The page's own row opens no dialog: say so to assistive technology (rows are re-rendered
// by live messages, so again after each).
function unmarkOwnRow() {
  if (pageSession) linkOf(pageSession)?.removeAttribute("aria-haspopup");
}
unmarkOwnRow();

document.addEventListener("onlooker:changed", async (event) => {
  unmarkOwnRow();
  const message = event.detail;
  if (!card || String(message.session) !== openFor) return;
  if (!message.hasCard) {
    close();
    return;
  }
  // The row was just re-rendered: tell assistive technology again that its card is open.
  linkOf(openFor)?.setAttribute("aria-expanded", "true");
  linkOf(openFor)?.setAttribute("aria-controls", card.id);
  if (message.html?.card) {
    show(message);
    return;
  }
  // Live messages carry only what the page itself shows: fetch the card the dialog shows,
  // unless it already shows this revision or a newer one (a repeated or late message).
  if (message.revision <= revision) return;
  const id = openFor;
  const snapshot = await load(id);
  if (snapshot?.hasCard && id === openFor) show(snapshot);
});

// The page refetched after a reconnect: what the open card shows may have changed unheard.
document.addEventListener("onlooker:refetched", async () => {
  unmarkOwnRow();
  if (!card) return;
  const id = openFor;
  const snapshot = await load(id);
  if (snapshot && id === openFor) {
    if (snapshot.hasCard) show(snapshot);
    else close();
  }
});

window.addEventListener("resize", position);
window.addEventListener("scroll", position, { passive: true });
