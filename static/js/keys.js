// Keys for people who keep a hand on the keyboard: j/k walk the waiting items and then the
// sessions, a/d press the focused item's Approve/Deny button, x selects waiting items so a/d
// answer them all (after one confirmation), r goes to the reason box, n to the next session
// waiting for a person, Enter opens its session, / goes to search, ? lists the keys. One keydown
// handler for the page.
//
// a and d press the button through form.requestSubmit(button): the same submit event a click
// makes (answers.js posts it; the server decides, as for a click), after the same confirmation
// the button asks for. Nothing happens while a person types in a field.

import { answerMany } from "./answers.js";

const WAITING = "[data-interaction]";
const TILE = "[data-tile-session]";
const ROW = "[data-sidebar-session]";
const TYPING = "textarea, select, [contenteditable]:not([contenteditable='false'])";
const NOT_TYPED = new Set(["checkbox", "radio", "button", "submit", "reset", "range", "color", "file", "image"]);

const help = document.querySelector("[data-keys-help]");
const confirmDialog = document.querySelector("[data-bulk-confirm]");
const selected = new Set(); // interaction ids selected with x, kept across live refreshes
let remembered = ""; // the last item moved to, found again if a live refresh replaced it
let rememberedAt = -1; // and where it was, for when it is gone (answered): j goes on from there
let returnTo = null; // where focus goes back to when the help closes

function typing(element) {
  if (element.closest(TYPING)) return true;
  return element instanceof HTMLInputElement && !NOT_TYPED.has(element.type);
}

function shown(element) {
  return element.getClientRects().length > 0;
}

// Page order: waiting items, then sessions (tiles where the page has them, else the sidebar).
function items() {
  const waiting = [...document.querySelectorAll(WAITING)];
  const tiles = [...document.querySelectorAll(TILE)].filter(shown);
  const sessions = tiles.length ? tiles : [...document.querySelectorAll(ROW)];
  return [...waiting, ...sessions].filter(shown);
}

function identity(item) {
  if (item.matches(WAITING)) return `waiting:${item.dataset.interaction}`;
  return `session:${item.dataset.tileSession ?? item.dataset.sidebarSession}`;
}

function current(list) {
  const active = document.activeElement;
  const holding = list.find((item) => item.contains(active));
  return holding ?? rememberedIn(list);
}

function rememberedIn(list) {
  return list.find((item) => identity(item) === remembered) ?? null;
}

function forget() {
  remembered = "";
  rememberedAt = -1;
}

// A sidebar row is reached through its link (its hovercard previews the card on focus); other
// items take the focus themselves.
function focusTarget(item) {
  if (item.matches(ROW)) return item.querySelector("a[href]") ?? item;
  if (!item.hasAttribute("tabindex")) item.tabIndex = -1;
  return item;
}

function moveTo(item, list) {
  for (const marked of document.querySelectorAll(".is-key-focus")) marked.classList.remove("is-key-focus");
  item.classList.add("is-key-focus");
  remembered = identity(item);
  rememberedAt = list.indexOf(item);
  focusTarget(item).focus({ preventScroll: true });
  item.scrollIntoView({ block: "nearest" });
}

// Stops at the ends rather than wrapping: at the last item, j stays there.
function step(by) {
  const list = items();
  if (!list.length) return;
  const last = list.length - 1;
  const at = list.indexOf(current(list));
  let next;
  if (at !== -1) next = at + by;
  else if (remembered && rememberedAt !== -1) next = by > 0 ? rememberedAt : rememberedAt - 1; // it went: its successor moved up
  else next = by > 0 ? 0 : last;
  moveTo(list[Math.min(last, Math.max(0, next))], list);
}

function press(item, key) {
  const button = item?.matches(WAITING) ? item.querySelector(`button[data-shortcut="${key}"]`) : null;
  if (!button || button.disabled || !button.form) return false;
  // The button's own confirmation, asked the way the button asks it (a click would ask too).
  if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return true;
  button.form.requestSubmit(button);
  return true;
}

// -- x: selecting waiting items, a/d: answering them together ------------------------------------

function selectable(item) {
  // Rows of the monitoring screen's list only: a session page answers its one question.
  return Boolean(item?.matches("[data-inbox-row]") && item.querySelector("[data-answer-form] button[name=decision]"));
}

function announce(text) {
  const announcer = document.querySelector("[data-live-announce]");
  if (announcer) announcer.textContent = text;
}

