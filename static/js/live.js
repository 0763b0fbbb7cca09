// Keeps a page live: one socket to /ws/live/, fragments swapped by revision, and an HTTP
// refetch on every (re)connect and whenever the tab becomes visible again, so a message lost
// while away costs nothing. Fragments are server-rendered, sanitized HTML (the same partials
// as the page); nothing a user typed is ever inserted here other than inside them.
import { loadActivity, refreshActivity } from "./activity.js";
import { elements, fragment, keepWhatThePersonWasDoing } from "./fragments.js";
import { tickTimes } from "./times.js";

const body = document.body;
const boardUrl = body.dataset.boardUrl;
const sessionId = body.dataset.liveSession || "";
const overview = "liveOverview" in body.dataset;
const filters = {
  agent: body.dataset.filterAgent || "",
  state: body.dataset.filterState || "",
  finished: body.dataset.filterFinished || "",
  from: body.dataset.filterFrom || "",
  to: body.dataset.filterTo || "",
};
// The date range as instants and the finished states, as the server reads the filters.
const updatedFrom = Date.parse(body.dataset.filterUpdatedFrom || "") || null;
const updatedBefore = Date.parse(body.dataset.filterUpdatedBefore || "") || null;
const finishedStates = new Set((body.dataset.finishedStates || "").split(" ").filter(Boolean));

const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 30_000;
const PING_EVERY_MS = 25_000; // a wall screen must notice a half-open socket on its own
const PONG_WITHIN_MS = 10_000;
const ACCESS_CHANGED_CALM_MS = 5_000;
const TOO_MANY_ATTEMPT = 6; // a backoff at its longest (RETRY_MAX_MS)
const SIDEBAR_LIMIT = 100;

const status = document.querySelector("[data-live-status]");
const announcer = document.querySelector("[data-live-announce]");
const sidebarList = document.querySelector("[data-sidebar-list]");
const tiles = document.querySelector("[data-tiles]");
// The monitoring screen lists sessions that need a person above the tiles, not as tiles.
const tilesWithoutWaiting = Boolean(tiles && "tilesWithoutWaiting" in tiles.dataset);
// And its finished sessions as one-line rows under them (the same tile fragment, shown as a
// row by the CSS); the wall has no such list: there they stay tiles.
const finishedRows = document.querySelector("[data-finished-rows]");

// What the page shows of each session: {revision, updated, state, needsHuman}. A message or
// refetch older than this is dropped.
const shown = new Map();

function version(element) {
  return {
    revision: Number(element.dataset.revision || 0),
    updated: Date.parse(element.dataset.updated || "") || 0,
  };
}

function isOlder(candidate, current) {
  if (!current) return false;
  if (candidate.revision !== current.revision) return candidate.revision < current.revision;
  return candidate.updated < current.updated;
}

function remember(id, element) {
  const known = shown.get(id);
  const seen = { ...version(element), state: element.dataset.state, needsHuman: element.dataset.needsHuman === "true" };
  if (!known || isOlder(known, seen)) shown.set(id, { ...known, ...seen });
}

for (const row of document.querySelectorAll("[data-sidebar-session]")) remember(row.dataset.sidebarSession, row);
for (const tile of document.querySelectorAll("[data-tile-session]")) remember(tile.dataset.tileSession, tile);

// -- ordering: needs a human first, then the most recently updated, then the newest id --------

function ranks(element) {
  return [element.dataset.needsHuman === "true" ? 1 : 0, Date.parse(element.dataset.updated || "") || 0];
}

function before(a, b, idOf) {
  const [ha, ua] = ranks(a);
  const [hb, ub] = ranks(b);
  if (ha !== hb) return ha > hb;
  if (ua !== ub) return ua > ub;
  return Number(idOf(a)) > Number(idOf(b));
}

// Moves only the one element that changed: the rest are still in order, and moving fewer
// nodes keeps focus and hover where a person left them.
function place(container, element, idOf) {
  const siblings = [...container.children].filter((child) => child !== element && idOf(child));
  const next = siblings.find((other) => before(element, other, idOf));
  if (next) {
    if (element.nextElementSibling !== next) container.insertBefore(element, next);
  } else if (container.lastElementChild !== element) {
    container.append(element);
  }
}

const rowId = (element) => element.dataset.sidebarSession;
const tileId = (element) => element.dataset.tileSession;

// -- applying one session's message ---------------------------------------------------------

