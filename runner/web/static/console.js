// runner console: the one script of the pages (same origin, allowed by the CSP's
// script-src 'self'; no inline script anywhere). Two things, both optional: the page works
// without it.
//
// 1. Times. Every time is rendered by the server as <time datetime="...UTC...">UTC text</time>.
//    The "times in" control shows them in UTC, in the viewer's zone, or in the job's zone (a
//    page about one job says which: <main data-zone>). A <time data-zone="..."> keeps its own
//    zone whatever the choice (the job page's "next slots in the job's zone" column). The
//    choice is kept in localStorage.
// 2. Live refresh. Pages with <main data-live="N"> fetch themselves again every N seconds
//    (same origin, the session cookie) and swap in the new <main>; never while a form field
//    has the focus or a form has been edited, nor while the tab is hidden; the control turns it
//    off. A session that ended (the fetch lands on /login) stops it.
(function () {
  "use strict";
  var ZONE_KEY = "runner.tz", LIVE_KEY = "runner.live";
  var dirty = false, timer = null;

  function store(key, value) { try { localStorage.setItem(key, value); } catch (e) { /* private mode */ } }
  function stored(key) { try { return localStorage.getItem(key); } catch (e) { return null; } }

  function pageZone() {
    var main = document.querySelector("main");
    return main ? main.getAttribute("data-zone") : null;
  }

  function format(date, zone) {
    var opts = { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
                 second: "2-digit", hourCycle: "h23", timeZoneName: "shortOffset" };
    if (zone) { opts.timeZone = zone; }
    var parts = {};
    try {
      new Intl.DateTimeFormat("en-US", opts).formatToParts(date).forEach(function (p) { parts[p.type] = p.value; });
    } catch (e) {
      return null;  // an unknown zone: leave the UTC text
    }
    var offset = (parts.timeZoneName || "").replace("GMT", "UTC");
    if (offset === "UTC") { offset = "UTC+0"; }
    return parts.year + "-" + parts.month + "-" + parts.day + " " + parts.hour + ":" + parts.minute + ":" +
      parts.second + " " + offset + (zone && zone !== "UTC" ? " " + zone : "");
  }

  function showTimes() {
    var choice = stored(ZONE_KEY) || "utc";
    var jobZone = pageZone();
    if (choice === "job" && !jobZone) { choice = "utc"; }
    var select = document.getElementById("tz");
    if (select) {
      select.value = choice;
      var jobOption = select.querySelector("option[value=job]");
      if (jobOption) {
        jobOption.disabled = !jobZone;
        jobOption.textContent = jobZone ? "the job's zone (" + jobZone + ")" : "the job's zone";
      }
    }
    var times = document.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i], iso = t.getAttribute("datetime");
      var date = new Date(iso);
      if (isNaN(date.getTime())) { continue; }
      var fixed = t.getAttribute("data-zone");
      var zone = fixed || (choice === "job" ? jobZone : choice === "utc" ? "UTC" : undefined);
      var text = (zone === "UTC" && !fixed) ? iso : format(date, zone);
      if (text) { t.textContent = text; t.title = iso; }
    }
  }

  function liveSeconds() {
    var main = document.querySelector("main");
    var n = main ? parseInt(main.getAttribute("data-live") || "0", 10) : 0;
    return n > 0 ? n : 0;
  }

  function setState(text) {
    var el = document.getElementById("live-state");
    if (el) { el.textContent = text; }
  }

  function editing() {
    var active = document.activeElement;
    if (active && active.closest && active.closest("main form, main input, main select, main textarea")) {
      return true;
    }
    return dirty;
  }

  function refresh() {
    var box = document.getElementById("live");
    if (box && !box.checked) { setState(""); return; }
    if (document.hidden) { return; }
    if (editing()) { setState("paused: a form is being filled"); return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected && new URL(response.url).pathname === "/login") {
          setState("stopped: log in again");
          stop();
          return null;
        }
        if (!response.ok) { setState("refresh failed (HTTP " + response.status + "); trying again"); return null; }
        return response.text();
      })
      .then(function (html) {
        if (html === null || html === undefined || editing()) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector("main"), main = document.querySelector("main");
        if (!fresh || !main) { return; }
        var scrollX = window.scrollX, scrollY = window.scrollY;
        main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes).map(function (n) {
          return document.importNode(n, true);
        }));
        watchForms();
        showTimes();
        window.scrollTo(scrollX, scrollY);
        setState("updated " + new Date().toLocaleTimeString());
      })
      .catch(function () { setState("refresh failed; trying again"); });
  }

  function stop() { if (timer !== null) { clearInterval(timer); timer = null; } }

  function start() {
    stop();
    var seconds = liveSeconds();
    var box = document.getElementById("live");
    if (!seconds) { if (box) { box.closest("label").hidden = true; } return; }
    if (box) { box.checked = stored(LIVE_KEY) !== "off"; }
    timer = setInterval(refresh, seconds * 1000);
  }

  function watchForms() {
    var forms = document.querySelectorAll("main form");
    for (var i = 0; i < forms.length; i++) {
      forms[i].addEventListener("input", function () { dirty = true; });
      forms[i].addEventListener("change", function () { dirty = true; });
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var select = document.getElementById("tz");
    if (select) {
      select.addEventListener("change", function () { store(ZONE_KEY, select.value); showTimes(); });
    }
    var box = document.getElementById("live");
    if (box) {
      box.addEventListener("change", function () { store(LIVE_KEY, box.checked ? "on" : "off"); setState(""); });
    }
    watchForms();
    showTimes();
    start();
  });
}());
