// The bench's yardstick for start-up (section 7): a Foundation hello-world, built by the same
// package in the same configuration as `hangwatch`.
import Foundation

print("hello \(ProcessInfo.processInfo.processIdentifier)")
