// Where a user's files go by default: the XDG base directories and the home directory they
// fall back on (the database in $XDG_STATE_HOME, the symbol cache in $XDG_CACHE_HOME).
#if canImport(Glibc)
import Glibc
#endif

package enum UserDirectories {
    /// `HOME`, else the password database's home of the real user; nil when neither says.
    package static func home(environment: [String: String]) -> String? {
        environment["HOME"] ?? getpwuid(getuid()).flatMap { $0.pointee.pw_dir.map { String(cString: $0) } }
    }
}
