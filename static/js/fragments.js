// Server-rendered fragments to elements. A <template> parses without running scripts or
// loading anything, and the page's CSP forbids inline scripts anyway.

export function elements(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return [...template.content.children];
}

export function fragment(html) {
  return elements(html)[0] || null;
}

// A refreshed activity must not take away a half-written answer, the focus, or a receipt
// someone opened to read.
export function keepWhatThePersonWasDoing(current, replacement) {
  const open = new Set([...current.querySelectorAll("details[open]")].map((d) => d.dataset.key));
  for (const details of replacement.querySelectorAll("details[data-key]")) {
    if (open.has(details.dataset.key)) details.open = true;
  }
  for (const draft of current.querySelectorAll("textarea[id]")) {
    const twin = replacement.querySelector(`#${CSS.escape(draft.id)}`);
    if (twin && draft.value) twin.value = draft.value;
  }
  const active = document.activeElement;
  if (active?.id && current.contains(active)) current.dataset.focusedId = active.id;
}

// The markup each element put in by keepUnchanged came with: what the page shows of it may
// have changed since (times.js writes times in the reader's zone), what the server sent not.
const served = new WeakMap();

// Puts `replacement`'s children into `current`, keeping each child whose markup is what the
// server sent for it last time: a selection in it, the reader's place and the browser's
// layout of it survive. A list marked `data-keep-rows` is kept row by row the same way. A
// child that came with the page itself has no record yet, so the first refetch puts in
// every child once.
export function keepUnchanged(current, replacement) {
  let old = current.firstChild;
  for (const node of [...replacement.childNodes]) {
    const next = old ? old.nextSibling : null;
    const element = node.nodeType === Node.ELEMENT_NODE;
    const markup = element ? node.outerHTML : node.textContent;
    const same = element ? served.get(old) === markup : old?.nodeType === node.nodeType && old.textContent === markup;
    if (same) {
      old = next;
      continue;
    }
    if (element && old?.nodeType === Node.ELEMENT_NODE && old.matches("[data-keep-rows]") && node.matches("[data-keep-rows]")) {
      keepUnchanged(old, node);
      old = next;
      continue;
    }
    if (old) old.replaceWith(node);
    else current.append(node);
    if (element) served.set(node, markup);
    old = next;
  }
  while (old) {
    const gone = old;
    old = old.nextSibling;
    gone.remove();
  }
}
