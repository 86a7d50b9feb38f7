// Where a user's files go by default: the XDG base directories and the home directory they
// fall back on (the database in $XDG_STATE_HOME, the symbol cache in $XDG_CACHE_HOME).
#if canImport(Glibc)
import Glibc
#endif

package enum UserDirectories {
    /// `HOME`, else the password database's home of the real user; nil when neither provides one.
    package static func home(environment: [String: String]) -> String? { home(variable: { environment[$0] }) }

    /// The same, each variable asked of `variable` (`processVariable` reads just that one).
    package static func home(variable: (String) -> String?) -> String? {
        variable("HOME") ?? getpwuid(getuid()).flatMap { $0.pointee.pw_dir.map { String(cString: $0) } }
    }

    /// This process's variable `name`, read alone: the whole environment made a dictionary
    /// (ProcessInfo's `environment`) costs a command's start-up 0.65 M instructions.
    package static func processVariable(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
}
