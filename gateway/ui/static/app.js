// Autarch UI: renders the state the page was served with, then follows /api/events from the sequence read
// before that state. Every read and action after the first paint goes through the public JSON API.
// Text from agents and users only ever becomes DOM text (never HTML), so a card cannot inject markup.

const STATE = JSON.parse(document.getElementById("state").textContent);
const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const MAIN = document.getElementById("main");
const STAGES = ["scoping", "research", "planning", "execution", "review"];
const RECORDED = [
  "workflow:created", "workflow:approval_needed", "workflow:stage_changed", "workflow:changes_requested",
  "workflow:fix_round_opened", "workflow:completed", "workflow:error", "workflow:note_taken", "workflow:baseline_recorded",
  "workflow:review_comment_added", "workflow:session_assigned", "workflow:halted", "workflow:resumed",
  "workflow:abandoned", "preflight:started", "preflight:completed", "pulse:started", "pulse:completion_rejected",
  "pulse:completed", "session:started", "session:completed", "session:error", "turn:started",
  "turn:tool_started", "turn:tool_completed", "turn:completed", "swarm:started", "swarm:finished",
  "bead:created", "bead:updated", "bead:claimed", "bead:closed", "bead:bounced", "bead:reopened", "bead:evidence",
  "worker:joined", "worker:status", "worker:handoff", "lease:granted", "lease:released", "lease:conflict",
  "mail:posted", "loop:started", "loop:iteration_started", "loop:iteration_completed", "loop:paused",
  "loop:resumed", "loop:completed", "loop:blocked", "loop:failed", "loop:aborted",
];
const DELTAS = ["turn:message_delta", "turn:thought_delta"];
const TOOL_CALLS_SHOWN = 200; // as the server's first page: the newest of a turn (the session API has all)

// What tests and the benchmark read: the last event applied and when each reached the DOM.
const probe = (window.autarch = { lastId: STATE.since, applied: 0, timings: [] });

// --- small DOM helpers -------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const human = (key) => key.replace(/([a-z])([A-Z])/g, "$1 $2").replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase());
const money = (usd) => `$${(usd || 0).toFixed(usd >= 1 ? 2 : 4)}`;
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
const short = (text, n = 80) => (text && text.length > n ? text.slice(0, n - 1) + "…" : text || "");
const badge = (status) => h("span", { class: `badge s-${status}` }, String(status).replace(/_/g, " "));
const pretty = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));

function stageOf(wf) {
  if (wf.stage === "done") return { k: 5, label: "done" };
  const i = STAGES.indexOf(wf.stage);
  return { k: i + 1, label: wf.stage };
}

// --- the API, with the session cookie and the CSRF token ---------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (method !== "GET") init.headers["X-CSRF-Token"] = CSRF;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const reply = await fetch(path, init);
  const data = reply.headers.get("content-type")?.includes("json") ? await reply.json() : null;
  if (!reply.ok) throw new ApiError(reply.status, data);
  return data;
}

// A button that calls the API, disables itself meanwhile, and shows the error next to it.
function action(label, run, cls = "") {
  const alert = h("span", { role: "alert", class: "error" });
  const button = h("button", { type: "button", class: cls }, label);
  button.addEventListener("click", async () => {
    button.disabled = true;
    alert.textContent = "";
    try {
      await run();
    } catch (err) {
      alert.textContent = err.message;
    } finally {
      button.disabled = false;
    }
  });
  return [button, alert];
}

// --- the live stream ---------------------------------------------------------------------------------------

function follow(query, onRecorded, onDelta) {
  const live = document.getElementById("live");
  let source = null;
  const open = () => {
    // since = the last event applied; an EventSource reconnecting by itself sends Last-Event-ID, which wins.
    source = new EventSource(`/api/events?${query}&since=${probe.lastId}`);
    source.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
    source.addEventListener("error", () => {
      live.textContent = "reconnecting…";
      live.className = "live off";
      if (source.readyState === EventSource.CLOSED) setTimeout(open, 1000);
    });
    for (const type of RECORDED) {
      source.addEventListener(type, (e) => {
        const id = Number(e.lastEventId);
        if (!(id > probe.lastId)) return; // already applied (the page's own state, or a replay)
        probe.lastId = id;
        probe.applied += 1;
        document.body.dataset.lastEvent = String(id);
        onRecorded(type, JSON.parse(e.data), id);
      });
    }
    if (onDelta) for (const type of DELTAS) source.addEventListener(type, (e) => onDelta(type, JSON.parse(e.data)));
  };
  open();
  // What a dropped connection does, on demand (tests): close, then reopen after the last event applied.
  probe.disconnect = () => {
    source.close();
    live.textContent = "reconnecting…";
    live.className = "live off";
    setTimeout(open, 1000);
  };
}

// Runs ``fn`` once things settle; a failed run (the network is away) is tried again until one succeeds.
function debounce(fn, ms) {
  let timer = null;
  let pending = [];
  const run = async () => {
    const items = pending;
    pending = [];
    try {
      await fn(items);
      const live = document.getElementById("live");
      if (live.textContent.endsWith("retrying…")) { live.textContent = "live"; live.className = "live on"; }
    } catch (err) {
      pending = items.concat(pending);
      const live = document.getElementById("live");
      live.textContent = `${err.message}: retrying…`;
      live.className = "live off";
      clearTimeout(timer);
      timer = setTimeout(run, 2000);
    }
  };
  return (item) => {
    if (item !== undefined) pending.push(item);
    clearTimeout(timer);
    timer = setTimeout(run, ms);
  };
}

// Re-rendering a panel must not lose what someone is typing in it, nor their focus.
function keepInputs(container, render) {
  const values = {};
  for (const field of container.querySelectorAll("textarea[id], input[type=text][id]")) values[field.id] = field.value;
  const checked = {};
  for (const box of container.querySelectorAll("input[type=checkbox][id]")) checked[box.id] = box.checked;
  const opened = {};
  for (const box of container.querySelectorAll("details.keep[id]")) opened[box.id] = box.open;
  const focused = document.activeElement && container.contains(document.activeElement) ? document.activeElement.id : null;
  render();
  for (const [id, open] of Object.entries(opened)) {
    const box = document.getElementById(id);
    if (box) box.open = open;
  }
  for (const [id, value] of Object.entries(values)) {
    const field = document.getElementById(id);
    if (field && value) field.value = value;
  }
  for (const [id, on] of Object.entries(checked)) {
    const box = document.getElementById(id);
    if (box) box.checked = on;
  }
  if (focused) document.getElementById(focused)?.focus();
}

// --- workflows list ----------------------------------------------------------------------------------------

