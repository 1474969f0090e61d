// The dashboard's only script: one EventSource for live updates, approve/reject buttons,
// and a ticking training clock. All HTML it inserts was rendered (and escaped) by the server.
"use strict";

// Where the action token lives in this tab (never sent anywhere but our own POSTs).
const TOKEN_KEY = "autoresearch-dashboard-token";

function takeTokenFromHash() {
  // The start-up message links to /#token=...: keep it in this tab and drop it from the URL.
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function token() {
  const input = document.getElementById("token");
  return (input && input.value) || sessionStorage.getItem(TOKEN_KEY) || "";
}

function setMessage(text, isError) {
  const el = document.getElementById("queue-msg");
  if (!el) return;
  el.textContent = text;
  el.classList.toggle("err", !!isError);
}

async function decide(button) {
  const item = button.closest(".qitem");
  const note = item ? (item.querySelector(".note") || {}).value || "" : "";
  const body = { tag: document.body.dataset.tag, id: Number(button.dataset.id),
                 decision: button.dataset.decision, note: note };
  button.disabled = true;
  try {
    const resp = await fetch("/api/queue/decide", {
      method: "POST", headers: { "Content-Type": "application/json", "X-Dashboard-Token": token() },
      body: JSON.stringify(body) });
    const answer = await resp.json();
    if (!resp.ok) {
      setMessage(answer.error || ("refused: " + resp.status), true);
      return;
    }
    document.getElementById("queue").innerHTML = answer.html;
    setMessage("#" + answer.item.id + " " + answer.item.status, false);
  } catch (err) {
    setMessage("request failed: " + err, true);
  } finally {
    button.disabled = false;
  }
}

function addRows(payload) {
  const empty = document.getElementById("no-experiments");
  if (empty) empty.remove();
  document.getElementById("count").textContent = payload.count;
  document.body.dataset.complete = payload.count;
  if (payload.chart) document.getElementById("chart").innerHTML = payload.chart;
  if (document.body.dataset.page !== "1") {
    // Older pages stay put; say that there is something new.
    const note = document.getElementById("new-rows");
    note.hidden = false;
    note.textContent = "New results arrived: see page 1.";
    return;
  }
  const tbody = document.getElementById("rows");
  // A half-written row shown at load time is replaced by its finished version.
  tbody.querySelectorAll("tr.partial").forEach((tr) => tr.remove());
  const tmp = document.createElement("tbody");
  tmp.innerHTML = payload.html;
  const fresh = Array.from(tmp.children);
  fresh.forEach((tr) => tr.classList.add("fresh"));
  tbody.prepend(...fresh);
}

function connect() {
  const url = document.body.dataset.stream;
  if (!url || !window.EventSource) return;
  const live = document.getElementById("live");
  const es = new EventSource(url);
  es.addEventListener("open", () => live && (live.className = "live on"));
  es.addEventListener("error", () => live && (live.className = "live off"));
  es.addEventListener("rows", (e) => addRows(JSON.parse(e.data)));
  es.addEventListener("now", (e) => { document.getElementById("now").innerHTML = JSON.parse(e.data).html; tick(); });
  es.addEventListener("queue", (e) => { document.getElementById("queue").innerHTML = JSON.parse(e.data).html; });
  es.addEventListener("reset", () => location.reload());
}

function fmtDur(s) {
  const neg = s < 0; s = Math.round(Math.abs(s));
  const t = s >= 3600 ? `${Math.floor(s / 3600)}h ${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`
          : s >= 60 ? `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s` : `${s}s`;
  return (neg ? "-" : "") + t;
}

let clockOffset = null;   // server clock minus ours, from the last rendered panel
function tick() {
  document.querySelectorAll("[data-started]").forEach((el) => {
    if (clockOffset === null || el.dataset.seen !== "1") {
      clockOffset = Number(el.dataset.serverNow) - Date.now() / 1000;
      el.dataset.seen = "1";
    }
    const elapsed = Date.now() / 1000 + clockOffset - Number(el.dataset.started);
    el.querySelector(".elapsed").textContent = fmtDur(elapsed);
    if (el.dataset.budget) {
      const left = Number(el.dataset.budget) - elapsed;
      el.querySelector(".remaining").textContent = left >= 0 ? `${fmtDur(left)} left`
        : `budget reached ${fmtDur(-left)} ago (the clock includes start-up)`;
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromHash();
  const input = document.getElementById("token");
  if (input) {
    input.value = sessionStorage.getItem(TOKEN_KEY) || "";
    input.addEventListener("change", () => sessionStorage.setItem(TOKEN_KEY, input.value));
  }
  document.addEventListener("click", (e) => {
    const b = e.target.closest("button.decide");
    if (b) decide(b);
  });
  connect();
  setInterval(tick, 1000);
});
