// The console's one script: the live event stream of a session page and
// the keyboard. Everything it inserts was rendered and escaped by the
// server; it never builds HTML from data itself.
(function () {
  "use strict";

  function stream() {
    var list = document.getElementById("events");
    if (!list || !window.EventSource) return;
    var state = document.getElementById("stream-state");
    var status = document.getElementById("status");
    // The first connection starts after the events the page was rendered
    // with; on a reconnect the browser sends Last-Event-ID itself.
    var es = new EventSource(list.getAttribute("data-stream"));
    es.addEventListener("ev", function (e) {
      if (document.getElementById("ev-" + e.lastEventId)) return;
      list.insertAdjacentHTML("beforeend", e.data);
      var li = list.lastElementChild;
      if (li && li.getAttribute("data-type") === "stats" && status) {
        var s = li.querySelector(".stats");
        if (s) status.textContent = s.textContent.replace(/^status\s*/, "");
      }
      if (li && li.getAttribute("data-type") === "approval") {
        // The answer form comes with the page.
        setTimeout(function () { location.reload(); }, 200);
      }
    });
    es.addEventListener("reload", function () { es.close(); location.reload(); });
    es.onopen = function () { if (state) state.textContent = "live"; };
    es.onerror = function () { if (state) state.textContent = "reconnecting…"; };
  }

  function items() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-nav]"));
  }

  var current = -1;
  function move(d) {
    var all = items();
    if (!all.length) return;
    if (current >= 0 && all[current]) all[current].classList.remove("selected");
    current = Math.max(0, Math.min(all.length - 1, current + d));
    var el = all[current];
    el.classList.add("selected");
    if (!el.hasAttribute("tabindex")) el.setAttribute("tabindex", "-1");
    el.focus();
    el.scrollIntoView({ block: "nearest" });
  }

  function keys(e) {
    var t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT")) {
      if (e.key === "Escape") t.blur();
      return;
    }
    var all = items();
    switch (e.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "Enter":
        if (current >= 0 && all[current]) {
          var a = all[current].querySelector("a");
          if (a && t === all[current]) { a.click(); break; }
        }
        return;
      case "a":
        var b = document.querySelector(".request .approve-all");
        if (current >= 0 && all[current] && all[current].querySelector(".approve-all")) b = all[current].querySelector(".approve-all");
        if (b) b.focus();
        break;
      case "/":
        var f = document.querySelector("[data-filter]");
        if (f) f.focus();
        break;
      case "?":
        var k = document.querySelector(".keys");
        if (k) k.scrollIntoView();
        break;
      default: return;
    }
    e.preventDefault();
  }

  document.addEventListener("DOMContentLoaded", function () {
    stream();
    document.addEventListener("keydown", keys);
  });
})();
