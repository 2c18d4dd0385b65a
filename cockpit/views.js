/* The overview's parts: the daemon, running jobs, tasks, watches and the fleet's summary, each
 * from the Status reply (the state dump's sections: docs/operations.md, "The state dump"). */

import { el, visible, duration, when, seconds, label, descriptionList, alert } from "./format.js";

/* `status`'s bars: progress in green, the budget with a mark where it warns, yellow past
 * the warning and red past the budget. */
export function bar(fraction, options) {
    options = options || {};
    const clamped = Math.max(0, Math.min(1, isFinite(fraction) ? fraction : 0));
    const fill = el("div", { class: "wk-bar__fill pf-m-" + (options.state || "success") });
    fill.style.width = (clamped * 100).toFixed(1) + "%";
    const node = el("div", {
        class: "wk-bar " + (options.kind ? "wk-bar--" + options.kind : ""),
        role: "progressbar",
        "aria-valuemin": "0",
        "aria-valuemax": "100",
        "aria-valuenow": String(Math.round(clamped * 100)),
        "aria-label": options.label,
    }, fill);
    if (options.mark !== undefined && options.mark !== null && isFinite(options.mark)) {
        const mark = el("div", { class: "wk-bar__mark", title: options.markTitle });
        mark.style.left = (Math.max(0, Math.min(1, options.mark)) * 100).toFixed(1) + "%";
        node.append(mark);
    }
    return node;
}

export function progressCell(job) {
    if (job.progress === null || job.progress === undefined)
        return el("div", { class: "wk-progress" }, job.status ? el("span", { class: "wk-status" }, visible(job.status)) : "-");
    return el("div", { class: "wk-progress" },
              bar(job.progress / 100, { kind: "progress", label: "progress" }),
              el("span", { class: "wk-percent" }, Math.round(job.progress) + "%"),
              job.status ? el("span", { class: "wk-status" }, visible(job.status)) : null);
}

export function budgetCell(job) {
    if (!job.budget_s)
        return job.elapsed_s !== undefined ? duration(job.elapsed_s) : "-";
    const fraction = job.elapsed_s / job.budget_s;
    const warned = job.warn_at_s !== null && job.warn_at_s !== undefined && job.elapsed_s >= job.warn_at_s;
    const state = fraction >= 1 ? "danger" : warned ? "warning" : "success";
    const text = duration(job.elapsed_s) + " of " + duration(job.budget_s) +
        (job.warn_at_s ? " (warns at " + duration(job.warn_at_s) + ")" : "");
    return el("div", { class: "wk-progress" },
              bar(fraction, { kind: "budget", state, label: "budget", mark: job.warn_at_s ? job.warn_at_s / job.budget_s : null, markTitle: "warns here" }),
              el("span", { class: "wk-status" }, text));
}

export function stateLabel(state) {
    const colour = state === "running" ? "green" : /stopping|draining|starting/.test(state || "") ? "orange" : "red";
    return label(state || "unknown", colour);
}

/* The daemon: state, uptime, configuration and generation, last reload, watchdog. */
export function daemonDetails(status) {
    const daemon = status.daemon || {};
    const config = daemon.config || {};
    const reload = config.last_reload;
    const watchdog = status.watchdog || {};
    const jobs = status.jobs || {};
    let reloadText = "none since start";
    if (reload) {
        const ok = reload.result === "ok";
        reloadText = el("span", {}, label(ok ? "ok" : "failed", ok ? "green" : "red"), " ", when(reload.at),
                        (reload.errors || []).length ? el("ul", { class: "wk-errors", id: "last-reload-errors" },
                                                          reload.errors.map(error => el("li", {}, visible(error)))) : null);
    }
    let watchdogText = watchdog.systemd_watchdog === null || watchdog.systemd_watchdog === undefined
        ? "not requested by systemd"
        : "pings sent " + (watchdog.pings_sent || 0);
    if (watchdog.pings_withheld)
        watchdogText += ", " + watchdog.pings_withheld + " withheld";
    if ((watchdog.queues_stuck || []).length)
        watchdogText += "; stuck: " + watchdog.queues_stuck.map(queue => visible(queue)).join(", ");
    return descriptionList([
        ["State", el("span", { id: "daemon-state" }, stateLabel(daemon.state), " for " + duration(daemon.draining_s || status.uptime_s))],
        ["Version", "watchkeeper " + visible(status.version) + ", pid " + status.pid],
        ["Status", visible(status.status)],
        ["Configuration", el("span", { id: "config-generation" },
                             visible(config.path) + ", generation " + config.generation + ", loaded " + when(config.loaded_at))],
        ["Last reload", reloadText],
        ["Jobs", (jobs.running_total || 0) + " running, " + (jobs.waiting_total || 0) + " waiting, " +
                 (jobs.retrying_total || 0) + " waiting to retry; max_jobs " + jobs.max_jobs + ", " +
                 (jobs.started_since_start || 0) + " started since start"],
        ["Watchdog", watchdogText],
        (status.stuck_components || []).length
            ? ["Not answering", visible(status.stuck_components.join(", "))]
            : null,
    ], "daemon-details");
}

