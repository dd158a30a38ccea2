// Refresh the dashboard's figures in place: fetch the fragment, swap it in.
(function () {
  "use strict";
  var body = document.getElementById("dashboard-body");
  if (!body || !window.fetch) { return; }
  var seconds = parseInt(body.dataset.refreshSeconds, 10) || 10;

  function refresh() {
    fetch(body.dataset.fragmentUrl, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        // Sent to the login page: the session ended; reload to show it.
        if (response.redirected) { window.location.reload(); throw new Error("signed out"); }
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) { body.innerHTML = html; })
      .catch(function () {
        var stale = document.getElementById("dashboard-stale");
        if (stale) { stale.hidden = false; }
      })
      .finally(function () { window.setTimeout(refresh, seconds * 1000); });
  }

  window.setTimeout(refresh, seconds * 1000);
})();
