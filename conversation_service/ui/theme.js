// Light or dark: the user's choice when they made one (remembered in this browser), else the
// system's. A classic script in <head>, so the page is painted in its colours from the start.
(() => {
  const KEY = "taskforce.theme";
  const system = window.matchMedia("(prefers-color-scheme: dark)");
  let chosen = null;
  try { chosen = localStorage.getItem(KEY); } catch (err) { /* storage blocked: the system decides */ }
  const apply = () => {
    const theme = chosen || (system.matches ? "dark" : "light");
    document.documentElement.dataset.theme = theme;
    const toggle = document.getElementById("theme-toggle");
    if (toggle) toggle.setAttribute("aria-pressed", String(theme === "dark"));
  };
  apply();
  system.addEventListener("change", apply);
  document.addEventListener("DOMContentLoaded", () => {
    apply();
    document.getElementById("theme-toggle").addEventListener("click", () => {
      chosen = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
      try { localStorage.setItem(KEY, chosen); } catch (err) { /* remembered by this page only */ }
      apply();
    });
  });
})();
