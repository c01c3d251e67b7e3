// approvald pages: local times, forms submitted once, comments kept while they are typed, and
// a pending approval's page that follows its approval and says when it cannot. Everything
// works without this script.
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

  // A filter form is folded on a phone; where the screen is wide enough it is open (the
  // stylesheet shows it there too, in browsers that can).
  if (window.matchMedia && window.matchMedia("(min-width: 48rem)").matches) {
    document.querySelectorAll("details.filters").forEach(function (d) { d.open = true; });
  }

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

  // Drafts: a comment typed for an approval is kept in this tab (sessionStorage, gone when
  // the tab closes) until a vote with it is recorded, so that a sign-in in between, or a
  // vote refused and sent again, does not lose it. A textarea that comes filled (the page of
  // a vote that was not recorded) is the draft; an empty one gets the draft back.
  function draftKey(id) { return "approvald.draft." + id; }
  function setDraft(id, text) {
    try {
      if (text) { sessionStorage.setItem(draftKey(id), text); } else { sessionStorage.removeItem(draftKey(id)); }
    } catch (e) { /* storage refused: the comment stays on the page only */ }
  }
  function getDraft(id) {
    try { return sessionStorage.getItem(draftKey(id)) || ""; } catch (e) { return ""; }
  }
  var article = document.querySelector("article[data-id]");
  if (article && document.querySelector("#answer.good")) {
    setDraft(article.dataset.id, ""); // the vote is recorded, with its comment
  }
  document.querySelectorAll("textarea[data-draft]").forEach(function (ta) {
    var id = ta.dataset.draft;
    if (ta.value) {
      setDraft(id, ta.value);
    } else {
      ta.value = getDraft(id);
    }
    ta.addEventListener("input", function () { setDraft(id, ta.value); });
  });

  // A pending approval's page waits for its next version. When it comes and nothing is being
  // typed, the page reloads; while a comment is being typed, the form stays as it is and the
  // new outcome is shown beside it. A session refused (401) and a server that cannot be
  // reached are said apart, each with what to do.
  var live = document.getElementById("live");
  if (!live) { return; }
  var url = new URL(live.dataset.wait, location.href);
  var reload = document.getElementById("reload").href;
  var signin = "/ui/signin?next=" + encodeURIComponent(new URL(reload).pathname);
  var comment = document.getElementById("comment");
  var update = document.getElementById("update");
  var state = "live"; // "live", "offline" (the server cannot be reached) or "lost" (the session)
  var delay = 1000;

  function typing() { return comment !== null && comment.value.trim() !== ""; }

  // say puts text, and a link when one is given, in the live line, marked with how it is.
  function say(how, text, linkText, href, linkID) {
    live.className = "live " + how;
    live.textContent = text + " ";
    if (linkText) {
      var a = document.createElement("a");
      a.href = href;
      a.id = linkID;
      a.textContent = linkText;
      live.appendChild(a);
    }
  }
  var following = "This page updates by itself when someone decides.";
  say("waiting", following);

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (resp) {
        if (resp.status === 401) { return { lost: true }; }
        if (!resp.ok) { throw new Error("status " + resp.status); }
        return resp.json();
      })
      .then(function (body) {
        if (leaving) { return; }
        if (body.lost) {
          sessionLost();
          return;
        }
        var was = state;
        state = "live";
        delay = 1000;
        if (body.version > Number(url.searchParams.get("version"))) {
          changed(body);
          return;
        }
        if (was === "lost") {
          // Signed in again elsewhere: this page's form belongs to the ended session.
          if (!typing()) {
            location.assign(reload);
            return;
          }
          say("waiting", "You are signed in again. Reload to vote; your comment is kept.", "Reload", reload, "live-link");
          return;
        }
        if (was === "offline") { say("waiting", following); }
        poll();
      })
      .catch(function () {
        if (leaving) { return; }
        state = "offline";
        say("offline", "The server cannot be reached, so this page may not show the latest decision. Trying again.",
          "Reload", reload, "live-link");
        delay = Math.min(delay * 2, 8000);
        setTimeout(poll, delay);
      });
  }

  // sessionLost says that the session was refused: a vote from this page would not be
  // recorded. It tries again now and then, so that signing in in another tab brings the page
  // back.
  function sessionLost() {
    state = "lost";
    say("lost", "Your session has ended: this page no longer updates, and a vote from it would not be recorded" +
      (typing() ? " (your comment is kept)" : "") + ".", "Sign in again", signin, "live-link");
    setTimeout(poll, 10000);
  }

  // changed shows a new version of the approval: a reload when nothing is being typed,
  // otherwise the outcome beside the form, which keeps its text.
  function changed(body) {
    if (!typing()) {
      location.assign(reload);
      return;
    }
    url.searchParams.set("version", String(body.version));
    article.dataset.status = body.status;
    var status = document.getElementById("status");
    if (status) {
      var badge = document.createElement("span");
      badge.className = "badge " + body.badge.class;
      var icon = document.createElement("span");
      icon.setAttribute("aria-hidden", "true");
      icon.textContent = body.badge.icon;
      badge.append(icon, " " + body.badge.word);
      status.replaceChildren(badge);
    }
    showVotes(body);
    var progress = document.getElementById("progress");
    if (progress && body.stage) { progress.textContent = "Now: " + body.stage + "; " + body.progress; }
    if (body.status !== "pending") {
      var left = document.querySelector(".meta .left");
      if (left) { left.remove(); }
    }
    // What the answer does not carry is marked as older than the rest.
    document.querySelectorAll("section[data-changes]").forEach(function (sec) {
      if (sec.querySelector(".stale")) { return; }
      var note = document.createElement("p");
      note.className = "stale";
      note.append("This part may have changed since the page was loaded. ");
      var a = document.createElement("a");
      a.href = reload;
      a.textContent = "Show the approval";
      note.appendChild(a);
      sec.querySelector("h2").after(note);
    });
    update.hidden = false;
    update.className = "update " + body.badge.class;
    if (body.can_vote) {
      update.textContent = body.said + " Your comment is kept, and you can still vote.";
      poll();
      return;
    }
    update.textContent = body.said + " A vote from this form would not count; your comment is kept here. ";
    var a = document.createElement("a");
    a.href = reload;
    a.textContent = "Show the approval";
    update.appendChild(a);
    document.querySelectorAll("form.decision button").forEach(function (b) { b.disabled = true; });
    say("done", "This page no longer updates.", "Reload", reload, "live-link");
  }

  // showVotes lists the votes of the long-poll's answer as the server renders them.
  function showVotes(body) {
    var count = document.querySelector("#votes-h .count");
    if (count) { count.textContent = body.approvals + " of " + body.required + " needed"; }
    var list = document.querySelector("ul.votes");
    if (!list || !body.votes) { return; }
    var items = body.votes.map(function (v) {
      var approved = v.verdict === "approve";
      var li = document.createElement("li");
      li.className = approved ? "good" : "bad";
      var icon = document.createElement("span");
      icon.setAttribute("aria-hidden", "true");
      icon.textContent = approved ? "✓" : "✕";
      var who = document.createElement("strong");
      who.textContent = v.approver;
      var when = document.createElement("time");
      when.setAttribute("datetime", v.at);
      var d = new Date(v.at);
      when.textContent = isNaN(d) ? v.at : fmt.format(d);
      when.title = v.at;
      li.append(icon, " ", who, (approved ? " approved" : " rejected") + " at ", when);
      if (v.comment) {
        var q = document.createElement("blockquote");
        q.textContent = v.comment;
        li.appendChild(q);
      }
      return li;
    });
    if (items.length === 0) {
      var none = document.createElement("li");
      none.className = "muted";
      none.textContent = "No votes yet.";
      items.push(none);
    }
    list.replaceChildren.apply(list, items);
  }

  poll();
})();
