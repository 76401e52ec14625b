// The plan a refresh ran, as the Joins view shows it: pure functions (no page, no DOM), loaded before
// joins.js, and by node in tests/airflow/test_joins_view.py.
//
// A plan is the `strategy` of an output's refresh commit as the history gets it (chosen, basis, estimate,
// actual_s) or of a task's result as the refresh tab gets it (the same, plus requested, reason and, when
// the recompute could not run, fallback).
"use strict";

// A refresh whose plan took more than this many times the other plan's estimate is marked, as the engine
// warns at the end of that refresh (airflow_provider_fkjoin/engine/core/cost_history.py: WARN_RATIO and
// slower_than_expected; a test keeps the two equal).
const WARN_RATIO = 1.5;

const OTHER_PLAN = { incremental: "recompute", recompute: "incremental" };

// The plan that ran: the chosen one, unless the recompute could not run and the incremental plan did.
function planRan(strategy) {
  return strategy.fallback ? "incremental" : strategy.chosen;
}

// The plan that would likely have been faster, when the plan that ran took more than WARN_RATIO times
// that plan's estimate; else null (a full rebuild, no estimate, no actual seconds).
//   slowerPlan({chosen: "incremental", actual_s: 9, estimate: {incremental_s: 4, recompute_s: 5}}) -> "recompute"
function slowerPlan(strategy) {
  if (!strategy || !strategy.estimate || typeof strategy.actual_s !== "number") return null;
  const other = OTHER_PLAN[planRan(strategy)];
  if (!other) return null;
  const otherS = strategy.estimate[`${other}_s`];
  return typeof otherS === "number" && otherS > 0 && strategy.actual_s > WARN_RATIO * otherS ? other : null;
}

// What the view says of a plan, with `seconds` formatting a number of seconds (joins.js's duration):
// {text, slower, warning}, or null for a refresh that recorded no plan (an older commit).
//   "recompute (history) 3.0 s; estimated 6.0 s incremental / 3.5 s recompute"
function planSummary(strategy, seconds) {
  if (!strategy || !strategy.chosen) return null;
  const ran = planRan(strategy);
  const basis = strategy.fallback ? "fallback" : strategy.basis;
  let text = ran;
  if (basis && basis !== ran) text += ` (${basis})`;
  if (typeof strategy.actual_s === "number") text += ` ${seconds(strategy.actual_s)}`;
  const estimate = strategy.estimate;
  if (estimate && typeof estimate.incremental_s === "number" && typeof estimate.recompute_s === "number") {
    text += `; estimated ${seconds(estimate.incremental_s)} incremental / ${seconds(estimate.recompute_s)} recompute`;
  }
  const slower = slowerPlan(strategy);
  const warning = slower
    ? `the ${ran} plan took more than ${WARN_RATIO}x the ${slower} plan's estimate ` +
      `(${seconds(strategy.estimate[`${slower}_s`])})`
    : null;
  return { text, slower, warning };
}

if (typeof module === "object" && module.exports) {
  module.exports = { WARN_RATIO, planRan, slowerPlan, planSummary };
}
