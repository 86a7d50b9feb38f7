// A swift-configuration provider over a config file's bytes that the loader already read.
// swift-configuration's own `FileProvider` reads the file itself (async, whole file, no size
// bound) — that would be a second, unbounded read of a file we have just checked. So we read
// once, bounded, and hand the same bytes to its snapshot type (`JSONSnapshot`, the parser
// `FileProvider<JSONSnapshot>` uses); this wrapper only makes that snapshot a `ConfigProvider`.
import HangMonitor
internal import Configuration

struct ConfigurationFileProvider<Snapshot: FileConfigSnapshot>: ConfigProvider {
    private let parsed: Snapshot

    /// Throws what the snapshot's parser throws (the loader turns it into a `ConfigurationError`).
    init(bytes: [UInt8], path: String) throws {
        parsed = try Snapshot(data: bytes.span.bytes, providerName: "FileProvider<\(Snapshot.self)>(\(path))",
                              parsingOptions: .default)
    }

    var providerName: String { parsed.providerName }

    func value(forKey key: AbsoluteConfigKey, type: ConfigType) throws -> LookupResult {
        try parsed.value(forKey: key, type: type)
    }

    nonisolated(nonsending) func fetchValue(forKey key: AbsoluteConfigKey, type: ConfigType) async throws -> LookupResult {
        try value(forKey: key, type: type)
    }

    // The package is built with NonisolatedNonsendingByDefault; its requirements say so explicitly here.
    nonisolated(nonsending) func watchValue<Return: ~Copyable>(
        forKey key: AbsoluteConfigKey, type: ConfigType,
        updatesHandler: nonisolated(nonsending) (_ updates: ConfigUpdatesAsyncSequence<Result<LookupResult, any Error>, Never>) async throws -> Return
    ) async throws -> Return {
        try await watchValueFromValue(forKey: key, type: type, updatesHandler: updatesHandler)
    }

    func snapshot() -> any ConfigSnapshot { parsed }

    nonisolated(nonsending) func watchSnapshot<Return: ~Copyable>(
        updatesHandler: nonisolated(nonsending) (_ updates: ConfigUpdatesAsyncSequence<any ConfigSnapshot, Never>) async throws -> Return
    ) async throws -> Return {
        try await watchSnapshotFromSnapshot(updatesHandler: updatesHandler)
    }
}