function workflowsPage() {
  let workflows = STATE.workflows;
  let totalWorkflows = STATE.total ?? workflows.length;
  const SHOWN = 500;
  let costs = STATE.costs;
  const body = h("tbody");
  const count = h("span", { class: "muted" });
  const renderRows = () => {
    body.replaceChildren(...[...workflows].reverse().map((wf) => {
      const { k, label } = stageOf(wf);
      const pulses = (wf.pulses_count ? ` · pulses ${wf.pulses_succeeded}/${wf.pulses_count}` : "")
        + (wf.fix_rounds ? ` · ${wf.fix_rounds} fix round${wf.fix_rounds === 1 ? "" : "s"}` : "");
      return h("tr", { "data-workflow": wf.id },
        h("td", {}, h("a", { href: `/workflows/${wf.id}` }, wf.title), h("div", { class: "muted mono hide-narrow" }, wf.repo)),
        h("td", {}, label),
        h("td", {}, badge(wf.status)),
        h("td", {}, `${k}/5${pulses}`),
        h("td", { class: "hide-narrow" }, money(costs[wf.id])),
        h("td", { class: "hide-narrow" }, when(wf.updated_at)));
    }));
    count.textContent = totalWorkflows > workflows.length
      ? `the newest ${workflows.length} of ${totalWorkflows} workflows`
      : `${workflows.length} workflow${workflows.length === 1 ? "" : "s"}`;
  };
  const refresh = debounce(async () => {
    // The newest SHOWN workflows (the list is in creation order): a page the bus carries however many there are.
    const { total } = await api("GET", "/api/workflows?limit=1");
    const list = await api("GET", `/api/workflows?offset=${Math.max(0, total - SHOWN)}&limit=${SHOWN}`);
    // The costs of the shown workflows only (the runner keeps a total per workflow): listing every session
    // instead grows with all history, and past some 60,000 sessions is more than the bus carries.
    const shown = await api("POST", "/api/workflows/costs", { workflow_ids: list.items.map((wf) => wf.id) });
    workflows = list.items;
    totalWorkflows = list.total;
    costs = shown.costs;
    renderRows();
    stamp();
  }, 150);
  let stampIds = [];
  const stamp = () => { for (const [id, type, at] of stampIds) probe.timings.push([id, type, at, Date.now()]); stampIds = []; };

  const alert = h("p", { role: "alert", class: "error" });
  const form = h("form", { class: "panel", id: "start-form" },
    h("h2", {}, "Start a workflow"),
    h("label", { for: "wf-title" }, "Title"), h("input", { type: "text", id: "wf-title", name: "title", required: true, maxlength: 200 }),
    h("label", { for: "wf-request" }, "Request"), h("textarea", { id: "wf-request", name: "request", required: true }),
    h("label", { for: "wf-repo" }, "Repository (a path on the gateway's machine)"),
    h("input", { type: "text", id: "wf-repo", name: "repo", required: true, placeholder: STATE.cwd }),
    h("label", { for: "wf-base" }, "Base branch"), h("input", { type: "text", id: "wf-base", name: "base_branch", value: "main" }),
    h("details", {}, h("summary", {}, "More"),
      h("label", { for: "wf-script" }, "Scripted-model scenario (tests and demos; real models ignore it)"),
      h("input", { type: "text", id: "wf-script", name: "script" })),
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Start"), alert));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(form).entries());
    if (!data.script) delete data.script;
    if (!data.base_branch) delete data.base_branch;
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    alert.textContent = "";
    try {
      const wf = await api("POST", "/api/workflows", data);
      location.assign(`/workflows/${wf.id}`);
    } catch (err) {
      alert.textContent = err.message;
      button.disabled = false;
    }
  });

  MAIN.replaceChildren(
    h("h1", {}, "Workflows ", count),
    h("div", { class: "panel" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, "Workflow"), h("th", {}, "Stage"), h("th", {}, "Status"),
        h("th", {}, "Progress"), h("th", { class: "hide-narrow" }, "Cost"), h("th", { class: "hide-narrow" }, "Updated"))),
      body)),
    form);
  renderRows();
  follow("deltas=false", (type, event, id) => {
    if (type.startsWith("workflow:") || type.startsWith("pulse:") || type === "turn:completed") {
      stampIds.push([id, type, event.occurred_at]);
      refresh();
    }
  });
}

// --- cards -------------------------------------------------------------------------------------------------

function value(v) {
  if (v === null || v === undefined || v === "" || (Array.isArray(v) && v.length === 0)) return null;
  if (Array.isArray(v)) {
    if (v.every((x) => typeof x !== "object" || x === null)) return h("ul", {}, v.map((x) => h("li", {}, String(x))));
    return h("div", {}, v.map((x) => h("div", { class: "sub" }, value(x))));
  }
  if (typeof v === "object") {
    const entries = Object.entries(v).map(([k, x]) => [k, value(x)]).filter(([, x]) => x !== null);
    return h("dl", {}, entries.map(([k, x]) => [h("dt", {}, human(k)), h("dd", {}, x)]));
  }
  if (typeof v === "string") return h("div", { class: "msg" }, v);
  return h("span", {}, String(v));
}

const where = (c) => (c.file_path ? `${c.file_path}${c.start_line ? `:${c.start_line}${c.end_line && c.end_line !== c.start_line ? `-${c.end_line}` : ""}` : ""}` : "");

function reviewComment(c) {
  const at = where(c);
  return h("div", { class: "comment", "data-comment": c.comment_id },
    h("strong", {}, `${c.severity} · ${c.category}`), at ? [" ", h("span", { class: "mono" }, at)] : null,
    h("div", {}, c.description));
}

const CARD_STAGE = { scope: "scoping", research: "research", plan: "planning", review: "review" };

function cardView(name, card, wf, cards, onChange) {
  const stage = CARD_STAGE[name];
  const awaiting = wf.awaiting_approval && wf.stage === stage;
  let content;
  if (name === "review") {
    content = h("div", {},
      card.recommendation ? h("p", {}, h("strong", {}, "Recommendation: "), card.recommendation) : null,
      card.summary ? h("div", { class: "msg" }, card.summary) : null,
      h("h3", {}, `Comments (${card.comments.length})`), card.comments.map(reviewComment));
  } else {
    content = value(card);
  }
  const section = h("details", { class: "panel card", id: `card-${name}`, open: awaiting || null },
    h("summary", {}, h("strong", {}, human(name)), " ", awaiting ? badge("awaiting_approval") : null),
    content);
  if (awaiting) section.append(approvalForm(name, card, wf, onChange));
  return section;
}