function promptOf(row) {
  return row.querySelector("[id$='-prompt']")?.textContent.replace(/\s+/g, " ").trim() || "this item";
}

// The selection is a real checkbox in the row: seen, clicked, and heard as "checked".
function checkbox(row) {
  let box = row.querySelector("[data-bulk-select]");
  if (box) return box;
  const label = document.createElement("label");
  label.className = "bulk-select";
  box = document.createElement("input");
  box.type = "checkbox";
  box.dataset.bulkSelect = "";
  const words = document.createElement("span");
  words.className = "visually-hidden";
  words.textContent = `Select to answer together: ${promptOf(row)}`;
  label.append(box, words);
  row.querySelector("[data-answer-form]").before(label);
  box.addEventListener("change", () => choose(row, box.checked));
  return box;
}

function choose(row, on) {
  const id = row.dataset.interaction;
  if (on) selected.add(id);
  else selected.delete(id);
  for (const one of document.querySelectorAll(`${WAITING}[data-interaction="${CSS.escape(id)}"]`)) {
    one.classList.toggle("is-selected", on);
    if (selectable(one)) checkbox(one).checked = on;
  }
  const count = selectedRows().length;
  const then = count ? ` ${count} selected: a approves, d denies them all.` : " Nothing selected.";
  announce(`${on ? "Selected" : "Unselected"}: ${promptOf(row)}.${then}`);
}

function selectedRows() {
  const rows = [];
  for (const id of selected) {
    const row = [...document.querySelectorAll(`${WAITING}[data-interaction="${CSS.escape(id)}"]`)].find(selectable);
    if (row) rows.push(row);
  }
  return rows;
}

// A live refresh replaced the rows: selected ones that still wait stay selected, the rest go.
function restoreSelection() {
  for (const id of [...selected]) {
    const rows = [...document.querySelectorAll(`${WAITING}[data-interaction="${CSS.escape(id)}"]`)].filter(selectable);
    if (!rows.length) selected.delete(id);
    for (const row of rows) {
      row.classList.add("is-selected");
      checkbox(row).checked = true;
    }
  }
}

// The row the keys were on was replaced too: its marker went with it, and if the focus fell
// to the page an x pressed now would select nothing. The same item's new row takes both back.
function restoreFocus() {
  if (!remembered) return;
  const list = items();
  const item = rememberedIn(list);
  if (!item) return;
  const active = document.activeElement;
  if (!active || active === document.body) moveTo(item, list);
  else if (item.contains(active)) item.classList.add("is-key-focus");
}

for (const name of ["onlooker:refetched", "onlooker:waiting-replaced"]) {
  document.addEventListener(name, () => {
    restoreSelection();
    restoreFocus();
  });
}
document.addEventListener("onlooker:answered", () => setTimeout(restoreSelection, 0));

function toggle(item) {
  if (!selectable(item)) return false;
  choose(item, !selected.has(item.dataset.interaction));
  return true;
}

function confirmMany(key) {
  const rows = selectedRows();
  if (!rows.length || !confirmDialog) return false;
  const decision = key === "a" ? "approve" : "deny";
  const verb = decision === "approve" ? "Approve" : "Deny";
  const things = rows.length === 1 ? "1 item" : `${rows.length} items`;
  confirmDialog.querySelector("[data-bulk-title]").textContent = `${verb} ${things}?`;
  const list = confirmDialog.querySelector("[data-bulk-list]");
  list.replaceChildren(
    ...rows.map((row) => {
      const entry = document.createElement("li");
      entry.textContent = promptOf(row);
      return entry;
    }),
  );
  const go = confirmDialog.querySelector("[data-bulk-go]");
  go.textContent = `${verb} ${rows.length}`;
  const back = document.activeElement;
  confirmDialog.returnValue = "";
  asked = { rows, decision, back };
  confirmDialog.showModal();
  go.focus(); // Enter confirms, Esc cancels
  return true;
}

// What the open confirmation asks: one at a time, so a close heard late (its event can come
// after the keys that opened the next) answers nothing twice and never the wrong question.
let asked = null;
confirmDialog?.addEventListener("close", () => {
  if (confirmDialog.open || !asked) return; // an earlier opening's close: this one is still open
  const { rows, decision, back } = asked;
  asked = null;
  if (back?.isConnected) back.focus({ preventScroll: true });
  if (confirmDialog.returnValue !== "confirm") return announce("Cancelled: nothing was sent.");
  for (const id of rows.map((row) => row.dataset.interaction)) selected.delete(id);
  answerMany(rows, decision, confirmDialog.dataset.answerMany);
});

