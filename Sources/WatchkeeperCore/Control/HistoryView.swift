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