function approvalForm(name, card, wf, onChange) {
  const form = h("div", { class: "approval" });
  let path = null;
  if (name === "scope") {
    const recommended = card.recommended_path || "full";
    path = recommended;
    form.append(h("fieldset", {}, h("legend", {}, "Path"),
      ["quick", "full"].map((choice) => h("label", { class: "inline" },
        h("input", { type: "radio", name: "path", value: choice, checked: choice === recommended || null,
          onchange: () => { path = choice; } }),
        choice === "quick" ? "Quick: one pulse from the scope" : "Full: research and plan first",
        choice === recommended ? h("span", { class: "muted" }, " (recommended)") : null))));
  }
  const feedback = h("textarea", { id: `feedback-${name}` });
  form.append(
    h("div", { class: "row" }, ...action("Approve", async () => {
      onChange(await api("POST", `/api/workflows/${wf.id}/approve`, path ? { path } : undefined));
    }, "primary")),
    h("details", { class: "changes keep", id: `changes-${name}` }, h("summary", {}, "Request changes"),
      name === "review" ? h("p", { class: "muted" }, "The review agent reviews again with your feedback; the code is not changed.") : null,
      h("label", { for: feedback.id }, "What should change"), feedback,
      h("div", { class: "row" }, ...action("Send feedback", async () => {
        onChange(await api("POST", `/api/workflows/${wf.id}/request-changes`, { feedback: feedback.value }));
      }))));
  if (name === "review" && card.comments.length) form.append(fixForm(card, wf, onChange));
  form.append(abandonForm(wf, wf.card_version, onChange));
  return form;
}

// Ending a workflow for good is two steps: open the form, then confirm. The version names the card or halt the
// user is looking at, so a click on a page that is behind cannot end a workflow that has moved on (409).
function abandonForm(wf, version, onChange) {
  const reason = h("input", { id: `abandon-reason-${version}`, type: "text", size: "40" });
  return h("details", { class: "abandon", id: `abandon-${version}` }, h("summary", {}, "Abandon this workflow"),
    h("p", { class: "muted" }, "It ends for good: its agents are closed and its worktree removed; its branch stays."),
    h("label", { for: reason.id }, "Why (optional)"), reason,
    h("div", { class: "row" }, ...action("Abandon for good", async () => {
      onChange(await api("POST", `/api/workflows/${wf.id}/abandon`,
        reason.value.trim() ? { version, reason: reason.value.trim() } : { version }));
    }, "danger")));
}

const FIX_FEEDBACK = "Fix the review's comments.";

// At review: send the checked comments back as fix pulses (one per file), then the review runs again.
function fixForm(card, wf, onChange) {
  const boxes = card.comments.map((c) => h("input", { type: "checkbox", id: `fix-${c.comment_id}`, checked: true, "data-fix": c.comment_id }));
  const note = h("textarea", { id: "fix-feedback", placeholder: FIX_FEEDBACK });
  return h("details", { class: "changes keep", id: "fix-review" }, h("summary", {}, "Send the work back to fix the comments"),
    h("p", { class: "muted" }, "A fix pulse per file fixes the checked comments, one commit each on the branch; then the review runs again on the whole branch."),
    h("fieldset", {}, h("legend", {}, "Comments to fix"),
      card.comments.map((c, i) => h("label", { class: "fix-choice", for: boxes[i].id }, boxes[i], ` ${c.severity} · ${where(c) || "the change as a whole"}: ${short(c.description, 100)}`))),
    h("label", { for: note.id }, "Feedback for the fix pulses"), note,
    h("div", { class: "row" }, ...action("Fix the comments", async () => {
      const chosen = boxes.filter((b) => b.checked).map((b) => b.dataset.fix);
      if (!chosen.length) throw new Error("Check at least one comment to fix.");
      const fix = chosen.length === boxes.length ? true : chosen;
      onChange(await api("POST", `/api/workflows/${wf.id}/request-changes`, { feedback: note.value.trim() ? note.value : FIX_FEEDBACK, fix }));
    })));
}

// The change requests at review that sent the work back: what each sent, and its fix pulses.
function fixRounds(rounds) {
  return h("details", { class: "panel keep", id: "fix-rounds" }, h("summary", {}, `Review rounds sent back (${rounds.length})`),
    rounds.map((r) => {
      const sent = new Set(r.comment_ids);
      return h("section", { class: "sub", "data-round": r.round },
        h("h3", {}, `Fix round ${r.round}`, r.review.recommendation ? ` · the review recommended ${r.review.recommendation}` : ""),
        h("div", { class: "msg" }, r.feedback),
        h("ul", {}, r.pulses.map((p) => h("li", {}, h("strong", {}, p.pulse_id), " ", p.file_path || "comments on no file",
          ` (${p.comment_ids.length} comment${p.comment_ids.length === 1 ? "" : "s"})`))),
        r.review.comments.filter((c) => sent.has(c.comment_id)).map(reviewComment));
    }));
}

// --- halts -------------------------------------------------------------------------------------------------

function haltPanel(wf, onChange) {
  const halt = wf.halt;
  const panel = h("section", { class: "panel halt", id: "halt", "aria-labelledby": "halt-title" },
    h("h2", { id: "halt-title" }, "Halted: ", human(halt.reason)),
    h("div", { class: "msg" }, halt.message),
    halt.pulse_id ? h("p", { class: "muted" }, `Pulse ${halt.pulse_id}`) : null);
  const post = (verb, body) => async () => onChange(await api("POST", `/api/workflows/${wf.id}/${verb}`, body()));
  const message = (label) => {
    const box = h("textarea", { id: `halt-message-${halt.reason}` });
    panel.append(h("label", { for: box.id }, label), box);
    return () => (box.value.trim() ? { message: box.value } : undefined);
  };
  if (halt.reason === "questions") {
    const questions = halt.details.questions || [];
    const readers = questions.map((q, i) => {
      const id = `answer-${i}`;
      const block = h("fieldset", { class: "sub" }, h("legend", {}, q.prompt));
      panel.append(block);
      if (q.type === "single_select" || q.type === "multi_select") {
        const kind = q.type === "single_select" ? "radio" : "checkbox";
        block.append(...(q.options || []).map((option, j) => h("label", { class: "inline" },
          h("input", { type: kind, name: id, value: option, id: `${id}-${j}` }), option)));
        return () => [...block.querySelectorAll("input:checked")].map((x) => x.value).join(", ");
      }
      const box = h("textarea", { id, "aria-label": q.prompt });
      if (q.type === "ranked") box.value = (q.options || []).join("\n");
      block.append(box);
      return () => box.value;
    });
    panel.append(h("div", { class: "row" }, ...action("Send answers", post("answers", () => ({ answers: readers.map((r) => r()) })), "primary")));
  } else if (halt.reason === "extension_requested") {
    if (Object.keys(halt.details).length) panel.append(value(halt.details));
    const read = message("Message to the agent (optional)");
    panel.append(h("div", { class: "row" }, ...action("Approve extension", post("extension/approve", read), "primary")));
  } else {
    if (halt.reason === "disk_full") {
      panel.append(h("p", {}, `No space left at ${halt.details.path || "the path above"}: the workflow goes on by itself once it has room again, or at once on resume.`));
    }
    if (Object.keys(halt.details).length) panel.append(value(halt.details));
    const read = message("Guidance for the agent (optional)");
    panel.append(h("div", { class: "row" }, ...action("Resume", post("resume", read), "primary")));
  }
  if (halt.version) panel.append(abandonForm(wf, halt.version, onChange));
  return panel;
}

