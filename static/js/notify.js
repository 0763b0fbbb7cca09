// Desktop notifications of what waits for this person: one per question (per round of it) and
// per browser, however many Onlooker tabs are open. A person turns them on with a
// [data-notify-toggle] button; the choice is kept per person and browser in localStorage.
//
// How it learns: live.js says a session changed (`onlooker:changed`) or that the page caught
// up (`onlooker:refetched`); then this asks /api/waiting what is open for the person to
// answer now (the server decides what they may see and answer), and notifies of what this
// browser has not notified of yet. Tabs agree through one IndexedDB transaction that checks
// and sets the keys notified of (a Web Lock around localStorage where IndexedDB is refused),
// and each notification is tagged with its key besides, so the browser itself replaces a
// duplicate rather than showing two.
//
// Not notified: what was open when notifications were turned on (those keys are marked as
// known at that moment, rather than comparing the agent's clock with this one), what is no
// longer open (answered, being answered, closed: the endpoint lists only open ones), and the
// session the person is looking at right now (this tab, or another of theirs, visible and
// focused). Agent text reaches the page only through the Notification API, as plain text.

const body = document.body;
const userId = body.dataset.userId || "";
const waitingUrl = body.dataset.notifyUrl || "";
const sessionId = body.dataset.liveSession || "";

const SUPPORTED = "Notification" in window && window.isSecureContext;
const SETTING = `onlooker:notify:${userId}`; // {on, since, ready}
const STORE = "notified"; // IndexedDB: {since, seen} per user, `seen` oldest first
const SEEN = `onlooker:notified:${userId}`; // the same, where IndexedDB is refused
const VIEWING = `onlooker:viewing:${userId}`; // {tab, session, at}: a session being looked at
const LOCK = `onlooker-notify-${userId}`;
const SEEN_LIMIT = 300; // keys kept, besides those still listed (the endpoint lists at most 50)
const DEBOUNCE_MS = 300;
const VIEWING_FRESH_MS = 60_000; // a looking tab renews its mark this often (a crashed tab's expires)
const tab = Math.random().toString(36).slice(2);

const WORDS = {
  on: "Notifications: on",
  off: "Notifications: off",
  pending: "Notifications: turning on…",
  denied: "Notifications: blocked by the browser",
};
const PERMISSION_WORDS = {
  granted: "Your browser allows Onlooker's notifications.",
  default: "Your browser will ask whether Onlooker may show notifications when you turn them on.",
  denied:
    "Your browser blocks Onlooker's notifications: allow them in this site's settings (beside the address), then reload the page.",
  unsupported: "This browser cannot show Onlooker's notifications here (they need a secure, HTTPS address).",
};
// What an agent waits for, as a notification's title says it after the agent's name.
const KIND_WORDS = {
  approval: "needs approval",
  connection: "needs a connection",
  question: "asks a question",
  text: "asks a question",
  check: "needs a check", // an uncertain effect a person marks checked
};

function read(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value ?? fallback;
  } catch {
    return fallback; // storage refused, or not JSON: as if nothing were kept
  }
}

function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch {
    // Storage refused (privacy settings): nothing is kept, so nothing is notified twice either.
  }
}

function setting() {
  const kept = read(SETTING, null);
  return kept && typeof kept === "object" && kept.on === true ? kept : { on: false };
}

const permission = () => (SUPPORTED ? Notification.permission : "unsupported");

let turningOn = false;

function label() {
  const allowed = permission();
  const kept = setting();
  let state = "off";
  if (allowed === "denied") state = "denied";
  else if (turningOn || (kept.on && allowed === "granted" && !kept.ready)) state = "pending";
  else if (kept.on && allowed === "granted") state = "on";
  for (const button of document.querySelectorAll("[data-notify-toggle]")) {
    button.hidden = !SUPPORTED;
    button.textContent = WORDS[state];
    button.setAttribute("aria-pressed", String(state === "on"));
    button.dataset.notifyState = state;
    button.title =
      state === "denied"
        ? "Allow notifications for this site in the browser's settings"
        : state === "on"
          ? "Stop desktop notifications in this browser"
          : "Get a desktop notification when an agent waits for you";
  }
  for (const sentence of document.querySelectorAll("[data-notify-permission]")) {
    sentence.textContent = PERMISSION_WORDS[allowed];
  }
}

