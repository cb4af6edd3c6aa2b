// The relayq dashboard: reads the HTTP API every two seconds and draws queues, lanes and dead
// letters. Every value from the API is set as text (never as HTML): chat text, keys and errors
// are untrusted.
"use strict";

const QUEUES = ["inbound", "hooks", "outbound"];
const STATES = ["pending", "leased", "delivered", "dead", "expired"];
let token = sessionStorage.getItem("relayq-token") || "";

async function api(method, path, body) {
  const headers = {};
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401) {
    document.getElementById("login").hidden = false;
    throw new Error("this API needs its token");
  }
  const data = await r.json();
  if (!r.ok) throw new Error(data.error ? data.error.message : r.statusText);
  return data;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  return td;
}

function button(label, className, action) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.className = className;
  b.addEventListener("click", () => act(action));
  return b;
}

function age(ms) {
  const s = Math.max(0, ms) / 1000;
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function until(at, now) {
  return at > now ? "in " + age(at - now) : "";
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows);
  const empty = document.getElementById(id + "-empty");
  if (empty) empty.hidden = rows.length > 0;
}

function showError(e) {
  const p = document.getElementById("error");
  p.textContent = e ? String(e.message || e) : "";
  p.hidden = !e;
}

async function act(action) {
  try {
    await action();
    showError(null);
  } catch (e) {
    showError(e);
  }
  await refresh();
}

function drawQueues(status, pauses) {
  const now = Date.now();
  const rows = QUEUES.map((queue) => {
    const tr = document.createElement("tr");
    tr.id = "queue-" + queue;
    tr.append(cell(queue));
    for (const state of STATES) {
      const n = status.counts.filter((c) => c.queue === queue && c.state === state).reduce((a, c) => a + c.count, 0);
      tr.append(cell(n, "num " + state));
    }
    const oldest = status.oldest_pending.find((o) => o.queue === queue);
    tr.append(cell(oldest ? age(now - oldest.created_at_ms) : "—"));
    const paused = pauses.some((p) => p.queue === queue && p.key === null);
    const td = document.createElement("td");
    td.append(paused
      ? button("Resume", "resume", () => api("POST", "/v1/resume", { queue }))
      : button("Pause", "pause", () => api("POST", "/v1/pause", { queue })));
    tr.append(td);
    return tr;
  });
  fill("queues", rows);
}

function drawLanes(lanes) {
  const now = Date.now();
  fill("lanes", lanes.map((lane) => {
    const tr = document.createElement("tr");
    tr.dataset.queue = lane.queue;
    tr.dataset.key = lane.key;
    const state = document.createElement("span");
    state.textContent = lane.state;
    state.className = "state " + lane.state.replace(/ /g, "-");
    const stateCell = document.createElement("td");
    stateCell.append(state);
    tr.append(cell(lane.queue), cell(lane.key, "key"), cell(lane.rows, "num"), stateCell,
      cell(until(lane.head_next_attempt_at_ms, now)), cell(lane.head_last_error, "error"));
    const target = { queue: lane.queue, key: lane.key };
    const td = document.createElement("td");
    td.append(lane.paused
      ? button("Resume", "resume", () => api("POST", "/v1/resume", target))
      : button("Pause", "pause", () => api("POST", "/v1/pause", target)));
    tr.append(td);
    return tr;
  }));
}

// The daemons serving the database (several on PostgreSQL), and what each holds.
function drawNodes(nodes) {
  fill("nodes", nodes.map((n) => {
    const tr = document.createElement("tr");
    tr.dataset.node = n.name;
    const state = n.alive ? "alive" : (n.stopped_at ? "stopped" : "lost");
    const pill = document.createElement("span");
    pill.textContent = state;
    pill.className = "state node-" + state;
    const stateCell = document.createElement("td");
    stateCell.append(pill);
    tr.append(cell(n.name, "key"), stateCell,
      cell(age(n.seen_seconds_ago * 1000) + " ago"), cell(n.sessions, "num"), cell(n.leases, "num"),
      cell(n.sources.join(", ") || "—"), cell((n.unready || []).join("; ") || "—", "error"));
    return tr;
  }));
}