// --- diffs with the review's comments ----------------------------------------------------------------------

function parseDiff(text) {
  const files = [];
  let file = null;
  let oldNo = 0;
  let newNo = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("diff --git ")) {
      const m = / b\/(.*)$/.exec(line);
      file = { path: m ? m[1] : line.slice(11), lines: [] };
      files.push(file);
    } else if (!file) {
      continue;
    } else if (line.startsWith("+++ ")) {
      if (line !== "+++ /dev/null") file.path = line.replace(/^\+\+\+ b\//, "");
    } else if (line.startsWith("--- ") || line.startsWith("index ") || line.startsWith("new file") ||
               line.startsWith("deleted file") || line.startsWith("similarity") || line.startsWith("rename ")) {
      continue;
    } else if (line.startsWith("@@")) {
      const m = /@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
      if (m) { oldNo = Number(m[1]); newNo = Number(m[2]); }
      file.lines.push({ kind: "hunk", text: line });
    } else if (line.startsWith("+")) {
      file.lines.push({ kind: "add", text: line.slice(1), newNo: newNo++ });
    } else if (line.startsWith("-")) {
      file.lines.push({ kind: "del", text: line.slice(1), oldNo: oldNo++ });
    } else if (line.startsWith(" ")) {
      file.lines.push({ kind: "ctx", text: line.slice(1), oldNo: oldNo++, newNo: newNo++ });
    } else if (line.startsWith("\\")) {
      file.lines.push({ kind: "hunk", text: line });
    }
  }
  return files;
}

function diffView(text, comments, heading) {
  const files = parseDiff(text);
  const placed = new Set();
  const sections = files.map((file) => {
    const mine = comments.filter((c) => c.file_path === file.path);
    const rows = [];
    for (const line of file.lines) {
      if (line.kind === "hunk") {
        rows.push(h("tr", { class: "hunk" }, h("td", { class: "n" }), h("td", { class: "n" }), h("td", { class: "c" }, line.text)));
        continue;
      }
      const sign = line.kind === "add" ? "+" : line.kind === "del" ? "-" : " ";
      rows.push(h("tr", { class: line.kind }, h("td", { class: "n" }, line.oldNo ?? ""), h("td", { class: "n" }, line.newNo ?? ""),
        h("td", { class: "c" }, sign + line.text)));
      if (line.newNo === undefined) continue;
      for (const c of mine) {
        if (!placed.has(c.comment_id) && c.start_line && (c.end_line || c.start_line) === line.newNo) {
          placed.add(c.comment_id);
          rows.push(h("tr", { class: "note" }, h("td", { colspan: 3 }, reviewComment(c))));
        }
      }
    }
    // File comments, and line comments on lines the diff does not show, head the file.
    const top = mine.filter((c) => !placed.has(c.comment_id));
    top.forEach((c) => placed.add(c.comment_id));
    return h("section", { class: "file", "data-file": file.path }, h("h3", {}, file.path), top.map(reviewComment),
      h("table", {}, h("tbody", {}, rows)));
  });
  const rest = comments.filter((c) => !placed.has(c.comment_id));
  return h("div", { class: "diff", id: "diff-view" }, h("h3", {}, heading),
    files.length ? null : h("p", { class: "muted" }, "No changes."),
    sections,
    rest.length ? [h("h3", {}, "Other comments"), rest.map(reviewComment)] : null);
}

async function fetchDiff(path) {
  let text = "";
  let offset = 0;
  for (;;) {
    const page = await api("GET", `${path}?offset=${offset}&limit=1000000`);
    text += page.diff;
    if (page.next_offset === null || page.next_offset === undefined) return { text, ref: page.ref };
    offset = page.next_offset;
  }
}

// --- the agent stream --------------------------------------------------------------------------------------

class AgentStream {
  constructor(sessions, hidden) {
    this.roles = {};
    this.turns = new Map(); // turn id → its element
    this.counted = new Set(); // turns whose tokens and cost are in the totals
    this.totals = { input: 0, output: 0, cost: 0 };
    this.list = h("div", { class: "stream", id: "stream", "aria-live": "off" });
    this.summary = h("span", { id: "usage" });
    if (hidden) this.list.append(h("p", { class: "muted" }, `${hidden} earlier turns are not shown (GET /api/sessions/{id} has them).`));
    const turns = [];
    for (const s of sessions) {
      this.roles[s.session_id] = s.role;
      this.totals.input += s.usage.input_tokens + s.usage.cache_read_input_tokens + s.usage.cache_creation_input_tokens;
      this.totals.output += s.usage.output_tokens;
      this.totals.cost += s.cost_usd;
      for (const t of s.turns) turns.push([s, t]);
    }
    turns.sort((a, b) => (a[1].started_at < b[1].started_at ? -1 : 1));
    for (const [s, t] of turns) this.renderTurn(s.session_id, t);
    this.showTotals();
  }

  showTotals() {
    this.summary.textContent = `${this.totals.input.toLocaleString()} tokens in · ${this.totals.output.toLocaleString()} out · ${money(this.totals.cost)}`;
  }

  turnBox(sessionId, turnId, index, userText, running) {
    let box = this.turns.get(turnId);
    if (box) {
      // A delta can come before its turn's turn:started (they travel apart): that event completes the box.
      if (userText && !box.querySelector(".prompt")) {
        box.querySelector(".label").textContent = `${this.roles[sessionId] || "agent"} · turn ${index + 1}`;
        box.querySelector("header").after(this.prompt(userText));
      }
      return box;
    }
    const role = this.roles[sessionId] || "agent";
    box = h("article", { class: `turn${running ? " running" : ""}`, id: `turn-${turnId}`, "data-session": sessionId },
      h("header", {}, h("span", { class: "label" }, userText ? `${role} · turn ${index + 1}` : role),
        h("span", { class: "state" }, running ? " · working…" : "")),
      userText ? this.prompt(userText) : null,
      h("div", { class: "body" }), h("footer", { class: "muted" }));
    this.turns.set(turnId, box);
    this.stick(() => this.list.append(box));
    return box;
  }

