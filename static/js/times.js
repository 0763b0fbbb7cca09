// Times that keep ticking: every <time data-ago datetime="…"> ("3 min ago") and every
// <time data-waited-since datetime="…"> ("waiting 14 min": how long a question has waited
// for a person). Reads exactly as the server's `ago` and `waiting` filters
// (tasks/templatetags/onlooker.py) write, so the first tick changes nothing but the number.

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

export function tickTimes(root = document) {
  const now = Date.now();
  for (const [selector, words] of TICKING) {
    for (const element of root.querySelectorAll(selector)) {
      const moment = Date.parse(element.getAttribute("datetime") || "");
      if (!Number.isNaN(moment)) element.textContent = words(moment, now);
    }
  }
}