function swap(existing, html) {
  const replacement = fragment(html);
  if (!replacement) return null;
  existing.replaceWith(replacement);
  return replacement;
}

function matchesFilters(message) {
  if (filters.agent && String(message.agent) !== filters.agent) return false;
  if (filters.state && message.state !== filters.state) return false;
  if (filters.finished && finishedStates.has(message.state) !== (filters.finished === "1")) return false;
  const updated = Date.parse(message.updatedAt) || 0;
  if (updatedFrom !== null && updated < updatedFrom) return false;
  if (updatedBefore !== null && updated >= updatedBefore) return false;
  return true;
}

// Each placement checks its own element's version before a swap: the sidebar, a tile and the
// card can each be ahead of the others (a refetch updates some of them, a message all).
function newerThan(element, incoming) {
  return isOlder(version(element), incoming);
}

function applySidebar(id, message, incoming, fresh) {
  if (!sidebarList) return;
  const existing = sidebarList.querySelector(`[data-sidebar-session="${id}"]`);
  let row;
  if (existing) {
    if (!newerThan(existing, incoming)) return;
    // Keep a focused row's focus: the hovercard and keyboard users rely on it.
    const hadFocus = existing.contains(document.activeElement);
    row = swap(existing, message.html.sidebar);
    if (row && hadFocus) row.querySelector("a")?.focus({ preventScroll: true });
  } else {
    if (!fresh) return;
    row = fragment(message.html.sidebar);
    if (!row) return;
    sidebarList.querySelector(".sidebar-empty")?.remove();
    sidebarList.append(row);
  }
  if (row) place(sidebarList, row, rowId);
  const rows = sidebarList.querySelectorAll("[data-sidebar-session]");
  for (const extra of [...rows].slice(SIDEBAR_LIMIT)) extra.remove();
}

function applyTile(id, message, incoming, fresh) {
  if (!tiles) return;
  const selector = `[data-tile-session="${id}"]`;
  const existing = tiles.querySelector(selector) ?? finishedRows?.querySelector(selector);
  if (existing && !newerThan(existing, incoming)) return;
  if (!matchesFilters(message) || (tilesWithoutWaiting && message.needsHuman)) {
    existing?.remove(); // the list above shows it now (refreshCounts refetches the list)
    showFinished();
    return;
  }
  if (!existing && !fresh) return;
  const tile = existing ? swap(existing, message.html.tile) : fragment(message.html.tile);
  if (!tile) return;
  document.querySelector(".tiles-empty")?.remove();
  // A session that finishes moves from the tiles to the rows; one that starts again, back.
  const home = finishedRows && finishedStates.has(message.state) ? finishedRows : tiles;
  if (tile.parentElement !== home) home.append(tile);
  place(home, tile, tileId);
  showFinished();
}

// The "Finished" heading shows only above rows.
function showFinished() {
  const section = finishedRows?.closest("[data-finished]");
  if (section) section.hidden = !finishedRows.querySelector("[data-tile-session]");
}

function applySessionPage(id, message, fresh) {
  if (id !== sessionId) return;
  const selector = `[data-live-card] article[data-session="${id}"]`;
  for (const card of document.querySelectorAll(selector)) {
    if (Number(card.dataset.revision || 0) < message.revision) swap(card, message.html.card);
  }
  const summary = document.querySelector(`[data-card-summary="${id}"]`);
  if (summary && Number(summary.dataset.revision || 0) < message.revision) {
    swap(summary, message.html.summary);
  }
  if (fresh) refreshActivity();
}

function announce(message, previous) {
  if (!announcer || !previous || previous.state === message.state) return;
  if (!message.stateLabel) return;
  // The label says it when a person is needed ("Needs approval"): tasks/models/states.py.
  announcer.textContent = `${message.title}: ${message.stateLabel.toLowerCase()}`;
}

function apply(message) {
  const id = String(message.session);
  const incoming = { revision: message.revision, updated: Date.parse(message.updatedAt) || 0 };
  const previous = shown.get(id);
  const fresh = !previous || isOlder(previous, incoming);
  applySidebar(id, message, incoming, fresh);
  applyTile(id, message, incoming, fresh);
  applySessionPage(id, message, fresh);
  if (!fresh) return;
  shown.set(id, { ...incoming, state: message.state, needsHuman: message.needsHuman });
  announce(message, previous);
  // Counts change with state and needs; the open questions also change while a session
  // keeps needing a person (one answered, another asked).
  // A question the list shows can change without the session needing anyone (being answered →
  // sent, not confirmed → answered).
  const needs = message.needsHuman || previous?.needsHuman || listed(id);
  if (!previous || previous.state !== message.state || needs) refreshCounts();
  document.dispatchEvent(new CustomEvent("onlooker:changed", { detail: message }));
}

