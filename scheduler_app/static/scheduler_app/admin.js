// The send batch page follows its batch: progress, status, reason, undo box and action buttons;
// the schedule confirmation guards its button.
"use strict";
(function () {
  var LIVE = ["scheduled", "sending", "paused"];

  function countdowns() {
    document.querySelectorAll(".scheduler-countdown[data-deadline]").forEach(function (el) {
      var left = (Date.parse(el.dataset.deadline) - Date.now()) / 1000;
      el.textContent = left > 0 ? "Undo possible for " + minutesSeconds(left) : "Undo window over";
    });
  }
  function minutesSeconds(seconds) {
    var whole = Math.ceil(seconds), minutes = Math.floor(whole / 60), rest = whole % 60;
    return minutes ? minutes + " min " + rest + " s" : rest + " s";
  }
  // The schedule confirmation: "Yes, schedule" stays disabled until every failing item is
  // ticked to relax (the server refuses the rest anyway).
  function relaxGuards() {
    document.querySelectorAll("button.confirm-action[data-relax-all]").forEach(function (button) {
      var boxes = button.form.querySelectorAll('input[name="relax"]');
      function update() {
        button.disabled = Array.prototype.some.call(boxes, function (box) { return !box.checked; });
      }
      button.form.addEventListener("change", update);
      update();
    });
  }
  function setText(selector, text) {
    var el = document.querySelector(selector);
    if (el && el.textContent !== text) { el.textContent = text; }
  }
  function render(live, data) {
    live.querySelector(".scheduler-progress").value = data.percent;
    live.querySelector(".scheduler-progress-text").textContent = data.percent + "%";
    ["sent", "failed", "skipped", "remaining", "rate"].forEach(function (name) {
      var el = live.querySelector(".p-" + name);
      if (el) { el.textContent = data[name] === null ? "-" : data[name]; }
    });
    setText(".field-status .readonly", data.status);
    setText(".field-status_reason .readonly", data.status_reason);
    var undo = document.querySelector(".undo-box");
    if (undo) {
      undo.hidden = data.actions.indexOf("undo") < 0;
      undo.querySelector(".scheduler-countdown").dataset.deadline = data.undo_deadline || "";
    }
    document.querySelectorAll(".batch-action[data-action]").forEach(function (form) {
      form.hidden = data.actions.indexOf(form.dataset.action) < 0;
    });
    live.dataset.status = data.status;
  }
  function refresh(live) {
    fetch(live.dataset.url, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (data) { render(live, data); })
      .catch(function () {});
  }
  // A page part marked .scheduler-refresh (the overview) is fetched again and replaced
  // every data-interval ms, without reloading the page.
  function liveParts() {
    document.querySelectorAll(".scheduler-refresh[id]").forEach(function (part) {
      setInterval(function () {
        fetch(window.location.href, { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
          .then(function (html) {
            var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(part.id);
            if (fresh) { part.innerHTML = fresh.innerHTML; }
          })
          .catch(function () {});
      }, Number(part.dataset.interval) || 5000);
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    liveParts();
    countdowns();
    setInterval(countdowns, 200);
    relaxGuards();
    document.querySelectorAll(".scheduler-live[data-url]").forEach(function (live) {
      setInterval(function () {
        if (LIVE.indexOf(live.dataset.status) >= 0) { refresh(live); }
      }, 1000);
    });
  });
})();