/* A job's name, linked to its task's or rule's page, and its kind. */
export function jobName(job, link) {
    const kind = job.task !== undefined ? "task" : "watch";
    return el("span", {}, link([kind, job[kind]], visible(job[kind])), " ", el("small", { class: "wk-muted" }, kind));
}

export function runningRows(status, link) {
    return ((status.jobs || {}).running || []).map(job => ({
        key: job.run_id,
        cells: [
            jobName(job, link),
            link(["run", job.run_id], job.run_id),
            job.about ? el("span", { class: "wk-path" }, visible(job.about)) : "",
            String(job.pid),
            label(job.phase, job.phase === "running" ? "blue" : "orange"),
            progressCell(job),
            budgetCell(job),
        ],
        job,
    }));
}

/* The next fires from Next: local time and zone, with daylight-saving marks. */
export function nextFires(preview, count) {
    if (!preview)
        return el("span", { class: "wk-muted" }, "…");
    const fires = (preview.fires || []).slice(0, count || 3);
    if (fires.length === 0)
        return el("span", { class: "wk-muted" }, (preview.notes || []).map(note => visible(note)).join("; ") || "none");
    return el("ul", { class: "wk-fires", id: count ? "next-fires" : null }, fires.map(fire =>
        el("li", { title: visible(fire.utc) },
           visible(fire.weekday) + " " + visible(fire.local) + " " + visible(fire.abbreviation),
           fire.mark ? el("span", {}, " ", label(fire.mark.kind, "orange"), " ", el("small", { class: "wk-mark" }, visible(fire.mark.text))) : null)));
}

export function lastRun(task) {
    const fleet = task.fleet_state;
    let node;
    if (fleet && fleet.last_fire) {
        const fire = fleet.last_fire;
        node = el("span", {}, label(fire.outcome || fire.state), " on " + visible(fire.host) + " " + when(fire.finished_at || fire.started_at || fire.instant));
    } else {
        const last = (task.last_runs || [])[0];
        node = last ? el("span", {}, label(last.outcome), " " + when(last.started_at) + ", " + visible(last.duration)) : el("span", { class: "wk-muted" }, "never");
    }
    if (fleet && fleet.held_fire)
        node.append(" ", label("fire " + fleet.held_fire + " held", "red"));
    return node;
}

export function taskRows(status, previews, link) {
    return (((status.tasks || {}).tasks) || []).map(task => ({
        key: task.name,
        cells: [
            link(["task", task.name], visible(task.name)),
            visible(task.schedule) + (task.fleet === "one" ? " (fleet: one host)" : ""),
            nextFires(previews[task.name]),
            lastRun(task),
            (task.running || []).length ? label((task.running.length) + " running", "blue") : "",
        ],
        task,
    }));
}

export function watchProblems(rule) {
    const problems = [];
    if (rule.root_missing)
        problems.push("root missing");
    if (rule.unwatched_total > 0)
        problems.push(rule.unwatched_total + " unwatched");
    if (rule.overflows > 0)
        problems.push(rule.overflows + " overflow(s)");
    for (const tree of rule.polled_trees || []) {
        if (tree.state !== "polling" && tree.state !== "first pass")
            problems.push("poll " + visible(tree.tree) + " " + visible(tree.state));
    }
    return problems.length ? el("span", { class: "wk-problems" }, problems.map(problem => label(problem, "orange"))) : "-";
}

export function watchRows(status, link) {
    return (((status.watches || {}).rules) || []).map(rule => ({
        key: rule.name,
        cells: [
            link(["watch", rule.name], visible(rule.name)),
            el("span", { class: "wk-path" }, visible(rule.root)),
            visible(rule.tree_method || rule.method) + (rule.method && rule.method !== rule.tree_method ? " (method = " + visible(rule.method) + ")" : ""),
            String(rule.inotify_watches !== undefined ? rule.inotify_watches : (rule.fanotify_marks !== undefined ? rule.fanotify_marks + " mark(s)" : "-")),
            String(rule.events_seen || 0),
            String(rule.jobs_submitted || 0),
            String(rule.pending_settle || 0),
            watchProblems(rule),
        ],
        rule,
    }));
}

/* This host's membership: its lease as its daemon holds it. */
export function clusterDetails(cluster) {
    if (!cluster)
        return null;
    if (cluster.stuck)
        return alert("warning", "The cluster subsystem did not answer in time");
    const state = cluster.lease_state;
    const lease = state === "held"
        ? el("span", {}, label("held", "green"), " lease " + visible(cluster.lease_id) +
             (cluster.lease_expires_in_s !== null ? ", expires in " + duration(cluster.lease_expires_in_s) : "") +
             (cluster.last_renewal_age_s !== null ? ", renewed " + duration(cluster.last_renewal_age_s) + " ago" : ""))
        : el("span", {}, label(state === "fencing" ? "fencing: fleet jobs stopped" : "no lease: fleet fires held", "red"),
             cluster.last_error ? " " + visible(cluster.last_error) : "");
    return descriptionList([
        ["Member", el("span", { id: "cluster-member" }, visible(cluster.name))],
        ["Prefix", visible(cluster.prefix)],
        ["etcd", visible(cluster.endpoint_in_use)],
        ["Lease", lease],
        ["Lease TTL", visible(cluster.lease_ttl)],
    ], "cluster-details");
}

export { seconds };
