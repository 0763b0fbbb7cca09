// The session page's activity (transcript, questions, decisions, artifacts, turns, timeline):
// rendered per request, since it holds this person's buttons, and refetched when the session
// changes. A refetch puts in only what changed: a row the reader is selecting text in, or
// reading with a screen reader, stays the element it was.
import { fragment, keepUnchanged, keepWhatThePersonWasDoing } from "./fragments.js";
import { tickTimes } from "./times.js";

const body = document.body;

// Every refetch is a view on the server, for every person on the page. The first change after
// a quiet spell shows within ACTIVITY_DELAY; while the session keeps changing (an agent
// streaming its statuses) the page refetches at most once per ACTIVITY_SPACING, never two at
// once, and always once more after the last change.
const ACTIVITY_DELAY = 300;
const ACTIVITY_SPACING = 1000;
let activityTimer = null;
let activityLoading = false;
let activityAgain = false;
let activityLoadedAt = -Infinity;

export function refreshActivity() {
  if (!body.dataset.activityUrl || activityTimer) return;
  if (activityLoading) {
    activityAgain = true;
    return;
  }
  const spaced = activityLoadedAt + ACTIVITY_SPACING - performance.now();
  activityTimer = setTimeout(async () => {
    activityTimer = null;
    activityLoading = true;
    activityLoadedAt = performance.now();
    try {
      await loadActivity();
    } finally {
      activityLoading = false;
      if (activityAgain) {
        activityAgain = false;
        refreshActivity();
      }
    }
  }, Math.max(ACTIVITY_DELAY, spaced));
}

export async function loadActivity() {
  const url = body.dataset.activityUrl;
  if (!url) return;
  try {
    const response = await fetch(url, { credentials: "same-origin" });
    if (!response.ok) return;
    const replacement = fragment(await response.text());
    const current = document.querySelector("[data-session-activity]");
    if (replacement && current) {
      keepWhatThePersonWasDoing(current, replacement);
      const focusedId = current.dataset.focusedId;
      delete current.dataset.focusedId;
      keepUnchanged(current, replacement);
      if (focusedId && document.activeElement?.id !== focusedId) {
        document.getElementById(focusedId)?.focus({ preventScroll: true });
      }
      tickTimes();
      // What other scripts read from the activity (composer.js: the task waiting for a reply).
      document.dispatchEvent(new CustomEvent("onlooker:activity"));
    }
  } catch (error) {
    console.warn("onlooker: activity refresh failed", error);
  }
}