// -- r and n ---------------------------------------------------------------------------------

function focusReason(item) {
  const holder = item?.querySelector("textarea[name=reason]") ? item : [...document.querySelectorAll(WAITING)].find((one) => shown(one) && one.querySelector("textarea[name=reason]"));
  const reason = holder?.querySelector("textarea[name=reason]");
  if (!reason) return false;
  const more = reason.closest("details");
  if (more) more.open = true;
  reason.focus();
  return true;
}

function nextWaitingSession() {
  const here = location.pathname.match(/^\/sessions\/(\d+)\//)?.[1];
  if (!here) return false;
  // Who has waited longest goes first, as in the monitoring screen's list: the other session
  // needing a person that changed least recently.
  const others = [...document.querySelectorAll(ROW)].filter(
    (row) => row.dataset.needsHuman === "true" && row.dataset.sidebarSession !== here,
  );
  others.sort((one, two) => Date.parse(one.dataset.updated) - Date.parse(two.dataset.updated));
  const link = others[0]?.querySelector("a[href]");
  if (link) link.click();
  else announce("Nothing else is waiting for a person.");
  return true;
}

function sessionLink(item) {
  // A row of the monitoring screen's list names its session; on a session page it is this one.
  if (item.matches(WAITING)) return item.querySelector("a[data-inbox-session]");
  return item.querySelector("a[href]");
}

function showHelp() {
  if (!help || help.open) return;
  returnTo = document.activeElement;
  help.showModal();
}

help?.addEventListener("close", () => {
  if (returnTo?.isConnected) returnTo.focus({ preventScroll: true });
  returnTo = null;
});

document.addEventListener("keydown", (event) => {
  if (event.defaultPrevented || event.ctrlKey || event.altKey || event.metaKey || event.isComposing) return;
  let target = event.target instanceof Element ? event.target : document.body;
  if (target.closest("dialog[open]")) return; // an open dialog has its own keys (Esc closes it)
  // A dialog just closed may keep the focus until its close event, which can come after the
  // next keys: they act as from the page, not on nothing.
  if (target.closest("dialog")) target = document.body;
  if (typing(target)) {
    if (event.key === "Escape") target.blur(); // out of the field, so the keys work again
    return;
  }
  const list = items();
  // On the page itself, the keys act on the item they were last on (its row may have been
  // replaced under the focus by a live refresh).
  const item = list.find((candidate) => candidate.contains(target)) ?? (target === document.body ? current(list) : null);
  // Letters without Shift (Caps Lock still counts); "?" and "/" as the layout types them.
  const key = event.key.length === 1 && !event.shiftKey ? event.key.toLowerCase() : event.key;
  let handled = true;
  if (key === "j") step(1);
  else if (key === "k") step(-1);
  else if (key === "x") handled = toggle(item);
  else if ((key === "a" || key === "d") && selected.size) handled = confirmMany(key) || press(item, key);
  else if (key === "a" || key === "d") handled = press(item, key);
  else if (key === "r") handled = focusReason(item);
  else if (key === "n") handled = nextWaitingSession();
  else if (key === "Enter" && item && target === focusTarget(item)) {
    const link = sessionLink(item);
    if (link) link.click();
    else handled = false;
  } else if (key === "/") {
    const search = document.querySelector("[data-search]");
    if (search) search.focus();
    else handled = false;
  } else if (key === "?") showHelp();
  else handled = false;
  if (handled) event.preventDefault();
});

// The marker follows the focus: it goes when a person tabs or clicks somewhere else.
document.addEventListener("focusin", (event) => {
  if (event.target.closest?.("dialog")) return; // the help opened over it: focus comes back
  const marked = document.querySelector(".is-key-focus");
  if (marked && !marked.contains(event.target)) {
    marked.classList.remove("is-key-focus");
    forget();
  }
});

// Clicking where nothing takes the focus leaves it on the page itself, with no focusin: forget
// the item then too. Not when its row went (a live refresh replaced it): restoreFocus takes
// the focus back to the item's new row.
document.addEventListener("focusout", (event) => {
  const left = event.target;
  setTimeout(() => {
    if (!left.isConnected || (document.activeElement && document.activeElement !== document.body)) return;
    const marked = left.closest?.(".is-key-focus");
    if (!marked) return;
    marked.classList.remove("is-key-focus");
    forget();
  });
});