// A team channel was told about one of the session's questions (tasks/notify/seen.py):
// nothing of the session changed, only the "Notified …" lines under its questions, which the
// activity and the list show (rendered per request): refetch whichever of them shows it.
function noticed(id) {
  if (id === sessionId) refreshActivity();
  if (listed(id)) refreshCounts();
}

// -- counts and tab title ---------------------------------------------------------------------

const baseTitle = document.title.replace(/^\(\d+\) /, "");

function showCounts(counts) {
  for (const [name, value] of Object.entries({
    waiting: counts.waiting,
    working: counts.working,
    "failed-today": counts.failed_today,
  })) {
    const element = document.querySelector(`[data-count="${name}"]`);
    if (element) element.textContent = String(value);
  }
  document.title = counts.waiting ? `(${counts.waiting}) ${baseTitle}` : baseTitle;
}

// -- HTTP refetch -----------------------------------------------------------------------------

async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (response.status === 401) {
    location.reload(); // logged out meanwhile: the page itself will ask to log in
    throw new Error("logged out");
  }
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

const waitingList = () => document.querySelector("[data-waiting]");
const listed = (id) => Boolean(waitingList()?.querySelector(`[data-waiting-session="${CSS.escape(String(id))}"]`));

function boardQuery(withTiles) {
  const query = new URLSearchParams();
  if (withTiles) query.set("tiles", "1");
  if (withTiles && finishedRows) query.set("finished_rows", "1");
  if (waitingList()) query.set("waiting", "1");
  for (const [name, value] of Object.entries(filters)) if (value) query.set(name, value);
  return `${boardUrl}?${query}`;
}

// Replaces a list with the server's, in the server's order. An element the page already shows
// at the same or a newer version (a live message that beat the fetch) stays as it is, and a
// focused row gets its focus back, so a refetch never throws a keyboard user out of the list.
function replaceList(container, html, idOf) {
  const incoming = elements(html);
  const current = new Map([...container.children].filter(idOf).map((child) => [idOf(child), child]));
  const focused = [...current.values()].find((child) => child.contains(document.activeElement));
  const next = incoming.map((element) => {
    const id = idOf(element);
    const mine = id && current.get(id);
    if (mine && !isOlder(version(mine), version(element))) return mine;
    if (id) remember(id, element);
    return element;
  });
  container.replaceChildren(...next);
  if (focused && !focused.isConnected) {
    const replacement = next.find((element) => idOf(element) === idOf(focused));
    replacement?.querySelector("a")?.focus({ preventScroll: true });
  }
}