  stick(change) {
    const atEnd = this.list.scrollHeight - this.list.scrollTop - this.list.clientHeight < 40;
    change();
    if (atEnd) this.list.scrollTop = this.list.scrollHeight;
  }

  renderTurn(sessionId, turn) {
    const box = this.turnBox(sessionId, turn.turn_id, turn.index, turn.user_text, !turn.outcome);
    const body = box.querySelector(".body");
    if (turn.hidden_tool_calls) body.append(h("p", { class: "muted" }, `${turn.hidden_tool_calls} earlier tool calls of this turn are not shown.`));
    const steps = new Set([...turn.thoughts.map((t) => t.step), ...turn.tool_calls.map((c) => c.step)]);
    turn.messages.forEach((_, i) => steps.add(i));
    for (const step of [...steps].sort((a, b) => a - b)) {
      for (const t of turn.thoughts.filter((x) => x.step === step)) body.append(this.thought(t.text));
      if (turn.messages[step]) body.append(h("div", { class: "msg", id: `msg-${turn.turn_id}-${step}` }, turn.messages[step]));
      for (const c of turn.tool_calls.filter((x) => x.step === step)) {
        body.append(this.tool(c.tool_use_id, c.name, c.input, c.output, c.is_error, c.duration_ms));
      }
    }
    if (turn.outcome) {
      this.finish(box, turn.outcome.kind, turn.usage, turn.cost_usd);
      this.counted.add(turn.turn_id);
    }
  }

  // Live events of one turn arrive by two roads (text deltas at once, tool calls once recorded), so their
  // order on screen can differ from the model's: once the turn is over, its recorded form replaces them.
  async settle(sessionId, turnId) {
    let session;
    try {
      session = await api("GET", `/api/sessions/${sessionId}`);
    } catch {
      return; // the live rendering stays
    }
    const turn = session.turns.find((t) => t.turn_id === turnId);
    const box = this.turns.get(turnId);
    if (!turn || !box || !turn.outcome) return;
    const keep = TOOL_CALLS_SHOWN;
    const hidden = Math.max(0, turn.tool_calls.length - keep);
    const trimmed = { ...turn, tool_calls: turn.tool_calls.slice(hidden), hidden_tool_calls: hidden };
    box.querySelector(".body").replaceChildren();
    this.renderTurn(sessionId, trimmed);
  }

  prompt(text) {
    return h("details", { class: "thought prompt" }, h("summary", {}, "Prompt"), h("div", { class: "msg" }, text));
  }

  thought(text) {
    return h("details", { class: "thought" }, h("summary", {}, "Thinking"), h("div", { class: "msg" }, text));
  }

  tool(id, name, input, output, isError, ms) {
    // Tool-use ids are the model's: unique within a turn, not necessarily beyond it.
    const node = h("details", { class: `tool${isError ? " is-error" : ""}`, "data-tool": id, "data-name": name },
      h("summary", {}, "⚙ ", h("strong", {}, name), " ", h("span", { class: "mono" }, short(JSON.stringify(input), 90))),
      h("div", { class: "muted" }, "Arguments"), h("pre", {}, pretty(input)),
      h("div", { class: "result" }, output === null || output === undefined ? h("p", { class: "muted" }, "running…")
        : [h("div", { class: "muted" }, `Result${ms ? ` (${Math.round(ms)} ms)` : ""}`), h("pre", {}, output)]));
    return node;
  }

  finish(box, outcome, usage, cost) {
    box.classList.remove("running");
    box.querySelector(".state").textContent = "";
    const tokens = usage ? `${(usage.input_tokens + (usage.cache_read_input_tokens || 0) + (usage.cache_creation_input_tokens || 0)).toLocaleString()} in · ${usage.output_tokens.toLocaleString()} out · ` : "";
    box.querySelector("footer").textContent = `${outcome} · ${tokens}${money(cost)}`;
  }

  onEvent(type, e) {
    if (type === "session:started") this.roles[e.session_id] = e.role;
    else if (type === "turn:started") this.turnBox(e.session_id, e.turn_id, e.index, e.text, true);
    else if (type === "turn:tool_started") {
      const box = this.turnBox(e.session_id, e.turn_id, 0, "", true);
      if (!box.querySelector(`[data-tool="${CSS.escape(e.tool_use_id)}"]`)) {
        this.stick(() => box.querySelector(".body").append(this.tool(e.tool_use_id, e.tool, e.input, null, false, 0)));
      }
    } else if (type === "turn:tool_completed") {
      const box = this.turnBox(e.session_id, e.turn_id, 0, "", true);
      let node = box.querySelector(`[data-tool="${CSS.escape(e.tool_use_id)}"]`);
      if (!node) {
        // Read-only calls made together record only their completion: its arguments come with the turn's end.
        node = this.tool(e.tool_use_id, e.tool, {}, null, false, 0);
        this.stick(() => box.querySelector(".body").append(node));
      }
      {
        node.classList.toggle("is-error", e.is_error);
        node.querySelector(".result").replaceChildren(h("div", { class: "muted" }, `Result (${Math.round(e.duration_ms)} ms)`), h("pre", {}, e.output));
      }
    } else if (type === "turn:completed") {
      const box = this.turnBox(e.session_id, e.turn_id, 0, "", false);
      const body = box.querySelector(".body");
      // Deltas may have been dropped or never seen (a reload): the completed turn's text is the whole of it.
      if (e.text && !body.querySelector(".msg")) this.stick(() => body.append(h("div", { class: "msg" }, e.text)));
      if (e.thoughts && !body.querySelector("details.thought")) body.prepend(this.thought(e.thoughts));
      // A block tool (submit a card, complete a pulse) ends the turn: it has no tool events of its own.
      if (e.outcome === "block" && e.tool && !body.querySelector(`[data-name="${CSS.escape(e.tool)}"]`)) {
        this.stick(() => body.append(this.tool(`block-${e.turn_id}`, e.tool, e.arguments || {}, "(ends the turn)", false, 0)));
      }
      const usage = { input_tokens: e.input_tokens, output_tokens: e.output_tokens,
        cache_read_input_tokens: e.cache_read_input_tokens, cache_creation_input_tokens: e.cache_creation_input_tokens };
      this.finish(box, e.outcome, usage, e.cost_usd);
      this.settle(e.session_id, e.turn_id);
      if (!this.counted.has(e.turn_id)) {
        this.counted.add(e.turn_id);
        this.totals.input += e.input_tokens + e.cache_read_input_tokens + e.cache_creation_input_tokens;
        this.totals.output += e.output_tokens;
        this.totals.cost += e.cost_usd;
        this.showTotals();
      }
    }
  }

