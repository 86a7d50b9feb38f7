// The one signal-name table (Sources/HangwatchPlatform/SignalNames.swift): reports, capture
// messages and `hangwatch run --kill-signal` read and spell signals through it alike.
import Glibc
import HangwatchPlatform
import Testing

@Suite struct SignalNamesTests {
    @Test func everyNumberRoundTripsThroughItsName() {
        for number in Int32(1)...64 {
            #expect(SignalNames.number(SignalNames.name(number)) == number, "\(SignalNames.name(number))")
        }
        #expect(SignalNames.name(SIGKILL) == "SIGKILL")
        #expect(SignalNames.name(SIGSYS) == "SIGSYS")
        #expect(SignalNames.name(__libc_current_sigrtmin()) == "SIGRTMIN+0", "glibc's SIGRTMIN is the first real-time name")
        #expect(SignalNames.name(32) == "SIG32", "glibc's own real-time signals have no name")
        #expect(SignalNames.name(0) == "SIG0")
        #expect(SignalNames.name(99) == "SIG99")
    }

    @Test func usersSpellingsAreRead() {
        #expect(SignalNames.number("TERM") == SIGTERM)
        #expect(SignalNames.number("sigkill") == SIGKILL)
        #expect(SignalNames.number("SIGUSR1") == SIGUSR1)
        #expect(SignalNames.number("9") == SIGKILL)
        #expect(SignalNames.number("rtmin+2") == __libc_current_sigrtmin() + 2)
        for refused in ["", "0", "65", "-9", "SIG", "KILLER", "SIGRTMIN+31", "SIGRTMIN+-1", "9 "] {
            #expect(SignalNames.number(refused) == nil, "\(refused)")
        }
    }
}