async function toggle() {
  if (!SUPPORTED || turningOn) return;
  // On as the button says it: a choice kept from before the site's permission was reset in
  // the browser reads "off", and pressing it turns it on (and asks) again.
  if (setting().on && Notification.permission === "granted") {
    write(SETTING, { on: false });
    label();
    return;
  }
  turningOn = true;
  label();
  try {
    let allowed = Notification.permission;
    // Asked only now, when the person pressed: never on a page load.
    if (allowed === "default") allowed = await Notification.requestPermission();
    if (allowed !== "granted") return;
    // Not ready until the first check has marked what is open now as known (`take`).
    write(SETTING, { on: true, since: Date.now(), ready: false });
  } catch (error) {
    console.warn("onlooker: notifications could not be turned on", error);
    return;
  } finally {
    turningOn = false;
    label();
  }
  await check();
}

// -- checking what waits ----------------------------------------------------------------------

let timer = null;
function schedule() {
  if (timer) return;
  timer = setTimeout(() => {
    timer = null;
    check();
  }, DEBOUNCE_MS);
}

let running = null;
let again = false;
let checks = 0;

// One check at a time per tab; a change heard meanwhile checks once more after it.
function check() {
  if (running) {
    again = true;
    return running;
  }
  running = (async () => {
    try {
      do {
        again = false;
        await checkOnce();
      } while (again);
    } catch (error) {
      console.warn("onlooker: checking what waits failed", error);
    } finally {
      running = null;
      // A script (or a test) can tell a check has finished.
      document.documentElement.dataset.notifyChecks = String(++checks);
    }
  })();
  return running;
}

