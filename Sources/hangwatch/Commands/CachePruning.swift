import HangwatchSymbolication
import FoundationEssentials

/// The user's symbol cache and the debuginfod files kept in it, pruned to their bounds
/// (docs/symbol-cache.md): what `hangwatch prune` adds to the database's own pruning, so that
/// every file hangwatch writes has a bound that `prune` enforces. Each store prunes as it
/// writes too; this catches what was left by writers killed mid-write, or bounds lowered since.
enum CachePruning {
    static func pruneSymbolCache() {
        guard let cache = SymbolCache.commandLine else { return }
        cache.prune()
        DebuginfodStore.standard(environment: ProcessInfo.processInfo.environment, cache: cache).prune()
    }
}