  onDelta(type, d) {
    const box = this.turns.get(d.turn_id) || this.turnBox(d.session_id, d.turn_id, 0, "", true);
    if (!box.classList.contains("running")) return; // the completed turn already has its full text
    const body = box.querySelector(".body");
    if (type === "turn:thought_delta") {
      let node = document.getElementById(`think-${d.turn_id}-${d.step}`);
      if (!node) {
        node = this.thought("");
        node.id = `think-${d.turn_id}-${d.step}`;
        body.append(node);
      }
      const text = node.querySelector(".msg");
      text.textContent = d.restart ? d.text : text.textContent + d.text;
      return;
    }
    let node = document.getElementById(`msg-${d.turn_id}-${d.step}`);
    if (!node) {
      node = h("div", { class: "msg", id: `msg-${d.turn_id}-${d.step}` });
      this.stick(() => body.append(node));
    }
    this.stick(() => { node.textContent = d.restart ? d.text : node.textContent + d.text; });
  }
}

// --- a swarm's bead board --------------------------------------------------------------------------------

const BEAD_COLUMNS = ["open", "in_progress", "bounced", "closed"];

function beadBoard(swarm) {
  const onPath = new Set(swarm.critical_path || []);
  const column = (status) => h("div", { class: "column", "data-status": status },
    h("h3", {}, `${human(status)} (${swarm.beads.filter((b) => b.status === status).length})`),
    swarm.beads.filter((b) => b.status === status).map((b) => h("div", { class: "sub bead", "data-bead": b.id },
      h("strong", { class: "mono" }, b.id), " ", b.title,
      onPath.has(b.id) ? h("span", { class: "badge s-halted" }, "critical path") : null,
      b.assignee ? h("div", { class: "muted" }, `${b.assignee}${b.attempt > 1 ? ` · attempt ${b.attempt}` : ""}`) : null,
      b.files && b.files.length ? h("div", { class: "mono muted" }, b.files.join(", ")) : null,
      b.bounce_reason ? h("div", { class: "error" }, b.bounce_reason) : null)));
  return h("section", { class: "panel", id: "beads" },
    h("h2", {}, `Beads · ${swarm.mode}, up to ${swarm.max_workers} workers`),
    h("div", { class: "columns" }, BEAD_COLUMNS.map(column)),
    h("h3", {}, "Workers"),
    swarm.workers.length ? h("table", {}, h("tbody", {}, swarm.workers.map((w) => h("tr", { "data-worker": w.name },
      h("td", {}, h("strong", {}, w.name), w.nickname ? ` (${w.nickname})` : ""), h("td", {}, badge(w.status)),
      h("td", { class: "mono" }, w.bead_id || ""), h("td", { class: "muted" }, `${w.beads_closed} closed`))))) : h("p", { class: "muted" }, "None yet."),
    h("h3", {}, "Leases"),
    swarm.leases.length ? h("table", {}, h("tbody", {}, swarm.leases.map((l) => h("tr", {},
      h("td", { class: "mono" }, l.pattern), h("td", {}, l.holder), h("td", {}, l.mode), h("td", { class: "mono" }, l.bead_id || ""),
      h("td", { class: "muted" }, `until ${when(l.expires_at)}`))))) : h("p", { class: "muted" }, "None held."),
    swarm.merged.length ? h("p", {}, "Landed: ", h("span", { class: "mono" }, swarm.merged.join(" → "))) : null);
}

// --- loop sessions -----------------------------------------------------------------------------------------

function loopsPage() {
  const list = h("div", { id: "loops" });
  const open = new Set();
  const paint = async () => {
    const loops = (await api("GET", "/api/pulse?limit=1000")).items;
    const views = await Promise.all(loops.filter((l) => open.has(l.id)).map((l) => api("GET", `/api/pulse/${l.id}`)));
    const byId = Object.fromEntries(views.map((v) => [v.id, v]));
    list.replaceChildren(...(loops.length ? [...loops].reverse().map((l) => loopView(l, byId[l.id], open, paint))
      : [h("p", { class: "muted" }, "No loop sessions yet: start one with autarch pulse start, or the API (POST /api/pulse/start).")]));
  };
  MAIN.replaceChildren(h("h1", {}, "Loop sessions"), list);
  const refresh = debounce(paint, 150);
  refresh();
  follow("deltas=false", (type) => { if (type.startsWith("loop:")) refresh(); });
}

function loopView(loop, view, open, repaint) {
  const box = h("details", { class: "panel loop", "data-loop": loop.id, open: view ? true : null },
    h("summary", {}, h("strong", {}, loop.project_name), " ", badge(loop.status), " ",
      `iteration ${loop.current_iteration}/${loop.max_iterations}`, loop.last_signal ? ` · ${loop.last_signal}` : "",
      ` · ${loop.total_commits} commits`),
    h("div", { class: "msg" }, loop.goal));
  box.addEventListener("toggle", () => {
    if (box.open && !open.has(loop.id)) { open.add(loop.id); repaint(); }
    if (!box.open) open.delete(loop.id);
  });
  if (!view) return box;
  box.append(h("p", { class: "muted" }, h("span", { class: "mono" }, view.branch_name), ` · ${view.total_tokens_used.toLocaleString()} tokens · ${money(view.total_cost_usd)}`,
    view.status_reason ? ` · ${view.status_reason}` : ""));
  if (view.progress_log.length) {
    box.append(h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "Signal"), h("th", {}, "Summary"), h("th", {}, "Commit"))),
      h("tbody", {}, view.progress_log.map((p) => h("tr", {}, h("td", {}, p.iteration), h("td", {}, p.signal),
        h("td", { class: "msg" }, p.summary), h("td", { class: "mono" }, p.commit_hash ? p.commit_hash.slice(0, 10) : ""))))));
  }
  const post = (verb, body) => async () => { await api("POST", `/api/pulse/${loop.id}/${verb}`, body); repaint(); };
  const message = h("textarea", { id: `loop-message-${loop.id}` });
  if (["pending", "running"].includes(view.status) && !view.pause_requested) box.append(h("div", { class: "row" }, ...action("Pause", post("pause"))));
  if (view.status === "paused" || view.status === "blocked") {
    box.append(h("label", { for: message.id }, "Message for the next iteration (optional)"), message,
      h("div", { class: "row" }, ...action("Resume", async () => post("resume", message.value.trim() ? { message: message.value } : undefined)(), "primary")));
  }
  if (["pending", "running", "paused", "blocked"].includes(view.status)) {
    box.append(h("div", { class: "row" }, ...action("Abort", post("abort", { reason: "aborted from the web UI" }), "danger")));
  }
  return box;
}

