/// `watchkeeper history NAME`: a History reply as a table, newest first. Tasks and watch
/// rules alike; a watch rule's runs name their file last. Every text from the reply is
/// escaped (`LineEscaping`), the file's path included whatever bytes it holds.
public enum HistoryView {
    public static func render(_ reply: DumpValue) -> [String] {
        let runs = reply["runs"]?.arrayValue ?? []
        let isWatch = reply["kind"]?.stringValue == "watch"
        // Only fleet tasks' runs name a host: the column is there when one does.
        let hasHost = runs.contains { present($0["host"]) != nil }
        let rows = runs.map { run -> [String] in
            let exit = present(run["exit_code"]).map(StatusView.text) ?? present(run["signal"]).map(StatusView.text) ?? "-"
            let started = present(run["started_at"]).map(StatusView.text) ?? StatusView.text(run["finished_at"])
            return [started, run["duration_s"]?.doubleValue.map { Duration.seconds($0).compactDescription } ?? "-",
                    StatusView.text(run["outcome"]), exit, StatusView.text(run["run_id"])]
                + (hasHost ? [present(run["host"]).map(StatusView.text) ?? "-"] : [])
                + (isWatch ? [present(run["path_bytes"]).map(StatusView.path) ?? StatusView.path(run["path"])] : [])
        }
        return TableView.render(header: ["STARTED", "DURATION", "OUTCOME", "EXIT", "RUN"] + (hasHost ? ["HOST"] : []) + (isWatch ? ["FILE"] : []), rows: rows)
    }

    private static func present(_ value: DumpValue?) -> DumpValue? {
        value == .null ? nil : value
    }
}

/// `watchkeeper fleet`: a Fleet reply as a table, newest first. Every text is escaped: the
/// values come from etcd, which any host of the fleet (or anyone with access) writes.
public enum FleetView {
    public static func render(_ reply: DumpValue) -> [String] {
        let fires = reply["fires"]?.arrayValue ?? []
        guard !fires.isEmpty else { return ["no fires recorded in etcd yet"] }
        let rows = fires.map { fire -> [String] in
            let started = fire["started_at"].flatMap { $0 == .null ? nil : $0 }
            let finished = fire["finished_at"].flatMap { $0 == .null ? nil : $0 }
            var outcome = fire["outcome"].flatMap { $0 == .null ? nil : StatusView.text($0) } ?? StatusView.text(fire["state"])
            if let from = fire["taken_over_from"], from != .null { outcome += " (taken over from \(StatusView.text(from)))" }
            let took: String
            if let start = started?.stringValue.flatMap(WallTime.init(iso8601:)), let end = finished?.stringValue.flatMap(WallTime.init(iso8601:)) {
                took = Duration.seconds(end.secondsSinceEpoch - start.secondsSinceEpoch)
                    .adding(milliseconds: (Int64(end.nanoseconds) - Int64(start.nanoseconds)) / 1_000_000).compactDescription
            } else {
                took = "-"
            }
            return [StatusView.text(fire["instant"]), StatusView.text(fire["task"]), StatusView.text(fire["host"]), StatusView.text(fire["run_id"]), outcome, took]
        }
        return TableView.render(header: ["FIRE", "TASK", "HOST", "RUN", "OUTCOME", "DURATION"], rows: rows)
    }
}

extension Duration {
    fileprivate func adding(milliseconds: Int64) -> Duration { self + .milliseconds(milliseconds) }
}
