// crawlherd console: the live overview, the schedule preview and confirmations. Nothing else needs
// JavaScript, and none is inline: the Content-Security-Policy allows scripts from this file only.
"use strict";

function liveRegions() {
  document.querySelectorAll("[data-live]").forEach((el) => {
    const every = Number(el.dataset.every || 3000);
    const refresh = async () => {
      try {
        const resp = await fetch(el.dataset.live, { credentials: "same-origin" });
        if (resp.ok) el.innerHTML = await resp.text();
      } catch (e) { /* the next tick tries again */ }
    };
    setInterval(refresh, every);
  });
}

function schedulePreviews() {
  document.querySelectorAll("fieldset.schedule[data-preview]").forEach((fs) => {
    const out = fs.querySelector(".preview");
    let timer = null;
    const update = async () => {
      const params = new URLSearchParams();
      for (const name of ["every", "cron", "timezone", "jitter"]) {
        const input = fs.querySelector(`[name=${name}]`);
        if (input && input.value.trim()) params.set(name, input.value.trim());
      }
      const resp = await fetch(`${fs.dataset.preview}?${params}`, { credentials: "same-origin" });
      const data = await resp.json();
      out.textContent = "";
      if (!data.ok) {
        const ul = document.createElement("ul");
        ul.className = "error schedule-errors";
        for (const [field, msg] of Object.entries(data.errors)) {
          const li = document.createElement("li");
          li.textContent = `${field}: ${msg}`;
          ul.appendChild(li);
        }
        out.appendChild(ul);
        return;
      }
      const table = document.createElement("table");
      table.className = "schedule-preview";
      const head = table.insertRow();
      for (const h of ["next runs (UTC)", data.timezone]) {
        const th = document.createElement("th");
        th.textContent = h;
        head.appendChild(th);
      }
      for (const run of data.runs) {
        const row = table.insertRow();
        row.insertCell().textContent = run.utc;
        row.insertCell().textContent = run.local;
      }
      out.appendChild(table);
      if (data.jitter_seconds) {
        const p = document.createElement("p");
        p.className = "muted";
        p.textContent = `each run up to ${data.jitter_seconds}s later (jitter)`;
        out.appendChild(p);
      }
    };
    fs.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(update, 250); });
    update();
  });
}

function confirmations() {
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
}

document.addEventListener("DOMContentLoaded", () => { liveRegions(); schedulePreviews(); confirmations(); });
