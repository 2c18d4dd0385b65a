import Foundation
import WatchkeeperCore

/// The cost of finding a cron task's next fire, for the rarest dates: February 29 seen
/// from 2096 (the next is in 2104, 2100 not being leap) and an expression that never fires.
/// The scheduler asks once per fire and once per reload per task.
func runCronBenchmark() {
    do {
        let berlin = try TimeZoneRules.load(identifier: "Europe/Berlin")
        let cases: [(String, String, Int64)] = [
            ("0 0 29 2 *", "February 29 from 2096", 3_981_312_000),
            ("0 0 30 2 *", "never (February 30)", 1_767_225_600),
            ("*/5 * * * *", "every five minutes", 1_767_225_600),
            ("30 2 * * *", "daily 02:30 (a DST gap in March)", 1_774_000_000),
        ]
        for (text, what, start) in cases {
            let expression = try CronExpression(parsing: text)
            let rounds = 2_000
            let clock = ContinuousClock()
            var found = 0
            let elapsed = clock.measure {
                for round in 0..<rounds where expression.nextFire(after: start + Int64(round) * 61, in: berlin) != nil { found += 1 }
            }
            let micros = Double(elapsed.components.attoseconds) / 1e12 / Double(rounds) + Double(elapsed.components.seconds) * 1e6 / Double(rounds)
            print(String(format: "cron: %-34@ %-14@ %8.1f µs per next fire (%d of %d found)", what as NSString, "\"\(text)\"" as NSString, micros, found, rounds))
        }
    } catch {
        print("cron: failed: \(error)")
    }
}
