// The calendar rules editor (settings page): adds and removes time rows and override dates in the page,
// and copies Monday to the other weekdays (app.js's zone picker suggests the browser's time zone for a
// calendar not set up yet). Saving is a plain form post; without this file the same buttons do their work through the server.
"use strict";

function dayRow(el) { return el.closest("[data-day], [data-override]"); }

function addInterval(button) {
  const list = button.closest("[data-intervals]");
  const rows = list.querySelectorAll("[data-interval]");
  const last = rows[rows.length - 1];
  const row = last.cloneNode(true);
  const [start, end] = row.querySelectorAll('input[type="time"]');
  // The new time starts where the last one ends, an hour long: the usual next stretch of a day.
  const [, lastEnd] = last.querySelectorAll('input[type="time"]');
  start.value = lastEnd.value && lastEnd.value !== "00:00" ? lastEnd.value : "";
  end.value = start.value ? plusHour(start.value) : "";
  row.querySelectorAll("[aria-invalid]").forEach((input) => input.removeAttribute("aria-invalid"));
  last.after(row);
  const open = dayRow(list).querySelector("[data-day-open]");
  if (open) open.checked = true;
  start.focus();
}

function plusHour(hhmm) {
  const [h, m] = hhmm.split(":").map(Number);
  return h >= 23 ? "00:00" : `${String(h + 1).padStart(2, "0")}:${String(m).padStart(2, "0")}`;
}

function removeInterval(button) {
  const row = button.closest("[data-interval]");
  const list = row.closest("[data-intervals]");
  if (list.querySelectorAll("[data-interval]").length > 1) {
    row.remove();
    list.querySelector('input[type="time"]').focus();
    return;
  }
  // The last time of a day: the day closes (its row stays, for when it is opened again).
  const open = dayRow(list).querySelector("[data-day-open]");
  if (open) { open.checked = false; open.focus(); }
}

function copyMonday(form) {
  const monday = form.querySelector('[data-day="mon"]');
  for (const key of ["tue", "wed", "thu", "fri"]) {
    const day = form.querySelector(`[data-day="${key}"]`);
    day.querySelector("[data-day-open]").checked = monday.querySelector("[data-day-open]").checked;
    const target = day.querySelector("[data-intervals]");
    target.querySelectorAll("[data-interval]").forEach((row) => row.remove());
    const addButton = target.querySelector("[data-add-interval]");
    monday.querySelectorAll("[data-interval]").forEach((row) => {
      const copy = row.cloneNode(true);
      const sourceInputs = row.querySelectorAll("input");
      copy.querySelectorAll("input").forEach((input, i) => {
        input.name = input.name.replace(/^mon-/, `${key}-`);
        input.value = sourceInputs[i].value;
        input.setAttribute("aria-label", input.getAttribute("aria-label").replace("Monday", day.querySelector(".rules-day-name span").textContent));
      });
      target.insertBefore(copy, addButton);
    });
  }
}

function addOverride(form) {
  const list = form.querySelector("[data-overrides]");
  const indexes = [...list.querySelectorAll("[data-override]")].map((row) => Number(row.dataset.index));
  const next = String(indexes.length ? Math.max(...indexes) + 1 : 0);
  const template = form.querySelector("[data-override-template]");
  const html = template.innerHTML.replaceAll("__n__", next);
  const holder = document.createElement("div");
  holder.innerHTML = html;
  const row = holder.firstElementChild;
  const empty = list.querySelector("[data-overrides-empty]");
  if (empty) empty.remove();
  list.append(row);
  row.querySelector('input[type="date"]').focus();
}

function wireRulesEditor() {
  const form = document.querySelector("[data-rules-form]");
  if (!form) return;
  form.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (!button || !form.contains(button)) return;
    let handled = true;
    if (button.matches("[data-add-interval]")) addInterval(button);
    else if (button.matches("[data-remove-interval]")) removeInterval(button);
    else if (button.matches("[data-copy-monday]")) copyMonday(form);
    else if (button.matches("[data-add-override]")) addOverride(form);
    else if (button.matches("[data-remove-override]")) button.closest("[data-override]").remove();
    else handled = false;
    if (!handled) return;
    event.preventDefault();
    // A row added or removed changes what the form says without a "change" event: the preview redraws.
    document.body.dispatchEvent(new CustomEvent("rules-edited"));
  });
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wireRulesEditor);
else wireRulesEditor();
