// The sidebar and the session page's small behaviours:
// - On a phone (the CSS decides: ≤ 760 px) the sessions sidebar is a drawer, hidden until the
//   "Sessions" button opens it; Esc, its close button, a click outside or choosing a session
//   close it. Focus moves into it on opening and back to the button on closing.
// - The open session's row says so (aria-current="page"). Rows are server-rendered fragments
//   shared by everyone, so the mark is set here, and again whenever live.js swaps rows.
// - "Keep it running" closes the cancel confirmation (tasks/_activity.html).
// Without this script the sidebar simply stays in the page and the confirmation closes from
// its own summary: the CSS hides the drawer and the "keep" button only once
// <html data-scripted> says this ran.

document.documentElement.dataset.scripted = "";

const opener = document.querySelector("[data-drawer-open]");
const drawer = document.querySelector("[data-drawer]");
const list = document.querySelector("[data-sidebar-list]");
const here = document.body.dataset.liveSession || "";

const phone = matchMedia("(max-width: 760px)"); // as static/css/session.css

function isOpen() {
  return drawer?.classList.contains("drawer-is-open") ?? false;
}

// While open, the rest of the page is out of reach (the drawer covers it): no tab stop and
// no click lands behind it, so a tap beside the drawer only closes it, never presses a
// button there. The live announcer stays heard.
let setAside = [];
function asideTheRest(on) {
  for (const element of setAside) element.inert = false;
  setAside = [];
  if (!on) return;
  const around = [...document.body.children, ...drawer.parentElement.children];
  setAside = around.filter(
    (element) =>
      !element.contains(drawer) &&
      element !== opener &&
      !element.inert &&
      !element.matches("script, [aria-live]"),
  );
  for (const element of setAside) element.inert = true;
}

function open() {
  if (!drawer || !opener) return;
  drawer.classList.add("drawer-is-open");
  opener.setAttribute("aria-expanded", "true");
  asideTheRest(true);
  const target = drawer.querySelector('[aria-current="page"]') || drawer.querySelector("[data-drawer-close]");
  target?.focus();
}

function close({ returnFocus = true } = {}) {
  if (!isOpen()) return;
  drawer.classList.remove("drawer-is-open");
  opener.setAttribute("aria-expanded", "false");
  asideTheRest(false);
  if (returnFocus) opener.focus();
}

opener?.addEventListener("click", () => (isOpen() ? close() : open()));
drawer?.querySelector("[data-drawer-close]")?.addEventListener("click", () => close());
drawer?.addEventListener("click", (event) => {
  // Choosing a session: the page changes, but a same-page link (this session) would not.
  if (event.target.closest("a[href]")) close({ returnFocus: false });
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && isOpen()) {
    event.preventDefault();
    close();
  }
});
document.addEventListener("click", (event) => {
  if (isOpen() && !drawer.contains(event.target) && !opener.contains(event.target)) close();
});
// Widened past a phone's width, the sidebar is in the page again: nothing stays set aside.
phone.addEventListener("change", () => close({ returnFocus: false }));

function markCurrent() {
  if (!list || !here) return;
  for (const row of list.querySelectorAll("[data-sidebar-session]")) {
    const link = row.querySelector("a");
    if (!link) continue;
    if (row.dataset.sidebarSession === here) {
      if (link.getAttribute("aria-current") !== "page") link.setAttribute("aria-current", "page");
    } else if (link.hasAttribute("aria-current")) {
      link.removeAttribute("aria-current");
    }
  }
}

if (list) {
  markCurrent();
  // Rows are replaced (never edited) by live.js: childList is enough, and setting the
  // attribute does not wake this observer again.
  new MutationObserver(markCurrent).observe(list, { childList: true });
}

document.addEventListener("click", (event) => {
  const keep = event.target.closest?.("[data-cancel-keep]");
  const confirmation = keep?.closest("details");
  if (!confirmation) return;
  confirmation.open = false;
  confirmation.querySelector("summary")?.focus();
});
