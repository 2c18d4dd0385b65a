/// Fixed journal MESSAGE_IDs for the events an operator searches for, e.g.
/// `journalctl -u watchkeeper MESSAGE_ID=a2f80729ec6c45298dafab0ee7b10f49 -o cat`.
/// Never change one: scripts and alerts depend on them. Listed in docs/operations.md, and
/// explained for `journalctl -x` in catalog/watchkeeper.catalog (a test keeps them in step).
public enum MessageID: String, CaseIterable, Sendable {
    // The daemon's life.
    case started = "feda4b99a3084ccfa37eefbf266e3dfb", ready = "89f688baebb54f2a98b1c69d4460b585",
        stopping = "7943fdcc39d047cdbb77a7dc61002afa", stopped = "13b1128ed1514912859412cac78fde3f"
    // Its configuration.
    case reloadSucceeded = "efd3e24569174baf99b0879641b1ab8b", reloadFailed = "c95800433a154f6a837f449a59dd5b53",
        configInvalid = "b7a06f2d7e6446bea7ae3a6567d7aea6"
    // Jobs.
    case runFinished = "b665bf3c2f6c4766ab20db516c7d25dd", jobExpiring = "8dfa9a8effc84013a8510927e5da2b0f",
        runSkipped = "26b3c8c426154b11861bc88b678724f4"
    // What it reports about itself.
    case dump = "a2f80729ec6c45298dafab0ee7b10f49", queueStuck = "a11f84df9593472fbc9eb1bc8c97edf0"
    // The control socket.
    case controlRefused = "c2a58c00ebef4931900a00cbe83f87be"
    // The fleet (docs/fleet.md).
    case clusterUnavailable = "618a1e221eb54da7b465cfb9b8cb7db4", clusterAvailable = "af502e6fbd404260bb71cb9b106d8a00",
        fleetLeaseLost = "0ac4f3801f8a4493bea37bd51d2f1315", fleetTakeover = "e1a8b18fd8fa49f4b8ce0860d92a6326"
}
