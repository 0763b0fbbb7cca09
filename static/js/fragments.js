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