// --- discussion channels -----------------------------------------------------------------------------------

function channelsPage() {
  const alert = h("p", { role: "alert", class: "error" });
  const form = h("form", { class: "panel", id: "channel-form" },
    h("h2", {}, "Start a discussion"),
    h("label", { for: "ch-channel" }, "Channel"), h("input", { type: "text", id: "ch-channel", name: "channel", value: "general", required: true, pattern: "[A-Za-z0-9_.\\-]{1,100}" }),
    h("label", { for: "ch-repo" }, "Repository (a path on the gateway's machine)"), h("input", { type: "text", id: "ch-repo", name: "repo", required: true, placeholder: STATE.cwd }),
    h("label", { for: "ch-message" }, "Message"), h("textarea", { id: "ch-message", name: "message", required: true }),
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Start"), alert));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(form).entries());
    try {
      const turn = await api("POST", `/api/channels/${encodeURIComponent(data.channel)}/session`, { repo: data.repo, message: data.message });
      location.assign(`/sessions/${turn.session_id}`);
    } catch (err) {
      alert.textContent = err.message;
    }
  });
  MAIN.replaceChildren(h("h1", {}, "Channels"), form, h("section", { class: "panel" }, h("h2", {}, "Discussions"),
    STATE.sessions.length ? h("ul", {}, STATE.sessions.map((s) => h("li", {}, h("a", { href: `/sessions/${s.session_id}` }, s.session_id.slice(0, 8)),
      ` · ${s.status} · ${s.turns} turns · ${money(s.cost_usd)}`))) : h("p", { class: "muted" }, "None yet.")));
}

function sessionPage() {
  const session = STATE.sessions[0];
  const agents = new AgentStream(STATE.sessions, STATE.hidden_turns);
  const text = h("textarea", { id: "chat-message" });
  const status = h("span", { id: "chat-status", class: "muted" }, session.status);
  const send = action("Send", async () => {
    if (!text.value.trim()) return;
    await api("POST", `/api/sessions/${session.session_id}/message`, { text: text.value });
    text.value = "";
  }, "primary");
  MAIN.replaceChildren(
    h("h1", {}, `#${session.channel_id || "discussion"} `, status),
    h("p", { class: "muted" }, h("span", { class: "mono" }, session.root), " · ", agents.summary),
    h("section", { class: "panel chat" }, agents.list,
      h("label", { for: text.id }, "Message"), text, h("div", { class: "row" }, ...send)));
  follow("deltas=true", (type, event) => {
    if (event.session_id !== session.session_id) return;
    agents.onEvent(type, event);
    if (type === "turn:started") status.textContent = "running";
    if (type === "turn:completed") status.textContent = "idle";
    if (type === "session:completed") status.textContent = "closed";
  }, (type, delta) => { if (delta.session_id === session.session_id) agents.onDelta(type, delta); });
}

// --- workflow page -----------------------------------------------------------------------------------------

// Fork: a new workflow from this one's first N events (``version`` counts them), carried on from there; the page
// then opens the fork. This workflow is not changed.
function forkForm(wf) {
  const at = h("input", { id: "fork-at", type: "text", inputmode: "numeric", size: "6", value: String(wf.version),
    "aria-describedby": "fork-help" });
  const [button, alert] = action("Fork here", async () => {
    const n = Number(at.value.trim());
    if (!Number.isInteger(n) || n < 1 || n > wf.version) throw new Error(`Give an event number from 1 to ${wf.version}.`);
    const fork = await api("POST", `/api/workflows/${wf.id}/fork`, { at: n });
    location.assign(`/workflows/${fork.id}`);
  });
  return h("details", { class: "panel keep", id: "fork" }, h("summary", {}, "Fork this workflow"),
    h("p", { class: "muted", id: "fork-help" }, `A new workflow starts from this one's first N events (of ${wf.version}) `
      + "with its own branch and agents, and goes on from there; this one is not changed."),
    h("div", { class: "row" }, h("label", { for: "fork-at" }, "Event N "), at, button, alert));
}

