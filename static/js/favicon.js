// The tab's icon carries how many things wait for a person, so a background tab says it too.
// The number comes from the monitoring screen's waiting count or, on any page, from the tab
// title's "(N) " prefix (static/js/live.js keeps both current); the icon is rebuilt as an SVG
// data: URL (the CSP allows data: images) whenever either changes.

const link = document.querySelector("link[data-favicon]");

// The same drawing as static/favicon.svg, so the badge sits on the icon people know.
const ICON =
  '<rect width="32" height="32" rx="7" fill="#0b57c2"/>' +
  '<path d="M4 16c3.2-5.3 7.2-8 12-8s8.8 2.7 12 8c-3.2 5.3-7.2 8-12 8S7.2 21.3 4 16z" fill="#fff"/>' +
  '<circle cx="16" cy="16" r="4.5" fill="#0b57c2"/><circle cx="17.6" cy="14.4" r="1.4" fill="#fff"/>';

/** How many things wait, or 0 when the page does not say. */
export function waitingCount(doc = document) {
  const counter = doc.querySelector('[data-count="waiting"]');
  const fromCounter = counter ? Number.parseInt(counter.textContent.trim(), 10) : Number.NaN;
  if (Number.isFinite(fromCounter)) return Math.max(0, fromCounter);
  const match = /^\((\d+)\) /.exec(doc.title);
  return match ? Number.parseInt(match[1], 10) : 0;
}

/** The icon as an SVG data: URL, with a badge when `count` > 0. */
export function iconUrl(count) {
  let badge = "";
  if (count > 0) {
    const text = count > 99 ? "99+" : String(count);
    const size = text.length > 2 ? 9 : text.length > 1 ? 11 : 13;
    badge =
      '<circle cx="23" cy="9" r="9" fill="#d1242f" stroke="#fff" stroke-width="1.5"/>' +
      `<text x="23" y="9" dy=".36em" text-anchor="middle" font-family="system-ui,Arial,sans-serif" font-weight="700" font-size="${size}" fill="#fff">${text}</text>`;
  }
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">${ICON}${badge}</svg>`;
  return `data:image/svg+xml,${encodeURIComponent(svg)}`;
}

let shown = null;

function update() {
  const count = waitingCount();
  if (!link || count === shown) return;
  shown = count;
  link.href = iconUrl(count);
  link.dataset.faviconCount = String(count);
}

if (link) {
  update();
  const observer = new MutationObserver(update);
  const title = document.querySelector("title");
  if (title) observer.observe(title, { childList: true, characterData: true, subtree: true });
  // The counter's text changes in place, and live.js may replace the element: watch the body.
  const counter = document.querySelector('[data-count="waiting"]');
  if (counter?.parentElement) {
    observer.observe(counter.parentElement, { childList: true, characterData: true, subtree: true });
  }
}
