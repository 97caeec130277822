"""The two HTML pages of the Campaigns plugin: plain HTML and a little JavaScript that fetches the
JSON endpoints (same origin, so the browser sends Airflow's login cookie). Shown in Airflow's UI
as external views (iframes): links that leave the page target the top window.
"""

from __future__ import annotations

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f3f3f3}a{color:inherit}
.success{background:#b8e6b8}.running,.queued,.deferred,.scheduled,.up_for_retry{background:#b8d4f5}
.failed,.upstream_failed{background:#f5b8b8}.skipped{background:#e8d8f0}.none{background:#f7f7f7}
.note{color:#666}img{max-width:420px;border:1px solid #ddd}
figure{display:inline-block;margin:4px;vertical-align:top}figcaption{font-size:12px;color:#666}
pre{background:#f7f7f7;padding:6px;font-size:12px;overflow-x:auto}caption{text-align:left;font-size:13px}
fieldset{display:inline-block;vertical-align:top;border:1px solid #ddd;margin:2px}
"""

# A phase's training in words: its task's state, or why its Slurm job still pends while it does.
_TRAINING = """function training(p){return p.pending ? "pending: " + p.pending : p.state;}"""

CAMPAIGNS_PAGE = (
    """<!doctype html><html><head><meta charset="utf-8"><title>Campaigns</title><style>"""
    + _STYLE
    + """</style></head><body>
<h2>Campaigns</h2><div id="campaigns" class="note">loading...</div>
<script>
const base = location.pathname.replace(/\\/+$/, "");
function esc(s){return String(s ?? "").replace(/[&<>"']/g, c => "&#" + c.charCodeAt(0) + ";");}
function num(x){return x === null || x === undefined ? "" : Number(x).toPrecision(4);}
"""
    + _TRAINING
    + """
async function getJson(url, opts){
  const r = await fetch(url, Object.assign({credentials: "same-origin"}, opts || {}));
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.detail || ("HTTP " + r.status));
  return body;
}
function grid(c){
  const axes = c.experiments.length ? Object.keys(c.experiments[0].axes) : [];
  let h = "<table><tr><th>experiment</th>" + axes.map(a => "<th>" + esc(a) + "</th>").join("")
    + "<th>run</th>" + c.phases.map(p => "<th>" + esc(p) + "</th>").join("")
    + "<th>" + esc(c.report.hours_unit || "GPU-hours") + "</th></tr>";
  for (const e of c.experiments){
    const run = e.run
      ? '<a target="_top" href="' + esc(e.run.url) + '">' + esc(e.run.state) + "</a>" : "never run";
    h += '<tr data-dag="' + esc(e.dag_id) + '"><td>' + esc(e.experiment) + "</td>"
      + axes.map(a => "<td>" + esc(e.axes[a]) + "</td>").join("")
      + '<td class="' + esc(e.run ? e.run.state : "none") + '">' + run + "</td>";
    for (const p of c.phases){
      const cell = e.cells[p];
      if (!cell){ h += "<td></td>"; continue; }
      const text = training(cell) + (cell.final_loss != null ? " " + num(cell.final_loss) : "");
      const link = cell.url
        ? '<a target="_top" href="' + esc(cell.url) + '">' + esc(text) + "</a>" : esc(text);
      h += '<td class="' + esc(cell.state) + (cell.pending ? " pending" : "") + '">' + link + "</td>";
    }
    h += "<td>" + num(e.gpu_hours) + "</td></tr>";
  }
  return h + "</table>";
}
function table(t){
  return '<table class="cost"><caption>' + esc(t.caption) + "</caption><tr>"
    + t.header.map(x => "<th>" + esc(x) + "</th>").join("") + "</tr>"
    + t.rows.map(r => "<tr>" + r.map(x => "<td>" + esc(x) + "</td>").join("") + "</tr>").join("")
    + "</table>";
}
function report(c){
  const r = c.report;
  if (r.missing) return '<p class="note">' + esc(r.missing) + "</p>";
  let h = "<p>report of " + esc(r.generated_at) + "</p>";
  for (const s of r.answer)
    h += '<div class="answer"><h4>' + esc(s.title) + "</h4><pre>" + s.lines.map(esc).join("\\n")
      + "</pre>" + (s.table ? table(s.table) : "") + "</div>";
  const plots = base + "/api/campaigns/" + encodeURIComponent(c.campaign) + "/plots/";
  h += r.plots.map(p => '<figure><img alt="' + esc(p) + '" src="' + plots + encodeURIComponent(p)
    + '"><figcaption>' + esc(p.replace(/\\.png$/, "").replace(/_/g, " ")) + "</figcaption></figure>")
    .join("");
  return h;
}
function form(c){
  let h = '<form data-campaign="' + esc(c.campaign) + '">';
  for (const [axis, values] of Object.entries(c.axes)){
    const boxes = values.map(v => '<label><input type="checkbox" name="' + esc(axis) + '" value="' + esc(v)
      + '">' + esc(v) + "</label>");
    h += "<fieldset><legend>" + esc(axis) + "</legend>" + boxes.join(" ") + "</fieldset>";
  }
  h += ' <label>more filters <input name="_text" placeholder="KEY=V1,V2"></label>'
    + ' <label><input type="checkbox" name="_wait">wait</label>'
    + ' <label><input type="checkbox" name="_dry">dry run</label>'
    + ' <button type="submit">Trigger slice</button> <span class="result"></span></form>';
  return h;
}
async function trigger(ev){
  ev.preventDefault();
  const f = ev.target, filters = {};
  for (const box of f.querySelectorAll("fieldset input:checked")) (filters[box.name] ??= []).push(box.value);
  const body = {filters: filters, text: f._text.value, wait: f._wait.checked, dry_run: f._dry.checked};
  const out = f.querySelector(".result");
  try {
    const run = await getJson(base + "/api/campaigns/" + encodeURIComponent(f.dataset.campaign) + "/trigger",
      {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
    out.innerHTML = 'started <a target="_top" href="' + esc(run.url) + '">' + esc(run.run_id) + "</a>";
  } catch (err) { out.textContent = "not started: " + err.message; }
}
async function main(){
  const root = document.getElementById("campaigns");
  try {
    const list = await getJson(base + "/api/campaigns");
    root.className = ""; root.innerHTML = "";
    for (const item of list){
      const sec = document.createElement("section");
      sec.innerHTML = "<h3>" + esc(item.campaign) + '</h3><p class="note">' + esc(item.config)
        + "</p>loading...";
      root.appendChild(sec);
      try {
        const c = await getJson(base + "/api/campaigns/" + encodeURIComponent(item.campaign));
        sec.innerHTML = "<h3>" + esc(c.campaign) + ' <small class="note">' + c.experiments.length
          + " experiments, " + esc(c.config) + "</small></h3>" + grid(c) + form(c) + report(c);
        sec.querySelector("form").addEventListener("submit", trigger);
      } catch (err) { sec.innerHTML += '<p class="note">' + esc(err.message) + "</p>"; }
    }
    if (!list.length) root.textContent = "no campaign configs (AUTOEXP_CONFIGS)";
  } catch (err) { root.textContent = "cannot load the campaigns: " + err.message; }
}
main();
</script></body></html>"""
)

EXPERIMENT_PAGE = (
    """<!doctype html><html><head><meta charset="utf-8"><title>Experiment</title><style>"""
    + _STYLE
    + """</style></head><body><div id="experiment" class="note">loading...</div>
<script>
const api = location.pathname.replace("/experiment/", "/api/experiments/");
function esc(s){return String(s ?? "").replace(/[&<>"']/g, c => "&#" + c.charCodeAt(0) + ";");}
function show(x){return typeof x === "object" && x !== null ? JSON.stringify(x) : x;}
"""
    + _TRAINING
    + """
async function main(){
  const root = document.getElementById("experiment");
  const r = await fetch(api, {credentials: "same-origin"});
  const e = await r.json().catch(() => ({}));
  if (!r.ok){ root.textContent = "cannot load: " + (e.detail || r.status); return; }
  let h = "<h3>" + esc(e.dag_id) + "</h3><table><tr><th>phase</th><th>training</th>"
    + "<th>latest checkpoint</th><th>evaluations done</th></tr>";
  for (const [p, s] of Object.entries(e.phases)){
    h += "<tr><td>" + esc(p) + '</td><td class="' + esc(s.state) + (s.pending ? " pending" : "") + '">'
      + esc(training(s)) + "</td><td>"
      + esc(s.latest_checkpoint ?? "-") + "</td><td>" + esc(s.evaluations) + "</td></tr>";
  }
  h += "</table>";
  if (e.note) h += '<p class="note">' + esc(e.note) + "</p>";
  h += e.plots.map(p => '<img alt="' + esc(p) + '" src="' + api + "/plots/" + encodeURIComponent(p) + '">')
    .join("");
  if (e.rows.length){
    const cols = Object.keys(e.rows[0]);
    h += "<h4>evaluations</h4><table><tr>" + cols.map(c => "<th>" + esc(c) + "</th>").join("") + "</tr>"
      + e.rows.map(row => "<tr>" + cols.map(c => "<td>" + esc(show(row[c])) + "</td>").join("") + "</tr>")
        .join("") + "</table>";
  }
  root.className = ""; root.innerHTML = h;
}
main();
</script></body></html>"""
)