function workflowPage() {
  let wf = STATE.workflow;
  let cards = STATE.artifacts;
  let diffShown = null; // {path, heading} of the diff on screen
  const agents = new AgentStream(STATE.sessions, STATE.hidden_turns);
  if (STATE.sessions_unavailable) {
    agents.list.prepend(h("p", { class: "error" }, `${STATE.sessions_unavailable} agent sessions could not be read just now; reload to try again.`));
  }
  const head = h("div", { id: "head" });
  const panel = h("div", { id: "panel" });
  const diffBox = h("div", { id: "diff" });

  const onChange = (view) => { wf = view; refresh(); paint(); };

  const showDiff = async (path, heading) => {
    diffShown = { path, heading };
    diffBox.replaceChildren(h("p", { class: "muted" }, "Loading the diff…"));
    try {
      const { text, ref } = await fetchDiff(path);
      const stats = ref ? ` (${ref.files_changed} files, +${ref.insertions} −${ref.deletions})` : "";
      diffBox.replaceChildren(diffView(text, cards.review ? cards.review.comments : [], heading + stats));
    } catch (err) {
      diffBox.replaceChildren(h("p", { class: "error", role: "alert" }, err.message));
    }
  };

  const paintHead = () => {
    const { k, label } = stageOf(wf);
    const track = h("ol", { class: "track", "aria-label": `Stage ${k} of 5: ${label}` }, STAGES.map((stage, i) => {
      const skipped = wf.path === "quick" && (stage === "research" || stage === "planning");
      const cls = wf.stage === "done" || i < k - 1 ? "done" : i === k - 1 ? "current" : "";
      return h("li", { class: `${cls}${skipped ? " skipped" : ""}`, "aria-current": cls === "current" ? "step" : null }, human(stage));
    }));
    const stop = wf.status === "active" && !wf.awaiting_approval
      ? action("Stop", async () => onChange(await api("POST", `/api/workflows/${wf.id}/stop`, {})), "danger") : [];
    head.replaceChildren(...[
      h("h1", {}, wf.title, " ", badge(wf.status)),
      h("p", { class: "muted" }, h("span", { id: "stage-k" }, `Stage ${k}/5 · ${label}`), wf.path ? ` · ${wf.path} path` : "",
        " · ", agents.summary, " · ", h("span", { class: "mono" }, wf.repo), wf.branch ? [" · ", h("span", { class: "mono" }, wf.branch)] : null),
      wf.forked_from ? h("p", { class: "muted", id: "forked-from" }, "Forked from ",
        h("a", { href: `/workflows/${wf.forked_from}`, class: "mono" }, wf.forked_from.slice(0, 8)), ` after its event ${wf.forked_at}`) : null,
      track, h("details", { class: "keep", id: "request" }, h("summary", {}, "Request"), h("div", { class: "msg" }, wf.request)),
      stop.length ? h("div", { class: "row" }, ...stop) : null,
      wf.last_error ? h("p", { class: "error" }, wf.last_error) : null].filter(Boolean));
  };

  const paintPanel = () => keepInputs(panel, () => {
    const parts = [];
    if (wf.status === "halted" && wf.halt) parts.push(haltPanel(wf, onChange));
    if (wf.status === "abandoned") parts.push(h("p", { class: "panel error" }, "This workflow was abandoned."));
    if (wf.status === "done") parts.push(h("p", { class: "panel" }, "Done: the review was approved."));
    for (const name of ["scope", "research", "plan", "review"]) {
      if (cards[name]) parts.push(cardView(name, cards[name], wf, cards, onChange));
    }
    if (cards.fix_rounds && cards.fix_rounds.length) parts.push(fixRounds(cards.fix_rounds));
    if (cards.feedback && cards.feedback.length) {
      parts.push(h("details", { class: "panel" }, h("summary", {}, `Feedback sent (${cards.feedback.length})`),
        cards.feedback.map((f) => h("div", { class: "sub" }, h("strong", {}, human(f.stage)), h("div", { class: "msg" }, f.feedback)))));
    }
    if (cards.preflight) {
      parts.push(h("details", { class: "panel" }, h("summary", {}, "Preflight ", badge(cards.preflight.status)), value(cards.preflight)));
    }
    if (cards.pulse_runs && cards.pulse_runs.length) {
      parts.push(h("section", { class: "panel", id: "pulses" }, h("h2", {}, "Pulses"), h("table", {},
        h("thead", {}, h("tr", {}, h("th", {}, "Pulse"), h("th", {}, "Status"), h("th", {}, "Commit"), h("th", { class: "hide-narrow" }, "Files"), h("th", {}, ""))),
        h("tbody", {}, cards.pulse_runs.map((run) => h("tr", { "data-pulse": run.id },
          h("td", {}, h("strong", {}, run.id), " ", run.title || "", run.fix_round ? [" ", h("span", { class: "badge" }, `fix round ${run.fix_round}`)] : null,
            run.description ? h("div", { class: "muted msg" }, short(run.description, 300)) : null),
          h("td", {}, badge(run.status)),
          h("td", { class: "mono" }, run.checkpoint_commit ? run.checkpoint_commit.slice(0, 10) : ""),
          h("td", { class: "hide-narrow mono" }, (run.files_changed || []).join(", ")),
          h("td", {}, run.checkpoint_commit || run.diff_artifact_id
            ? h("button", { type: "button", onclick: () => showDiff(`/api/workflows/${wf.id}/pulses/${run.id}/diff`, `Pulse ${run.id}`) }, "Diff")
            : null)))))));
    }
    if (wf.branch) {
      parts.push(h("section", { class: "panel", id: "changes" }, h("h2", {}, "Changes"),
        h("div", { class: "row" }, h("button", { type: "button", id: "show-branch-diff",
          onclick: () => showDiff(`/api/workflows/${wf.id}/diff`, `Branch ${wf.branch} against ${wf.base_branch}`) }, "Branch diff")),
        diffBox));
    }
    if (cards.notes && cards.notes.length) {
      parts.push(h("details", { class: "panel" }, h("summary", {}, `Notes (${cards.notes.length})`),
        cards.notes.map((n) => h("div", { class: "sub" }, h("strong", {}, human(n.stage)), h("div", { class: "msg" }, n.note)))));
    }
    parts.push(forkForm(wf));
    panel.replaceChildren(...parts);
  });

  // A swarm's bead board, once the workflow has an epic (404 no_epic until then, or never).
  const board = h("div", { id: "board" });
  let swarmSeen = false;
  const paintBoard = async () => {
    if (!wf.branch) return;
    try {
      board.replaceChildren(beadBoard(await api("GET", `/api/beads/swarm?epic_id=${wf.id}`)));
      swarmSeen = true;
    } catch (err) {
      if (err.status && err.status !== 404) board.replaceChildren(h("p", { class: "error" }, err.message));
    }
  };
  const paint = () => { paintHead(); paintPanel(); };
  let stampIds = [];
  const refresh = debounce(async () => {
    [wf, cards] = await Promise.all([api("GET", `/api/workflows/${wf.id}`), api("GET", `/api/workflows/${wf.id}/artifacts`)]);
    paint();
    // At review, the diff with the review's comments is what is being approved: show it unasked.
    if (wf.branch && (!diffShown && wf.stage === "review" || diffShown && diffShown.path.endsWith("/diff") && !diffShown.path.includes("/pulses/"))) {
      await showDiff(`/api/workflows/${wf.id}/diff`, `Branch ${wf.branch} against ${wf.base_branch}`);
    }
    for (const [id, type, at] of stampIds) probe.timings.push([id, type, at, Date.now()]);
    stampIds = [];
  }, 60);

  MAIN.replaceChildren(head, board, h("div", { class: "layout" }, panel,
    h("section", { class: "panel", "aria-labelledby": "agents-title" }, h("h2", { id: "agents-title" }, "Agents"), agents.list)));
  paint();
  if (wf.branch && wf.stage === "review") showDiff(`/api/workflows/${wf.id}/diff`, `Branch ${wf.branch} against ${wf.base_branch}`);

  paintBoard();
  const boardRefresh = debounce(paintBoard, 150);
  follow(`workflow=${wf.id}`, (type, event, id) => {
    if (/^(bead|worker|lease|swarm):/.test(type)) {
      boardRefresh();
      probe.timings.push([id, type, event.occurred_at, Date.now()]);
    } else if (type.startsWith("turn:") || type.startsWith("session:")) {
      agents.onEvent(type, event);
      if (type === "turn:completed") paintHead();
      probe.timings.push([id, type, event.occurred_at, Date.now()]);
    } else {
      stampIds.push([id, type, event.occurred_at]);
      refresh();
    }
  }, (type, delta) => agents.onDelta(type, delta));
}

document.getElementById("signout").addEventListener("click", async () => {
  await fetch("/ui/logout", { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": CSRF } });
  location.assign("/");
});

if (STATE.page === "workflows") workflowsPage();
else if (STATE.page === "workflow") workflowPage();
else if (STATE.page === "loops") loopsPage();
else if (STATE.page === "channels") channelsPage();
else if (STATE.page === "session") sessionPage();
else MAIN.replaceChildren(h("h1", {}, "Not found"), h("p", {}, `There is no ${STATE.what}.`), h("p", {}, h("a", { href: "/" }, "All workflows")));
