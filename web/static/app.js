// approvald pages: local times, forms submitted once, and a pending approval's page that
// reloads when its approval changes. Everything works without this script.
"use strict";

(function () {
  // Set once a form is being submitted: the page is leaving, and its own vote must not make
  // the long-poll below reload it over the answer.
  var leaving = false;

  // Times: the server writes UTC; show the viewer's zone, keep UTC on hover.
  var fmt = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
  });
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (isNaN(d)) { return; }
    el.title = el.textContent;
    el.textContent = fmt.format(d);
  });

  // A form marked data-once is submitted once: a second click or Enter does nothing, and
  // its buttons are disabled once the submission has started.
  document.querySelectorAll("form[data-once]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (form.dataset.submitted) {
        ev.preventDefault();
        return;
      }
      form.dataset.submitted = "1";
      leaving = true;
      var submitter = ev.submitter;
      setTimeout(function () {
        form.querySelectorAll("button").forEach(function (b) {
          b.disabled = true;
          if (b === submitter) { b.classList.add("busy"); }
        });
      }, 0);
    });
  });

  // A pending approval's page waits for its next version and reloads when it comes.
  var live = document.getElementById("live");
  if (!live) { return; }
  var url = live.dataset.wait;
  live.classList.add("waiting");
  live.firstChild.textContent = "This page updates by itself when someone decides. ";
  var delay = 1000;
  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (resp) {
        if (!resp.ok) { throw new Error("status " + resp.status); }
        return resp.json();
      })
      .then(function (body) {
        if (leaving) { return; }
        delay = 1000;
        var have = Number(new URL(url, location.href).searchParams.get("version"));
        if (body.version > have) {
          // A form being filled in is not thrown away silently: reload to the approval.
          location.assign(document.getElementById("reload").href);
          return;
        }
        poll();
      })
      .catch(function () {
        delay = Math.min(delay * 2, 30000);
        setTimeout(poll, delay);
      });
  }
  poll();
})();
