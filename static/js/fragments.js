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
// have changed since (times.js writes times in the reader's zone); what the server sent has not.
const served = new WeakMap();

// Puts `replacement`'s children into `current`, keeping each child whose markup is what the
// server sent for it last time: a selection in it, the reader's place and the browser's
// layout of it survive. Children are found by their markup, not their place, so a row still
// there is kept when rows before it went (a full page drops its oldest as new ones come). A
// list marked `data-keep-rows` is kept row by row the same way. A child that came with the
// page itself has no record yet, so the first refetch puts in every child once.
export function keepUnchanged(current, replacement) {
  const byMarkup = new Map();
  for (const child of current.children) {
    const markup = served.get(child);
    if (markup !== undefined) byMarkup.set(markup, [...(byMarkup.get(markup) || []), child]);
  }
  // The earliest child still here with this markup: the ones before `old` were taken or gone.
  const keptFor = (markup) => {
    const found = byMarkup.get(markup) || [];
    while (found.length && found[0].parentNode !== current) found.shift();
    return found.shift();
  };
  let old = current.firstChild;
  for (const node of [...replacement.childNodes]) {
    const element = node.nodeType === Node.ELEMENT_NODE;
    const markup = element ? node.outerHTML : node.textContent;
    const kept = element && keptFor(markup);
    if (kept) {
      while (old && old !== kept) {
        const gone = old;
        old = old.nextSibling;
        gone.remove();
      }
      old = kept.nextSibling;
      continue;
    }
    if (!element && old && old.nodeType === node.nodeType && old.textContent === markup) {
      old = old.nextSibling;
      continue;
    }
    if (element && old?.nodeType === Node.ELEMENT_NODE && old.matches("[data-keep-rows]") && node.matches("[data-keep-rows]")) {
      keepUnchanged(old, node);
      old = old.nextSibling;
      continue;
    }
    const next = old ? old.nextSibling : null;
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
