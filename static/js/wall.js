// The wall display (templates/tasks/wall.html): a clock, when the screen last heard anything
// ("updated"), a grid sized to the sessions it shows, and pages that turn by themselves, so a
// screen nobody touches shows every session in turn without a scrollbar. The sessions waiting
// for a person are on every page. live.js keeps the tiles themselves; this decides which of
// them are shown, how many columns and rows they share, and which of their lines fit.

import { clockTime } from "./times.js";

const PAGE_EVERY_MS = 15_000;
// The smallest tile still read from across a room (rem, which grows with the screen): its
// title and state, who and when, and two lines of what it does. 12 fit at 1920×1080.
const SMALLEST_TILE = { width: 16, height: 8.5 };
// Among grids with as few empty cells, the one whose tiles are closest to this width:height.
const TILE_SHAPE = 2;

const tiles = document.documentElement.classList.contains("wall") && document.querySelector("[data-tiles]");

// Times in the viewer's own format (static/js/times.js), as every other page shows them.
function showTime(selector, moment) {
  for (const element of document.querySelectorAll(selector)) {
    element.textContent = clockTime(moment);
    element.dateTime = moment.toISOString();
  }
}

// -- the grid -----------------------------------------------------------------------------------

const px = (value) => Number.parseFloat(value) || 0;
const rem = () => px(getComputedStyle(document.documentElement).fontSize);

function room() {
  const style = getComputedStyle(tiles);
  return {
    width: tiles.clientWidth,
    height: tiles.clientHeight,
    columnGap: px(style.columnGap),
    rowGap: px(style.rowGap),
  };
}

// The most tiles of the smallest size the screen holds, as columns and rows.
function capacity(box) {
  const size = rem();
  const columns = Math.floor((box.width + box.columnGap) / (SMALLEST_TILE.width * size + box.columnGap));
  const rows = Math.floor((box.height + box.rowGap) / (SMALLEST_TILE.height * size + box.rowGap));
  return { columns: Math.max(1, columns), rows: Math.max(1, rows) };
}

// The grid for `count` tiles: the fewest empty cells, then tiles of the most readable shape.
function grid(count, box, most) {
  let best = null;
  for (let columns = 1; columns <= most.columns; columns += 1) {
    const rows = Math.min(most.rows, Math.ceil(count / columns));
    const empty = columns * rows - count;
    if (empty < 0) continue;
    const width = (box.width - (columns - 1) * box.columnGap) / columns;
    const height = (box.height - (rows - 1) * box.rowGap) / rows;
    const shape = Math.abs(Math.log(width / height / TILE_SHAPE));
    if (!best || empty < best.empty || (empty === best.empty && shape < best.shape)) {
      best = { columns, rows, empty, shape };
    }
  }
  return best ?? most;
}

function setGrid({ columns, rows }) {
  tiles.style.setProperty("--wall-columns", String(columns));
  tiles.style.setProperty("--wall-rows", String(rows));
}

// -- whole lines only ---------------------------------------------------------------------------

// What gives way when a tile's text is taller than its cell, first to last: the note, then
// the step count and the warnings, then the question's lines; then whole rows from the end.
const YIELDING = [".note", ".card-steps", ".plan-more", ".card-warning", ".card-answer", ".card-question"];
const CLAMPED = ":is(.note, .card-warning, .card-answer, .card-question)";

// The tile's grid items (its parts, through the display: contents wrappers of wall.css).
function items(node) {
  const found = [];
  for (const child of node.children) {
    if (getComputedStyle(child).display === "contents") found.push(...items(child));
    else found.push(child);
  }
  return found;
}

function overflow(tile) {
  const style = getComputedStyle(tile);
  const limit = tile.getBoundingClientRect().bottom - px(style.borderBottomWidth) - px(style.paddingBottom);
  let bottom = -Infinity;
  for (const element of items(tile)) {
    const box = element.getBoundingClientRect();
    if (box.height > 0) bottom = Math.max(bottom, box.bottom);
  }
  return bottom - limit;
}

function lineHeight(element) {
  const style = getComputedStyle(element);
  return px(style.lineHeight) || px(style.fontSize) * 1.35;
}

function drop(element) {
  element.classList.add("wall-dropped");
}

// Shortens one part a line at a time (-webkit-line-clamp) until the tile's text fits, down
// to nothing; a part that is not running text goes whole.
function give(tile, element) {
  if (!element.matches(CLAMPED)) return drop(element);
  let lines = Math.round(element.getBoundingClientRect().height / lineHeight(element));
  while (lines > 1 && overflow(tile) > 0.5) {
    lines -= 1;
    element.classList.add("wall-clamped");
    element.style.setProperty("-webkit-line-clamp", String(lines));
  }
  if (overflow(tile) > 0.5) drop(element);
}

function fit(tile) {
  for (const element of tile.querySelectorAll(".wall-dropped, .wall-clamped")) {
    element.classList.remove("wall-dropped", "wall-clamped");
    element.style.removeProperty("-webkit-line-clamp");
  }
  for (const selector of YIELDING) {
    for (const element of [...tile.querySelectorAll(selector)].reverse()) {
      if (overflow(tile) <= 0.5) return;
      if (element.checkVisibility()) give(tile, element);
    }
  }
  // Still too tall (a very small screen): whole parts go from the end, never the title.
  for (const element of items(tile).reverse()) {
    if (overflow(tile) <= 0.5) return;
    if (!element.matches(".tile-title")) drop(element);
  }
}

// -- pages ------------------------------------------------------------------------------------

let page = 0;
let pageCount = 1;

const sessionTiles = () => [...tiles.children].filter((element) => element.dataset.tileSession);
const pinnedTile = (element) => element.dataset.needsHuman === "true";

// Splits the tiles into pages of what the grid holds: the waiting sessions on every page
// unless they alone fill one (then every tile takes its turn, waiting ones first).
function pages(all, room) {
  let pinned = all.filter(pinnedTile);
  if (pinned.length >= room) pinned = [];
  const rest = all.filter((element) => !pinned.includes(element));
  const each = room - pinned.length;
  const shown = [];
  for (let start = 0; start < rest.length || shown.length === 0; start += each) {
    shown.push([...pinned, ...rest.slice(start, start + each)]);
  }
  return shown;
}

function paginate() {
  const all = sessionTiles();
  const box = room();
  const most = capacity(box);
  const split = pages(all, most.columns * most.rows);
  setGrid(grid(Math.max(1, Math.max(...split.map((shown) => shown.length))), box, most));
  pageCount = split.length;
  page = Math.min(page, pageCount - 1);
  const shown = new Set(split[page]);
  for (const element of all) element.hidden = !shown.has(element);
  for (const element of shown) fit(element);
  const label = document.querySelector("[data-wall-page]");
  if (label) {
    label.hidden = pageCount < 2;
    label.textContent = `Page ${page + 1} of ${pageCount}`;
  }
}

function nextPage() {
  paginate(); // the tiles may have changed since the last count
  page = (page + 1) % pageCount;
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
  document.fonts?.ready.then(paginateSoon);
  paginate();
  setInterval(nextPage, Number(document.body.dataset.wallPageEvery) || PAGE_EVERY_MS);
}
