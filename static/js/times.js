// Relative times that keep ticking: every <time data-ago datetime="…">. Reads exactly as the
// server's `ago` filter (tasks/templatetags/onlooker.py) writes, so the first tick changes
// nothing but the number.

export function ago(moment, now = Date.now()) {
  const seconds = Math.max(0, Math.floor((now - moment) / 1000));
  if (seconds < 5) return "just now";
  for (const [unit, size] of [["d", 86_400], ["h", 3_600], ["min", 60]]) {
    if (seconds >= size) return `${Math.floor(seconds / size)} ${unit} ago`;
  }
  return `${seconds} s ago`;
}

export function tickTimes(root = document) {
  const now = Date.now();
  for (const element of root.querySelectorAll("time[data-ago]")) {
    const moment = Date.parse(element.getAttribute("datetime") || "");
    if (!Number.isNaN(moment)) element.textContent = ago(moment, now);
  }
}
