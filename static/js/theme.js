// The colour theme a person chose, kept per browser: "light", "dark" or none (follow the
// system). A classic script in <head>, before the stylesheets, so the page is painted in the
// chosen theme from the start; the toggle is wired once the document is parsed.
(function () {
  "use strict";
  var KEY = "onlooker-theme";
  var ORDER = ["system", "light", "dark"];
  var WORDS = { system: "System", light: "Light", dark: "Dark" };
  var root = document.documentElement;

  function stored() {
    try {
      var value = window.localStorage.getItem(KEY);
      return value === "light" || value === "dark" ? value : "system";
    } catch (error) {
      // Storage can be refused (privacy settings): the system's choice still applies.
      return "system";
    }
  }

  function store(choice) {
    try {
      if (choice === "system") window.localStorage.removeItem(KEY);
      else window.localStorage.setItem(KEY, choice);
    } catch (error) {
      // Not kept across pages, but applied to this one.
    }
  }

  function apply(choice) {
    if (choice === "system") root.removeAttribute("data-theme");
    else root.setAttribute("data-theme", choice);
    var toggles = document.querySelectorAll("[data-theme-toggle]");
    for (var i = 0; i < toggles.length; i++) label(toggles[i], choice);
  }

  function label(button, choice) {
    var next = ORDER[(ORDER.indexOf(choice) + 1) % ORDER.length];
    button.textContent = "Theme: " + WORDS[choice];
    button.setAttribute("data-theme-choice", choice);
    // The words are the state (a three-way cycle is no pressed/unpressed toggle); the title
    // says what a press does next.
    button.title = "Switch to the " + WORDS[next].toLowerCase() + " theme";
  }

  // Kept here too: with storage refused the toggle still cycles within the page.
  var current = stored();
  apply(current);

  function wire() {
    var toggles = document.querySelectorAll("[data-theme-toggle]");
    for (var i = 0; i < toggles.length; i++) {
      toggles[i].addEventListener("click", function () {
        current = ORDER[(ORDER.indexOf(current) + 1) % ORDER.length];
        store(current);
        apply(current);
      });
    }
    apply(current);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wire);
  else wire();

  // Another tab changed it: follow, so two open dashboards never disagree.
  window.addEventListener("storage", function (event) {
    if (event.key === KEY || event.key === null) {
      current = stored();
      apply(current);
    }
  });
})();
