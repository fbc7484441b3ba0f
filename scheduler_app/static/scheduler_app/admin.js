// Live progress and undo countdowns on the send batch pages.
"use strict";
(function () {
  function countdowns() {
    document.querySelectorAll(".scheduler-countdown[data-deadline]").forEach(function (el) {
      var left = (Date.parse(el.dataset.deadline) - Date.now()) / 1000;
      el.textContent = left > 0 ? "Undo possible for " + left.toFixed(1) + " s" : "Undo window over";
    });
  }
  function refresh(live) {
    fetch(live.dataset.url, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        live.querySelector(".scheduler-progress").value = data.percent;
        live.querySelector(".scheduler-progress-text").textContent = data.percent + "%";
        ["sent", "failed", "skipped", "remaining", "rate"].forEach(function (name) {
          var el = live.querySelector(".p-" + name);
          if (el) { el.textContent = data[name] === null ? "-" : data[name]; }
        });
        live.dataset.status = data.status;
      })
      .catch(function () {});
  }
  document.addEventListener("DOMContentLoaded", function () {
    countdowns();
    setInterval(countdowns, 200);
    document.querySelectorAll(".scheduler-live[data-url]").forEach(function (live) {
      setInterval(function () {
        if (["scheduled", "sending", "paused"].indexOf(live.dataset.status) >= 0) { refresh(live); }
      }, 1000);
    });
  });
})();
