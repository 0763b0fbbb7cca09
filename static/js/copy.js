// Copy buttons: <button data-copy="full text"> puts the text on the clipboard and says so on
// the button for a moment ("Copied"), so a short id on the page can be pasted whole. Delegated
// from the document, so buttons in fragments swapped in live work too. The text goes in as
// text (the clipboard API), never as markup.

const SAID_FOR_MS = 1500;

async function copy(button) {
  const text = button.dataset.copy ?? "";
  const label = button.dataset.copyLabel ?? button.textContent;
  button.dataset.copyLabel = label;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch (error) {
    // No clipboard (an insecure origin, a refused permission): the title still shows it.
    console.warn("onlooker: copy failed", error);
    button.textContent = "Copy failed";
  }
  setTimeout(() => {
    button.textContent = button.dataset.copyLabel;
  }, SAID_FOR_MS);
}

document.addEventListener("click", (event) => {
  const button = event.target instanceof Element ? event.target.closest("button[data-copy]") : null;
  if (button) copy(button);
});
