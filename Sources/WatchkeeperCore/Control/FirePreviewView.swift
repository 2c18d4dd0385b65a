/// `watchkeeper next`: the Next reply (or the same computed from a file) as text, in the
/// manner of `systemd-analyze calendar --iterations`: per task a header, its notes, then
/// one line per fire: the wall time with weekday, abbreviation and UTC offset, the same
/// instant in UTC, and what a daylight-saving change did to it. Every text is escaped:
/// names and zones come from the configuration, abbreviations from zone files.
public enum FirePreviewView {
    public static func render(_ tasks: [DumpValue]) -> [String] {
        var lines: [String] = []
        for task in tasks {
            if !lines.isEmpty { lines.append("") }
            // A manual task has no times to show, so no zone either.
            let zone = task["schedule"]?.stringValue == "manual" ? "" : ", zone \(StatusView.text(task["zone"]))"
            lines.append("\(StatusView.text(task["name"])): \(StatusView.text(task["schedule"]))\(zone)")
            for note in task["notes"]?.arrayValue ?? [] { lines.append("  \(StatusView.text(note))") }
            let fires = task["fires"]?.arrayValue ?? []
            let locals = fires.map { fire in
                "\(StatusView.text(fire["weekday"])) \(StatusView.text(fire["local"])) \(StatusView.text(fire["abbreviation"]))"
            }
            let width = locals.map(\.count).max() ?? 0
            for (fire, local) in zip(fires, locals) {
                var line = "  " + local + String(repeating: " ", count: width - local.count)
                line += " \(StatusView.text(fire["utc_offset"]))  \(StatusView.text(fire["utc"]))"
                if let mark = fire["mark"], mark != .null { line += "  \(StatusView.text(mark["text"]))" }
                lines.append(line)
            }
        }
        return lines
    }
}
