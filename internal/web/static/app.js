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

  // Passkeys: the server's options carry binary fields as base64url;
  // the browser's API wants ArrayBuffers, and its answer goes back as
  // base64url JSON.
  function unb64(s) {
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) s += "=";
    var b = atob(s), out = new Uint8Array(b.length);
    for (var i = 0; i < b.length; i++) out[i] = b.charCodeAt(i);
    return out.buffer;
  }
  function b64(buf) {
    var b = new Uint8Array(buf), s = "";
    for (var i = 0; i < b.length; i++) s += String.fromCharCode(b[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function ids(list) {
    (list || []).forEach(function (c) { c.id = unb64(c.id); });
  }
  function post(url, body) {
    var h = { "Content-Type": "application/json" };
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta && meta.content) h["X-CSRF-Token"] = meta.content;
    return fetch(url, { method: "POST", headers: h, body: body ? JSON.stringify(body) : "{}", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error(r.status + " " + r.statusText);
        return r.json();
      });
  }
  function answer(cred, fields) {
    var resp = {};
    fields.forEach(function (f) { if (cred.response[f]) resp[f] = b64(cred.response[f]); });
    if (cred.response.getTransports) resp.transports = cred.response.getTransports();
    return { id: cred.id, rawId: b64(cred.rawId), type: cred.type, response: resp,
      clientExtensionResults: cred.getClientExtensionResults ? cred.getClientExtensionResults() : {} };
  }
  function passkeys() {
    var state = document.getElementById("passkey-state");
    function say(t) { if (state) state.textContent = t; }
    var reg = document.getElementById("passkey-register");
    if (reg) reg.addEventListener("click", function () {
      say("waiting for the authenticator…");
      post("/passkeys/register/begin").then(function (start) {
        var o = start.options.publicKey;
        o.challenge = unb64(o.challenge);
        o.user.id = unb64(o.user.id);
        ids(o.excludeCredentials);
        return navigator.credentials.create({ publicKey: o }).then(function (cred) {
          return post("/passkeys/register/finish?c=" + encodeURIComponent(start.ceremony),
            answer(cred, ["clientDataJSON", "attestationObject"]));
        });
      }).then(function () { location.reload(); }, function (e) { say("not registered: " + e.message); });
    });
    var login = document.getElementById("passkey-login");
    if (login) login.addEventListener("click", function () {
      say("waiting for the authenticator…");
      post("/login/passkey/begin").then(function (start) {
        var o = start.options.publicKey;
        o.challenge = unb64(o.challenge);
        ids(o.allowCredentials);
        return navigator.credentials.get({ publicKey: o }).then(function (cred) {
          return post("/login/passkey/finish?c=" + encodeURIComponent(start.ceremony),
            answer(cred, ["clientDataJSON", "authenticatorData", "signature", "userHandle"]));
        });
      }).then(function (r) { location.assign(r.next); }, function (e) { say("not logged in: " + e.message); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    stream();
    passkeys();
    document.addEventListener("keydown", keys);
  });
})();