async function checkOnce() {
  const kept = setting();
  if (!waitingUrl || !kept.on || permission() !== "granted") return;
  const response = await fetch(waitingUrl, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  if (!response.ok) return; // logged out: live.js reloads the page
  const { interactions } = await response.json();
  if (!Array.isArray(interactions)) return;
  const { baseline, fresh } = await claim(interactions, kept.since);
  const now = setting();
  if (!now.on || now.since !== kept.since) return; // turned off (or again) meanwhile
  if (baseline) {
    // The first check since they were turned on: what is open now was open before.
    write(SETTING, { ...now, ready: true });
    label();
    return;
  }
  const viewed = viewedSessions();
  for (const item of fresh.reverse()) {
    if (!viewed.has(String(item.session?.id))) show(item); // oldest first
  }
}

// The check-and-set every tab of this browser shares: which of `interactions` (newest first)
// no tab has notified of yet, marked as notified in the same step. `record` is what the
// browser keeps: {since, seen}; `since` is when notifications were turned on, and a record
// of an earlier `since` (or none) is a baseline: every key listed now is marked, none shown.
function take(record, interactions, since) {
  const seen = Array.isArray(record?.seen) ? record.seen.filter((key) => typeof key === "string") : [];
  const known = new Set(seen);
  const fresh = interactions.filter((item) => typeof item?.key === "string" && !known.has(item.key));
  for (const item of fresh) seen.push(item.key);
  const listed = new Set(interactions.map((item) => item?.key));
  // Bounded, never forgetting a key that is still listed (it would be notified again).
  const kept = seen.filter((key, index) => listed.has(key) || index >= seen.length - SEEN_LIMIT);
  const baseline = record?.since !== since;
  return { record: { since, seen: kept }, baseline, fresh: baseline ? [] : fresh };
}

async function claim(interactions, since) {
  try {
    return await claimInDatabase(interactions, since);
  } catch (error) {
    console.warn("onlooker: IndexedDB refused; tabs coordinate through localStorage", error);
    return withLock(() => {
      const taken = take(read(SEEN, null), interactions, since);
      write(SEEN, taken.record);
      return taken;
    });
  }
}

// IndexedDB, not localStorage, holds what was notified: a readwrite transaction is atomic
// across tabs (a second one on the same store starts only once the first has committed),
// while a localStorage write reaches other tabs' copies asynchronously, so even a tab that
// waited for a lock may read the set without the key another tab has just added.
let opened = null;
function database() {
  opened ??= new Promise((resolve, reject) => {
    const request = indexedDB.open("onlooker-notify", 1);
    request.onupgradeneeded = () => request.result.createObjectStore(STORE);
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
    request.onblocked = () => reject(new Error("blocked"));
  });
  return opened;
}

async function claimInDatabase(interactions, since) {
  const db = await database();
  return new Promise((resolve, reject) => {
    const transaction = db.transaction(STORE, "readwrite");
    const store = transaction.objectStore(STORE);
    let taken = null;
    const request = store.get(userId);
    request.onsuccess = () => {
      taken = take(request.result, interactions, since);
      store.put(taken.record, userId);
    };
    // Shown only once committed: a transaction that failed claimed nothing.
    transaction.oncomplete = () => resolve(taken);
    transaction.onerror = () => reject(transaction.error);
    transaction.onabort = () => reject(transaction.error);
  });
}

function withLock(task) {
  if (navigator.locks?.request) return navigator.locks.request(LOCK, task);
  // No Web Locks either: two tabs may both take a key, and the notifications' shared tag
  // makes their two notifications one.
  return Promise.resolve().then(task);
}

function show(item) {
  const name = String(item.agent?.name || "An agent");
  const title = `${name} ${KIND_WORDS[item.kind] || "waits for you"}`;
  const url = new URL(String(item.session?.url || "/"), location.origin);
  if (url.origin !== location.origin) return;
  try {
    const notification = new Notification(title, { body: String(item.prompt || ""), tag: item.key });
    notification.onclick = (event) => {
      event?.preventDefault?.(); // no browser default of focusing some other tab
      window.focus();
      location.assign(url.href);
      notification.close();
    };
  } catch (error) {
    // Some browsers (Chrome on Android) show notifications only from a service worker.
    console.warn("onlooker: the notification could not be shown", error);
  }
}

// -- the session being looked at ----------------------------------------------------------------

function lookingAt() {
  return sessionId && document.visibilityState === "visible" && document.hasFocus() ? sessionId : "";
}

function viewedSessions() {
  const viewed = new Set();
  if (lookingAt()) viewed.add(sessionId);
  const other = read(VIEWING, null);
  if (other && typeof other.session === "string" && Date.now() - Number(other.at) < VIEWING_FRESH_MS) {
    viewed.add(other.session);
  }
  return viewed;
}

function markViewing(leaving = false) {
  if (!leaving && lookingAt()) {
    write(VIEWING, { tab, session: sessionId, at: Date.now() });
  } else if (read(VIEWING, null)?.tab === tab) {
    try {
      localStorage.removeItem(VIEWING);
    } catch {
      // Nothing kept, nothing to remove.
    }
  }
}

if (userId) {
  label();
  for (const button of document.querySelectorAll("[data-notify-toggle]")) {
    button.addEventListener("click", toggle);
  }
  document.addEventListener("onlooker:changed", (event) => {
    // A session that needs nobody opened nothing to answer.
    if (event.detail?.needsHuman) schedule();
  });
  document.addEventListener("onlooker:refetched", schedule);
  // Another tab turned them on or off, or became ready: every toggle says so.
  window.addEventListener("storage", (event) => {
    if (event.key === SETTING || event.key === null) label();
  });
  // The person changed the site's permission in the browser's settings.
  navigator.permissions
    ?.query({ name: "notifications" })
    .then((status) => status.addEventListener("change", label))
    .catch(() => {});
  if (sessionId) {
    // After the event: document.hasFocus() says the new truth by then.
    for (const name of ["focus", "blur"]) window.addEventListener(name, () => setTimeout(markViewing));
    window.addEventListener("pagehide", () => markViewing(true));
    document.addEventListener("visibilitychange", () => markViewing());
    setInterval(() => markViewing(), VIEWING_FRESH_MS / 3);
    markViewing();
  }
  schedule();
}
