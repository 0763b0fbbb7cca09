// Every <time datetime="…"> on a page, in the viewer's own time zone and language: the server
// writes UTC (it cannot know the viewer's zone), this rewrites it where the person reads it.
//
// - Ticking times: <time data-ago> ("3 min ago") and <time data-waited-since> ("waiting
//   14 min": how long a question has waited for a person). Read exactly as the server's `ago`
//   and `waiting` filters (tasks/templatetags/onlooker.py) write, so the first tick changes
//   nothing but the number.
// - Every other <time>: a short local time, the time alone when it is today and the date and
//   time otherwise; with data-seconds (the transcript) to the second. One set of options for
//   every page (the wall's clock too, clockTime): the viewer's locale decides 12 or 24 hours. The end of a range
//   (data-range-end) is short beside its start.
// - Every <time> gets a title with the full local date, time and zone, for hovering.
//
// Fragments swapped in live (sidebar rows, tiles, the card, the activity) are localized as
// they arrive: a MutationObserver sees them, whichever script swapped them in.

function duration(seconds) {
  for (const [unit, size] of [["d", 86_400], ["h", 3_600], ["min", 60]]) {
    if (seconds >= size) return `${Math.floor(seconds / size)} ${unit}`;
  }
  return `${seconds} s`;
}

function secondsSince(moment, now) {
  return Math.max(0, Math.floor((now - moment) / 1000));
}

export function ago(moment, now = Date.now()) {
  const seconds = secondsSince(moment, now);
  return seconds < 5 ? "just now" : `${duration(seconds)} ago`;
}

export function waiting(moment, now = Date.now()) {
  return `waiting ${duration(secondsSince(moment, now))}`;
}

const TICKING = [
  ["time[data-ago]", ago],
  ["time[data-waited-since]", waiting],
];

// Made once: a transcript has hundreds of times, and a formatter is costly to build. Every
// formatter takes the hours as the viewer's locale writes a time of day: two digits on a
// 24-hour clock ("09:05", also beside a date, where "numeric" alone would give "9:05" in
// en-GB), as the number on a 12-hour one ("9:05 AM").
const LOCALE_HOURS = new Intl.DateTimeFormat(undefined, { hour: "numeric" }).resolvedOptions().hourCycle;
const HOURS = {
  hour: LOCALE_HOURS === "h11" || LOCALE_HOURS === "h12" ? "numeric" : "2-digit",
  minute: "2-digit",
};
const FULL = new Intl.DateTimeFormat(undefined, {
  weekday: "long",
  year: "numeric",
  month: "long",
  day: "numeric",
  ...HOURS,
  second: "2-digit",
  timeZoneName: "short",
});
const TIME = new Intl.DateTimeFormat(undefined, HOURS);
const TIME_SECONDS = new Intl.DateTimeFormat(undefined, { ...HOURS, second: "2-digit" });
const DATE_TIME = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", ...HOURS });
const YEAR_DATE_TIME = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "numeric",
  ...HOURS,
});

function localDay(date) {
  return [date.getFullYear(), date.getMonth(), date.getDate()].join("-");
}

// The short form: what a person needs to place the moment, no more.
export function shortTime(moment, { seconds = false, now = Date.now() } = {}) {
  const date = new Date(moment);
  const today = new Date(now);
  if (localDay(date) === localDay(today)) return (seconds ? TIME_SECONDS : TIME).format(date);
  return (date.getFullYear() === today.getFullYear() ? DATE_TIME : YEAR_DATE_TIME).format(date);
}

// A clock (the wall's): the time of day alone, as every other time on the pages shows it.
export function clockTime(moment) {
  return TIME.format(new Date(moment));
}

export function fullTime(moment) {
  return FULL.format(new Date(moment));
}

function momentOf(element) {
  const moment = Date.parse(element.getAttribute("datetime") || "");
  return Number.isNaN(moment) ? null : moment;
}

// Writes only what differs: the MutationObserver below must not see endless changes, and a
// screen reader should not hear a text replaced by the same text.
function show(element, text, title) {
  if (element.textContent !== text) element.textContent = text;
  if (element.title !== title) element.title = title;
}

// The end of a range ("10:01–10:07", data-range-end) on the same day as its start (the
// <time> before it) needs no date of its own.
function rangeStart(element) {
  if (!element.hasAttribute("data-range-end")) return null;
  const start = element.previousElementSibling;
  return start?.matches("time[datetime]") ? momentOf(start) : null;
}

// A time that does not tick changes only with its moment, its range's start or the day: what
// each was last written for, so a page of 500 transcript times is not written again each
// time it is ticked (formatting them took a live page's browser a tenth of a core).
const written = new WeakMap();

function localize(element, now) {
  const moment = momentOf(element);
  if (moment === null) return;
  const ticking = TICKING.find(([selector]) => element.matches(selector));
  const start = rangeStart(element);
  const writtenFor = ticking ? null : `${moment} ${start} ${localDay(new Date(now))}`;
  if (writtenFor !== null && written.get(element) === writtenFor) return;
  const seconds = element.hasAttribute("data-seconds");
  let text;
  if (ticking) text = ticking[1](moment, now);
  else if (start !== null) text = shortTime(moment, { seconds, now: start });
  else text = shortTime(moment, { seconds, now });
  show(element, text, fullTime(moment));
  if (writtenFor !== null) written.set(element, writtenFor);
}

const LOCAL = "time[datetime]:not([data-keeps-text])";

function timesIn(root) {
  if (root.nodeType !== Node.ELEMENT_NODE && root.nodeType !== Node.DOCUMENT_NODE) return [];
  // A time that writes itself (the wall's clock, data-keeps-text) is left alone.
  const found = [...root.querySelectorAll(LOCAL)];
  if (root.matches?.(LOCAL)) found.push(root);
  return found;
}

// All the page's times: the ticking ones move on, the others change only when the day does.
export function tickTimes(root = document) {
  const now = Date.now();
  for (const element of timesIn(root)) localize(element, now);
}

// Only the ticking times ("3 min ago", "waiting 14 min"): what a session's change can move.
function tickAgo() {
  const now = Date.now();
  for (const [selector, words] of TICKING) {
    for (const element of document.querySelectorAll(`${selector}[datetime]:not([data-keeps-text])`)) {
      const moment = momentOf(element);
      if (moment !== null) show(element, words(moment, now), fullTime(moment));
    }
  }
}

const observer = new MutationObserver((records) => {
  const now = Date.now();
  for (const record of records) {
    for (const node of record.addedNodes) {
      for (const element of timesIn(node)) localize(element, now);
    }
  }
});
observer.observe(document.documentElement, { childList: true, subtree: true });

// A live message comes for every change of every session the page lists, tens a second on a
// busy team: its fragments are localized as they are swapped in (above), and the times already
// shown tick. Every time is looked at again on a refetch, and every few seconds (live.js).
document.addEventListener("onlooker:changed", tickAgo);
document.addEventListener("onlooker:refetched", () => tickTimes());
tickTimes();
