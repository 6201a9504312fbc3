// a2rl view: sorting and filtering the runs table, paging, diffs on demand, the live view.
// Plain JS, no libraries, no network beyond this server.
"use strict";
(function () {
  function get(url) {
    return fetch(url, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) { throw new Error(url + ": " + r.status); }
      return r;
    });
  }

  // Runs table: click a header to sort, type to filter.
  var table = document.getElementById("runs-table");
  if (table) {
    var body = table.tBodies[0];
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      if (th.dataset.type === "none") { return; }
      th.addEventListener("click", function () {
        var asc = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
          h.removeAttribute("aria-sort");
        });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        var num = th.dataset.type === "num";
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[i].dataset.v !== undefined ? a.cells[i].dataset.v : a.cells[i].textContent;
          var y = b.cells[i].dataset.v !== undefined ? b.cells[i].dataset.v : b.cells[i].textContent;
          if (num) {
            x = x === "" ? -Infinity : parseFloat(x);
            y = y === "" ? -Infinity : parseFloat(y);
            return asc ? x - y : y - x;
          }
          return asc ? String(x).localeCompare(String(y)) : String(y).localeCompare(String(x));
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
    var filter = document.getElementById("filter");
    filter.addEventListener("input", function () {
      var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      Array.prototype.forEach.call(body.rows, function (r) {
        var text = r.textContent.toLowerCase();
        var ok = words.every(function (w) { return text.indexOf(w) >= 0; });
        r.hidden = !ok;
        if (ok) { shown += 1; }
      });
      document.getElementById("shown").textContent = shown + " runs";
    });
    // The audit filter is the server's (`?audit=`): choosing one reloads the list.
    var audit = document.getElementById("audit-filter");
    audit.addEventListener("change", function () { document.getElementById("audit-form").submit(); });
  }

  document.addEventListener("click", function (ev) {
    var t = ev.target;
    // "Show more": fetch the next page in place of the button.
    if (t.classList && t.classList.contains("load-more")) {
      t.disabled = true;
      get(t.dataset.url).then(function (r) { return r.text(); }).then(function (html) {
        var box = t.parentNode;
        box.insertAdjacentHTML("beforebegin", html);
        box.remove();
      });
      return;
    }
    // A link to a call, job or revision on a page not loaded here opens its own page.
    var a = t.closest ? t.closest("a[data-call], a[data-job], a[data-page]") : null;
    if (a) {
      var id = a.getAttribute("href").slice(1);
      var el = document.getElementById(id);
      if (el) {
        if (el.tagName === "DETAILS") { el.open = true; }
        return;
      }
      ev.preventDefault();
      window.location.href = a.dataset.call || a.dataset.job || a.dataset.page;
    }
  });

  // Diffs load when a revision is opened.
  document.addEventListener("toggle", function (ev) {
    var d = ev.target;
    if (!d.open || !d.dataset || !d.dataset.diff || d.dataset.loaded) { return; }
    d.dataset.loaded = "1";
    get(d.dataset.diff).then(function (r) { return r.text(); }).then(function (html) {
      d.querySelector(".diff-body").outerHTML = html;
    });
  }, true);

  // Opening a page at #call-N or #job-N opens that entry.
  function openHash() {
    var el = window.location.hash && document.getElementById(window.location.hash.slice(1));
    if (el && el.tagName === "DETAILS") { el.open = true; }
  }
  window.addEventListener("hashchange", openHash);
  openHash();

  // The report's sections read the whole run: they arrive after the first view.
  var top = document.getElementById("report-top");
  if (top) {
    get(top.dataset.url).then(function (r) { return r.json(); }).then(function (doc) {
      top.innerHTML = doc.top;
      document.getElementById("report-bottom").innerHTML = doc.bottom;
      top.dataset.loaded = "1";
      openHash();
      if (window.location.hash) {
        var el = document.getElementById(window.location.hash.slice(1));
        if (el) { el.scrollIntoView(); }
      }
    }).catch(function (e) {
      top.innerHTML = '<p class="bad">the report could not be computed: ' + e.message + "</p>";
    });
  }

  // The live page's clock: the server's elapsed and remaining time (on load and at each
  // poll), counted on between polls by this page's own monotonic clock.
  function dur(s) {
    if (s < 10) { return s.toFixed(1) + "s"; }
    if (s < 60) { return Math.round(s) + "s"; }
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    if (s < 3600) { return Math.floor(s / 60) + "m" + pad(Math.floor(s % 60)) + "s"; }
    return Math.floor(s / 3600) + "h" + pad(Math.floor(s % 3600 / 60)) + "m";
  }
  var clockBox = document.getElementById("live-clock");
  var clock = null;
  function setClock(elapsed, remaining, deadline) {
    clock = {elapsed: elapsed, remaining: remaining, at: performance.now(), ticking: true};
    if (deadline !== undefined) {
      document.getElementById("live-deadline").textContent = deadline === null ?
        "none yet (the clock starts at the first tool call)" :
        deadline.replace("T", " ").replace(/\.\d+/, "").replace(/(\+00:00|Z)$/, " UTC");
    }
  }
  function tick() {
    if (!clock) { return; }
    var gone = clock.ticking ? (performance.now() - clock.at) / 1000 : 0;
    if (clock.elapsed !== null) {
      document.getElementById("live-elapsed").textContent = dur(clock.elapsed + gone);
    }
    document.getElementById("live-remaining").textContent =
      dur(Math.max(clock.remaining - (clock.elapsed === null ? 0 : gone), 0));
  }
  if (clockBox) {
    setClock(clockBox.dataset.elapsed === "" ? null : parseFloat(clockBox.dataset.elapsed),
             parseFloat(clockBox.dataset.remaining));
    window.setInterval(tick, 1000);
  }

  // Live: poll the run's activity until the run has ended.
  var live = document.getElementById("live");
  if (live) {
    var after = live.dataset.after;
    var run = live.dataset.run;
    var poll = function () {
      get("/run/" + encodeURIComponent(run) + "/activity?after=" + after +
          "&jobs_from=" + live.dataset.jobs)
        .then(function (r) { return r.json(); }).then(function (doc) {
          var a = doc.activity;
          after = doc.last_call_id;
          if (doc.calls_html.trim()) {
            document.getElementById("live-calls").insertAdjacentHTML("beforeend", doc.calls_html);
          }
          document.getElementById("live-jobs").innerHTML = doc.jobs_html;
          document.getElementById("live-counts").textContent = a.tool_calls + " tool calls · " +
            a.jobs + " jobs (" + a.jobs_running + " running) · " + a.submissions +
            " submissions · " + a.graded + " evaluations";
          var scores = doc.scores.map(function (s) {
            return s.submission + " " + s.status + s.scores.map(function (e) {
              return " " + e.split + " " + (e.score === null ? "–" : e.score.toFixed(3));
            }).join("");
          });
          document.getElementById("live-scores").textContent = scores.join(" · ");
          if (doc.clock && clockBox) {
            setClock(doc.clock.elapsed_s, doc.clock.remaining_s, doc.clock.deadline);
            clock.ticking = !doc.ended;  // an ended run's clock stands still
            tick();
          }
          if (doc.ended) {  // finished, or failed: nothing more will come
            live.querySelector(".dot").style.animation = "none";
            live.querySelector("b").textContent = a.status === "finished" ? "Finished" :
              "Ended (" + a.status + ")";
            live.insertAdjacentHTML("beforeend",
              ' <a href="">reload for the final report</a>');
            return;
          }
          window.setTimeout(poll, 1500);
        }).catch(function () { window.setTimeout(poll, 5000); });
    };
    window.setTimeout(poll, 1000);
  }
}());