let refreshing = null;
let syncs = 0;
async function refetch() {
  if (refreshing) return refreshing;
  refreshing = (async () => {
    try {
      const board = await getJson(boardQuery(overview && tiles));
      showCounts(board.counts);
      if (sidebarList) replaceList(sidebarList, board.sidebar, rowId);
      if (tiles && board.tiles !== undefined) {
        replaceList(tiles, board.tiles, tileId);
        if (finishedRows && board.finished !== undefined) replaceList(finishedRows, board.finished, tileId);
        showFinished();
        showOlder(board.next);
      }
      showWaiting(board.waiting);
      showDecided(board.decided);
      if (sessionId) {
        apply(await getJson(body.dataset.cardUrl));
        await loadActivity(); // the transcript may have grown while the socket was away
      }
      // Caught up: a script (or a test) can tell the page now shows what the server has.
      document.documentElement.dataset.synced = String(++syncs);
      document.dispatchEvent(new CustomEvent("onlooker:refetched"));
    } catch (error) {
      console.warn("onlooker: refetch failed", error);
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

// Where the first page ends moves as sessions change: "Older" continues after the last tile
// the refetch showed, so no session falls between the two pages.
function showOlder(next) {
  const older = document.querySelector("[data-older]");
  if (!older || next === undefined) return;
  older.hidden = !next;
  if (!next) return;
  const query = new URLSearchParams(location.search);
  query.set("before", next);
  older.setAttribute("href", `?${query}`);
}

function showWaiting(html) {
  const current = waitingList();
  const replacement = html && fragment(html);
  if (!current || !replacement) return;
  keepWhatThePersonWasDoing(current, replacement);
  keepRowsBeingSent(current, replacement);
  const focusedButton = rowFocus(current);
  current.replaceWith(replacement);
  const focusedId = current.dataset.focusedId;
  if (focusedId) document.getElementById(focusedId)?.focus({ preventScroll: true });
  else if (focusedButton) focusedButton(replacement)?.focus({ preventScroll: true });
  if (replacement.querySelector("[data-inbox-row]")) document.querySelector(".tiles-empty")?.remove();
  tickTimes(replacement);
  // The rows are new elements: what a script kept on the old ones (a selection) goes back on.
  document.dispatchEvent(new CustomEvent("onlooker:waiting-replaced"));
}

// The "Recently decided" strip, per person like the list: refetched with it.
function showDecided(html) {
  const current = document.querySelector("[data-decided]");
  const replacement = html && fragment(html);
  if (!current || !replacement) return;
  current.replaceWith(replacement);
  tickTimes(replacement);
}

// A row whose answer is on its way stays as the person left it ("Sending…", buttons off)
// until the answer endpoint replies (answers.js): the server already shows it as being
// answered, and swapping it would take the words away mid-send.
function keepRowsBeingSent(current, replacement) {
  for (const row of current.querySelectorAll("[data-inbox-row][data-sending]")) {
    const selector = `[data-inbox-row][data-interaction="${CSS.escape(row.dataset.interaction)}"]`;
    replacement.querySelector(selector)?.replaceWith(row);
  }
}

// Buttons and rows have no ids: find the same one in the new list by what it sends, so a
// keyboard user who moved to Approve with A is still there after a refresh.
function rowFocus(current) {
  const active = document.activeElement;
  const row = current.contains(active) && !active.id ? active.closest("[data-interaction]") : null;
  if (!row) return null;
  const selector = `[data-interaction="${CSS.escape(row.dataset.interaction)}"]`;
  const name = active.getAttribute("name");
  const value = active.getAttribute("value");
  return (replacement) => {
    const twin = replacement.querySelector(selector);
    if (!twin || active === row || !name) return twin;
    const button = [...twin.querySelectorAll("button")].find(
      (candidate) => candidate.getAttribute("name") === name && candidate.getAttribute("value") === value,
    );
    return button && !button.disabled ? button : twin;
  };
}

// An answer sent from this page changed what waits (answers.js): the counts and the list follow.
document.addEventListener("onlooker:answered", () => refreshCounts());

let countsTimer = null;
function refreshCounts() {
  if (countsTimer) return;
  countsTimer = setTimeout(async () => {
    countsTimer = null;
    try {
      const board = await getJson(boardQuery(false));
      showCounts(board.counts);
      showWaiting(board.waiting);
      showDecided(board.decided);
    } catch (error) {
      console.warn("onlooker: counts refresh failed", error);
    }
  }, 250);
}

// -- the socket -------------------------------------------------------------------------------

// How the page shows its connection: the indicator's words, `data-live` on <body> (the
// stylesheets dim a page that has been without a connection for a moment: what it shows may
// be out of date) and a banner with a "Retry now" button. A blip shorter than a moment shows
// nothing; the wall, watched from across a room, shows the banner as soon as a connection it
// had is lost.
const STALE_AFTER_MS = 1_500;
const BANNER_AFTER_MS = 2_000;
const banner = document.querySelector("[data-live-banner]");
const onWall = document.documentElement.classList.contains("wall");
let everLive = false;
let staleTimer = null;
let bannerTimer = null;

function setStatus(state) {
  if (status) {
    status.textContent = state;
    status.dataset.state = state;
  }
  if (state === "live") {
    sayWhy(false);
    everLive = true;
    clearTimeout(staleTimer);
    clearTimeout(bannerTimer);
    staleTimer = bannerTimer = null;
    body.dataset.live = "live";
    if (banner) banner.hidden = true;
    return;
  }
  if (body.dataset.live === "stale" || staleTimer) return; // already counting since the loss
  body.dataset.live = "reconnecting";
  staleTimer = setTimeout(() => {
    body.dataset.live = "stale";
  }, STALE_AFTER_MS);
  const showBanner = () => {
    if (banner) banner.hidden = false;
  };
  if (onWall && everLive) showBanner();
  else bannerTimer = setTimeout(showBanner, BANNER_AFTER_MS);
}

// The banner says why the page is not live: lost, or refused for too many open pages.
function sayWhy(tooMany) {
  banner?.querySelector("[data-live-lost]")?.toggleAttribute("hidden", tooMany);
  banner?.querySelector("[data-live-too-many]")?.toggleAttribute("hidden", !tooMany);
}

let socket = null;
let attempt = 0;
let retryTimer = null;
let accessChangedAt = 0;

function socketUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const query = new URLSearchParams();
  if (sessionId) query.set("session", sessionId);
  // Only the fragments this page keeps live are sent to it (tasks/live/fanout.py): the sidebar's
  // rows, the tiles, and a session page's own card.
  query.set("show", [sidebarList && "sidebar", tiles && "tiles"].filter(Boolean).join(","));
  return `${scheme}//${location.host}/ws/live/?${query}`;
}

function connect() {
  clearTimeout(retryTimer);
  retryTimer = null;
  const ws = new WebSocket(socketUrl());
  socket = ws;
  // Per socket: one abandoned by "Retry now" may close after its successor opened.
  let pingTimer = null;
  let pongTimer = null;
  ws.addEventListener("open", () => {
    if (socket !== ws) return;
    attempt = 0;
    setStatus("live");
    refetch();
    pingTimer = setInterval(() => {
      if (ws.readyState !== WebSocket.OPEN) return;
      ws.send(JSON.stringify({ type: "ping" }));
      clearTimeout(pongTimer);
      pongTimer = setTimeout(() => ws.close(), PONG_WITHIN_MS);
    }, PING_EVERY_MS);
  });
  ws.addEventListener("message", (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    if (message.type === "pong") {
      clearTimeout(pongTimer);
      return;
    }
    // The server lost its channel layer (tasks/live/fanout.py): the socket is open but hears
    // nothing until the server says it is back, and then what was missed is refetched.
    if (socket !== ws) return;
    if (message.type === "lost") {
      setStatus("reconnecting");
      return;
    }
    if (message.type === "resync") {
      setStatus("live");
      refetch();
      return;
    }
    if (message.session !== undefined && message.notified !== undefined) noticed(String(message.session));
    else if (message.session !== undefined && message.html) apply(message);
  });
  ws.addEventListener("close", (event) => {
    clearInterval(pingTimer);
    clearTimeout(pongTimer);
    if (socket !== ws) return;
    socket = null;
    setStatus("reconnecting");
    if (event.code === 4401) {
      location.reload(); // the login expired: let the server send the person to log in
      return;
    }
    if (event.code === 4429) {
      // This person has too many live pages open on this server: say so, try again slowly.
      attempt = Math.max(attempt, TOO_MANY_ATTEMPT);
      sayWhy(true);
      if (banner) banner.hidden = false;
    }
    if (event.code === 4403 && sessionId) {
      location.reload(); // this session may be out of reach now: the server says which
      return;
    }
    if (event.code === 4403 && Date.now() - accessChangedAt > ACCESS_CHANGED_CALM_MS) {
      // What this person may see changed: join what they may see now, at once (the refetch
      // on open drops what they no longer may see). A second change soon after waits like
      // any other retry, so nothing can loop.
      accessChangedAt = Date.now();
      attempt = 0;
      connect();
      return;
    }
    retry();
  });
}

// Exponential backoff with full jitter, so a restarted server is not hit by every screen at once.
function retry() {
  if (retryTimer) return;
  const ceiling = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** attempt);
  attempt += 1;
  const delay = ceiling / 2 + Math.random() * (ceiling / 2);
  retryTimer = setTimeout(connect, delay);
}

// A sign the network or the person is back (online, focus, a visible tab): try at once rather
// than when the backoff says. A live page only refetches, in case it missed something.
function reconnectNow() {
  if (socket && socket.readyState <= WebSocket.OPEN) {
    if (socket.readyState === WebSocket.OPEN) refetch();
    return;
  }
  attempt = 0;
  connect();
}

// A person asking: even an attempt still hanging (a half-open network can hold one for a
// minute) gives way to a fresh one.
function retryNow() {
  if (socket?.readyState === WebSocket.CONNECTING) {
    const hanging = socket;
    socket = null;
    hanging.close();
  }
  reconnectNow();
}

banner?.querySelector("[data-live-retry]")?.addEventListener("click", retryNow);
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") reconnectNow();
});
window.addEventListener("focus", reconnectNow);
window.addEventListener("online", reconnectNow);

if (boardUrl) {
  setStatus("reconnecting");
  connect();
}
tickTimes();
setInterval(tickTimes, 5_000);