// What each session's agent is doing, from its own hook events (see the README's agent states).
function drawAgents(sessions) {
  const now = Date.now();
  fill("agents", sessions.filter((s) => s.state === "active").map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.session = s.key;
    const state = document.createElement("span");
    // With its permission mode: in auto mode no question reaches the chat.
    state.textContent = (s.agent_state || "unknown").replace(/_/g, " ") +
      (s.permission_mode ? " · " + s.permission_mode : "");
    state.className = "state agent-" + (s.agent_state || "unknown");
    const stateCell = document.createElement("td");
    stateCell.append(state);
    // A session started from a chat talks in its topic, when it has one.
    const thread = s.topic || (s.origin && s.origin.thread);
    const chat = s.origin ? s.origin.origin + " " + s.origin.chat + (thread ? " / " + thread : "") : "—";
    tr.append(cell(s.key, "key"), cell(s.agent), cell(s.project || "—", "key"), stateCell,
      cell(s.agent_state_since_ms ? age(now - s.agent_state_since_ms) + " ago" : "—"),
      cell(s.current_turn, "num"), cell(s.node || "—", "key"), cell(chat, "key"),
      cell(s.last_user_input || "", "error"));
    return tr;
  }));
}

// Agents' open permission questions, answered as the chat's buttons answer them (once).
function drawApprovals(approvals) {
  const now = Date.now();
  fill("approvals", approvals.map((a) => {
    const tr = document.createElement("tr");
    tr.id = "approval-" + a.id;
    const path = "/v1/approvals/" + encodeURIComponent(a.id);
    const td = document.createElement("td");
    td.append(
      button("Allow", "allow", () => api("POST", path + "/allow")),
      " ",
      button("Deny", "deny", () => api("POST", path + "/deny")));
    tr.append(cell(a.id, "key"), cell(a.session, "key"), cell(a.agent),
      cell((a.tool || "tool") + ": " + a.action, "error"), cell(until(a.expires_at_ms, now)), td);
    return tr;
  }));
}

function drawDead(page) {
  const now = Date.now();
  document.getElementById("dead-total").textContent = page.total ? page.total + " in all" : "";
  fill("dead", page.rows.map((row) => {
    const tr = document.createElement("tr");
    tr.id = "dead-" + row.id;
    const td = document.createElement("td");
    td.append(
      button("Retry", "retry", () => api("POST", "/v1/dead/retry", { ids: [row.id] })),
      " ",
      button("Purge", "purge", () => api("POST", "/v1/dead/purge", { ids: [row.id] })));
    tr.append(cell(row.id, "num"), cell(row.queue), cell(row.key, "key"), cell(row.attempts, "num"),
      cell(row.finished_at_ms ? age(now - row.finished_at_ms) + " ago" : ""),
      cell(row.last_error || row.reason, "error"), td);
    return tr;
  }));
}

// Draws one set of answers, and says how old they are.
function draw(a) {
  drawQueues(a.status, a.pauses);
  drawNodes(a.status.nodes);
  drawAgents(a.sessions);
  drawApprovals(a.approvals);
  drawLanes(a.lanes);
  drawDead(a.dead);
  updatedAt = Date.now();
  showAge();
}

let updatedAt = null;

function showAge() {
  if (updatedAt === null) return;
  document.getElementById("updated").textContent =
    "updated " + new Date(updatedAt).toLocaleTimeString() + " (" + age(Date.now() - updatedAt) + " ago)";
}

async function refresh() {
  try {
    const [status, lanes, dead, pauses, sessions, approvals] = await Promise.all([
      api("GET", "/v1/status"), api("GET", "/v1/lanes"), api("GET", "/v1/dead?limit=100"), api("GET", "/v1/pauses"),
      api("GET", "/v1/sessions"), api("GET", "/v1/approvals"),
    ]);
    draw({ status, lanes, dead, pauses, sessions, approvals });
  } catch (e) {
    showError(e);
  }
}

document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = document.getElementById("token").value;
  sessionStorage.setItem("relayq-token", token);
  document.getElementById("login").hidden = true;
  showError(null);
  refresh();
});

document.getElementById("lookup").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = document.getElementById("row-id").value.trim();
  const story = document.getElementById("story");
  try {
    story.textContent = JSON.stringify(await api("GET", "/v1/messages/" + encodeURIComponent(id)), null, 2);
  } catch (e) {
    story.textContent = String(e.message || e);
  }
});

document.getElementById("retry-all").addEventListener("click", () => act(() => api("POST", "/v1/dead/retry", { all: true })));
document.getElementById("purge-all").addEventListener("click", () => {
  if (confirm("Delete every dead letter? This cannot be undone.")) {
    act(() => api("POST", "/v1/dead/purge", { all: true }));
  }
});

// Where the API needs no token the page came with its first answers: drawn at once, so the
// page never shows an empty table while the first poll is on its way.
const first = document.getElementById("first");
if (first) draw(JSON.parse(first.textContent));
refresh();
setInterval(refresh, 2000);
setInterval(showAge, 500);
