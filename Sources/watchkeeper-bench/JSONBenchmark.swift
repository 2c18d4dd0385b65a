import Foundation
import WatchkeeperCore

/// The control socket's JSON reader, measured again (issue 23): `DumpValue.parse` against
/// Foundation's JSONDecoder (a Codable call) and JSONSerialization (a tree), now that
/// FoundationEssentials is in the release binary anyway (through a dependency), so linking
/// the decoder no longer costs what docs/measurements/control.md first measured. What is
/// left to compare: time per call, and what a hostile 64 KiB request does to each.
func runJSONBenchmark() {
    struct Call: Decodable {
        let method: String
        let parameters: [String: String]?
        let more: Bool?
    }
    let status = Array(#"{"method":"io.watchkeeper.Control.Status","more":false}"#.utf8)
    let trigger = Array(#"{"method":"io.watchkeeper.Control.Trigger","parameters":{"task":"nightly-backup-of-the-photo-archive"}}"#.utf8)
    let long = Array(#"{"method":"io.watchkeeper.Control.History","parameters":{"name":""#.utf8)
        + [UInt8](repeating: UInt8(ascii: "a"), count: 60_000) + Array(#""}}"#.utf8)
    // The deepest nesting a 64 KiB request can hold.
    let deep = [UInt8](repeating: UInt8(ascii: "["), count: 32_000) + [UInt8](repeating: UInt8(ascii: "]"), count: 32_000)

    func time(_ rounds: Int, _ body: () -> Bool) -> (perCall: Double, ok: Bool) {
        var ok = true
        let clock = ContinuousClock()
        let elapsed = clock.measure { for _ in 0..<rounds { ok = body() && ok } }
        let (seconds, attoseconds) = elapsed.components
        return ((Double(seconds) + Double(attoseconds) / 1e18) / Double(rounds) * 1e6, ok)
    }

    print("JSON: one control call read, µs per call (release build; \(ProcessInfo.processInfo.activeProcessorCount) CPUs)")
    print("input                         bytes   DumpValue.parse   JSONDecoder(Call)   JSONSerialization")
    for (name, input, rounds) in [("Status call", status, 200_000), ("Trigger call", trigger, 200_000), ("History call, 60 KB name", long, 2_000)] {
        let data = Data(input)
        let ours = time(rounds) { (try? DumpValue.parse(json: input)) != nil }
        let decoder = time(rounds) { (try? JSONDecoder().decode(Call.self, from: data)) != nil }
        let serialization = time(rounds) { (try? JSONSerialization.jsonObject(with: data)) != nil }
        print("\(name.padding(toLength: 28, withPad: " ", startingAt: 0)) \(String(input.count).leftPad(6))   \(format(ours.perCall).leftPad(15))   \(format(decoder.perCall).leftPad(17))   \(format(serialization.perCall).leftPad(17))")
    }
    // A hostile request: 32,000 nested arrays. Each reader must refuse it, not recurse.
    let data = Data(deep)
    let ours = time(100) { (try? DumpValue.parse(json: deep)) == nil }
    let decoder = time(100) { (try? JSONDecoder().decode(Call.self, from: data)) == nil }
    let serialization = time(100) { (try? JSONSerialization.jsonObject(with: data)) == nil }
    print("\("32,000 nested arrays".padding(toLength: 28, withPad: " ", startingAt: 0)) \(String(deep.count).leftPad(6))   \(format(ours.perCall).leftPad(15))   \(format(decoder.perCall).leftPad(17))   \(format(serialization.perCall).leftPad(17))")
    print("refused: DumpValue.parse \(ours.ok), JSONDecoder \(decoder.ok), JSONSerialization \(serialization.ok)")
}

private func format(_ micros: Double) -> String {
    String(format: "%.2f", micros)
}

private extension String {
    func leftPad(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
