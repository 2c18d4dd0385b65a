public enum WatchkeeperVersion {
    public static let current = "0.1.0"
}
