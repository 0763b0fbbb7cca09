// The wall display (templates/tasks/wall.html): a clock, when the screen last heard anything
// ("updated"), and pages that turn by themselves, so a screen nobody touches shows every
// session in turn without a scrollbar. The sessions waiting for a person are on every page.
// live.js keeps the tiles themselves; this only decides which of them are shown.

const PAGE_EVERY_MS = 15_000;

const tiles = document.documentElement.classList.contains("wall") && document.querySelector("[data-tiles]");

const two = (number) => String(number).padStart(2, "0");
const hhmm = (moment) => `${two(moment.getHours())}:${two(moment.getMinutes())}`;

function showTime(selector, moment) {
  for (const element of document.querySelectorAll(selector)) {
    element.textContent = hhmm(moment);
    element.dateTime = moment.toISOString();
  }
}

// -- pages ------------------------------------------------------------------------------------

let page = 0;
let starts = [0]; // where each page begins among the tiles that are not pinned

const sessionTiles = () => [...tiles.children].filter((element) => element.dataset.tileSession);
const pinnedTile = (element) => element.dataset.needsHuman === "true";

function fits(element, bottom) {
  return element.getBoundingClientRect().bottom <= bottom + 0.5;
}

function showOnly(shown, all) {
  for (const element of all) element.hidden = !shown.has(element);
}

// Lays the tiles out page by page and measures: what fits is what the screen shows, whatever
// the tiles' heights and the screen's size. Waiting sessions are pinned to every page unless
// they alone overflow one; then every tile takes its turn, waiting ones first.
function paginate() {
  const all = sessionTiles();
  const bottom = tiles.getBoundingClientRect().bottom;
  let pinned = all.filter(pinnedTile);
  showOnly(new Set(pinned), all);
  if (!pinned.every((element) => fits(element, bottom))) pinned = [];
  const rest = all.filter((element) => !pinned.includes(element));
  starts = [0];
  let start = 0;
  while (start < rest.length) {
    showOnly(new Set([...pinned, ...rest.slice(start)]), all);
    let end = start;
    while (end < rest.length && fits(rest[end], bottom)) end += 1;
    start = Math.max(end, start + 1); // a tile taller than the screen still gets its page
    if (start < rest.length) starts.push(start);
  }
  page = Math.min(page, starts.length - 1);
  const shown = rest.slice(starts[page], starts[page + 1] ?? rest.length);
  showOnly(new Set([...pinned, ...shown]), all);
  const label = document.querySelector("[data-wall-page]");
  if (label) {
    label.hidden = starts.length < 2;
    label.textContent = `Page ${page + 1} of ${starts.length}`;
  }
}

function nextPage() {
  paginate(); // the tiles may have changed since the last count
  page = (page + 1) % starts.length;
  paginate();
}

let pending = false;
function paginateSoon() {
  if (pending) return;
  pending = true;
  queueMicrotask(() => {
    pending = false;
    paginate();
  });
}

if (tiles) {
  showTime("[data-wall-clock]", new Date());
  showTime("[data-wall-updated]", new Date());
  setInterval(() => showTime("[data-wall-clock]", new Date()), 1_000);
  for (const name of ["onlooker:changed", "onlooker:refetched"]) {
    document.addEventListener(name, () => showTime("[data-wall-updated]", new Date()));
  }
  // live.js adds, swaps and reorders tiles; each change is laid out before it is painted.
  new MutationObserver(paginateSoon).observe(tiles, { childList: true });
  // The screen's size, the banner coming and going, the fonts arriving: all change what fits.
  new ResizeObserver(paginateSoon).observe(tiles);
  paginate();
  setInterval(nextPage, Number(document.body.dataset.wallPageEvery) || PAGE_EVERY_MS);
}
