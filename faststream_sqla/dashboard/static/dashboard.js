// The pages' changes go to the JSON API: this adds the CSRF token the API expects with
// the session cookie, sends JSON where a button or form asks for it (hx-ext="json-body"),
// asks before a move by filter with the count the API previews, shows each answer, and
// refreshes the parts of the page that show what changed.
(function () {
  "use strict";
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const api = document.body.dataset.api;
  const numbers = new Set(["ids", "max_concurrency", "channel_max_concurrency"]);
  const lists = new Set(["ids", "states"]);
  const flags = new Set(["confirm", "all"]);
  // the body each JSON request sent, for the confirmation that follows a preview
  const lastBody = new WeakMap();

  window.liveUpdates = function () {
    const toggle = document.getElementById("live-updates");
    return !toggle || toggle.checked;
  };

  function headers() {
    const sent = { "Content-Type": "application/json" };
    if (csrf) sent["X-CSRF-Token"] = csrf;
    return sent;
  }

  // form fields as the API's JSON: empty fields left out (or null, on a form marked
  // data-empty="null": a limit removed), ids as a list of numbers, flags as booleans
  function jsonOf(parameters, emptyIsNull) {
    const body = {};
    for (const key of new Set(parameters.keys())) {
      let values = parameters.getAll(key).filter((v) => v !== "");
      if (numbers.has(key)) values = values.map(Number);
      if (flags.has(key)) values = values.map((v) => v === true || v === "true");
      if (lists.has(key)) {
        if (values.length) body[key] = values;
      } else if (values.length) {
        body[key] = values[0];
      } else if (emptyIsNull) {
        body[key] = null;
      }
    }
    return body;
  }

  htmx.defineExtension("json-body", {
    onEvent: function (name, event) {
      if (name === "htmx:configRequest") {
        event.detail.headers["Content-Type"] = "application/json";
      }
      return true;
    },
    encodeParameters: function (xhr, parameters, element) {
      xhr.overrideMimeType("text/json");
      const form = element.closest("form");
      return JSON.stringify(jsonOf(parameters, form && form.dataset.empty === "null"));
    },
  });

  document.body.addEventListener("htmx:configRequest", function (event) {
    if (csrf) event.detail.headers["X-CSRF-Token"] = csrf;
  });

  function show(text, failed) {
    const flash = document.getElementById("flash");
    flash.textContent = text;
    flash.className = failed ? "error" : "done";
  }

  function summary(answer) {
    if (answer.moved !== undefined) {
      const moved = Object.keys(answer.moved).length;
      const skipped = Object.keys(answer.skipped).length;
      return `moved ${moved}` + (skipped ? `, skipped ${skipped}` : "");
    }
    if (answer.changed !== undefined) return answer.changed ? "done" : "nothing to change";
    if (answer.deleted !== undefined) return `deleted ${answer.deleted}`;
    return "saved";
  }

  // a move by filter answers first with how many it would move: ask, then confirm it
  async function confirmMove(element, request, answer) {
    const n = answer.would_move.value + (answer.would_move.exact ? "" : "+");
    const verb = element.dataset.verb || "Move";
    if (!window.confirm(`${verb} ${n} messages?`)) {
      show("nothing moved", false);
      return;
    }
    const body = Object.assign(JSON.parse(request.body), { confirm: true });
    const sent = await fetch(request.path, {
      method: "POST", headers: headers(), body: JSON.stringify(body), credentials: "same-origin",
    });
    const done = await sent.json();
    show(sent.ok ? summary(done) : done.error, !sent.ok);
    htmx.trigger(document.body, "refresh");
  }

  document.body.addEventListener("htmx:afterRequest", function (event) {
    const xhr = event.detail.xhr;
    const path = event.detail.requestConfig.path;
    if (!path.startsWith(api)) return;
    let answer = {};
    try { answer = JSON.parse(xhr.responseText); } catch (e) { answer = {}; }
    if (xhr.status >= 400) {
      show(answer.error || `failed (${xhr.status})`, true);
      return;
    }
    if (answer.confirmed === false && answer.would_move) {
      confirmMove(event.detail.elt, { path: path, body: lastBody.get(event.detail.elt) || "{}" }, answer);
      return;
    }
    show(summary(answer), false);
    htmx.trigger(document.body, "refresh");
  });

  document.body.addEventListener("htmx:beforeSend", function (event) {
    const parameters = event.detail.requestConfig.formData;
    if (parameters) {
      const form = event.detail.elt.closest("form");
      lastBody.set(event.detail.elt, JSON.stringify(jsonOf(parameters, form && form.dataset.empty === "null")));
    }
  });
})();
